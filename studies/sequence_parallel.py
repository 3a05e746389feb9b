"""Megatron's sequence-parallel MLP (Korthikanti et al. 2022) beside the model-parallel layer:
activations are sharded along the sequence (rows) between the tensor-parallel blocks, so the
AllReduce of the row-parallel layer becomes an AllGather before the column-parallel MatMul and
a ReduceScatter after the row-parallel one.

    xg = AllGather(x)                 x: [T, H] Sliced(0), each rank its T/P tokens
    h  = gelu(xg @ W1)                W1: [H, F] Sliced(1), column-parallel
    y  = h @ W2                       W2: [F, H] Sliced(0), row-parallel: partial sums
    out = ReduceScatter(Sum, y) + r   back to T/P tokens per rank, the residual added

Schedules overlap the communication with the MatMuls chunk by chunk, both directions (the
pattern torch's symmetric-memory `fused_all_gather_matmul` / `fused_matmul_reduce_scatter`
and FLUX fuse): `overlap-ag-mm` (rows of x gathered while earlier rows are multiplied; the
NCCL side is chunked by root, so chunk i is contiguous rows), `overlap-mm-rs` (the partial
sums of rows reduced onto their owner as the MatMul finishes them), and `overlap-both`.
Sizes: GPT-3 175B's hidden size, 4H FFN, bf16.
"""

from workbench import *

T = Size("T", multiple_of=P)  # tokens (batch x sequence)
H = Size("H", multiple_of=P)  # hidden
F = Size("F", multiple_of=P)  # FFN (4H)
sizes = {"T": 8192, "H": 12288, "F": 49152}


def build(dtype=bfloat16, chunks=4, name="sequence_parallel"):
    x = Tensor(dtype, [T, H], Sliced(0), "x")
    W1 = Tensor(dtype, [H, F], Sliced(1), "W1")
    W2 = Tensor(dtype, [F, H], Sliced(0), "W2")
    r = Tensor(dtype, [T, H], Sliced(0), "r")  # the residual, sequence-sharded
    xg = AllGather(x)
    h1 = MatMul(xg, W1)
    h = Compute(gelu(h1))
    y = MatMul(h, W2)
    ys = ReduceScatter(Sum, y)
    out = Compute(ys + r)
    program = Program(inputs=[x, W1, W2, r], outputs=[out], name=name)

    @schedule(program)
    def overlap_ag_mm(s):
        """AllGather of x overlapped with the column-parallel MatMul, chunk by chunk."""
        s.overlap(xg, h1, chunks=chunks)

    @schedule(program)
    def overlap_mm_rs(s):
        """The row-parallel MatMul overlapped with the ReduceScatter of its partial sums."""
        s.overlap(y, ys, chunks=chunks)

    @schedule(program)
    def overlap_both(s):
        """Both overlaps."""
        s.overlap(xg, h1, chunks=chunks)
        s.overlap(y, ys, chunks=chunks)

    return program, [overlap_ag_mm, overlap_mm_rs, overlap_both]


program, schedules = build()
