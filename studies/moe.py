"""A Mixtral-like MoE expert layer on P GPUs, one expert per rank (expert parallelism): each
rank's tokens arrive grouped by destination expert with a fixed capacity (T/P tokens per
expert and rank: the per-destination counts are fixed when the program is traced), an
AllToAll dispatches them to their expert's rank, the expert's SwiGLU MLP runs on its own
(Local) weights, and a second AllToAll combines the results back to the tokens' ranks, where
the router's gate weights scale them.

    d = AllToAll(x)                      rank e holds every rank's tokens for expert e
    h = silu(d @ W1) * (d @ W3)          the expert's SwiGLU, its own W1, W3, W2
    y = h @ W2
    out = AllToAll(y) * gate             back to the tokens' ranks, gated

Mixtral 8x7B's sizes: H = 4096, F = 14336, bf16; 8 experts on 8 GPUs (2-8 ranks run it).
Schedules overlap
chunks of the AllToAlls with the expert GEMMs (`overlap-a2a-mm`: the dispatch with the W1 GEMM;
`overlap-mm-a2a`: the W2 GEMM with the combine; `overlap-both`; design note 79): chunk i of the
exchanged rows is NCCL send/recv pieces, each rank taking the chunks in its own rotated order,
so that every step loads every link), and run the combine with the gate as one peer-memory
AllToAll kernel inside the NVLink domain (`fuse-combine-gate`).
"""

from workbench import *

T = Size("T", multiple_of=P)  # tokens per rank (capacity: T/P per expert)
H = Size("H")  # hidden size
F = Size("F")  # expert FFN size
sizes = {"T": 4096, "H": 4096, "F": 14336}


def build(dtype=bfloat16, chunks=4, name="moe"):
    x = Tensor(dtype, [T, H], Local, "x")  # this rank's tokens, grouped by expert
    gate = Tensor(dtype, [T, 1], Local, "gate", range=(0.0, 1.0))  # router weights
    W1 = Tensor(dtype, [H, F], Local, "W1")  # this rank's expert
    W3 = Tensor(dtype, [H, F], Local, "W3")
    W2 = Tensor(dtype, [F, H], Local, "W2")
    d = AllToAll(x)
    h1 = MatMul(d, W1)
    h3 = MatMul(d, W3)
    h = Compute(silu(h1) * h3)
    y = MatMul(h, W2)
    back = AllToAll(y)
    out = Compute(back * gate)
    program = Program(inputs=[x, gate, W1, W3, W2], outputs=[out], name=name)

    @schedule(program)
    def fuse_combine_gate(s):
        """The combine and the router's gate as one peer-memory AllToAll kernel inside the
        NVLink domain: each rank loads its tokens' rows from the experts' ranks over CUDA IPC
        and gates them before storing (no NCCL, no separate gate kernel)."""
        s.fuse(back, out)

    @schedule(program)
    def overlap_a2a_mm(s):
        """The dispatch's chunks overlapped with the W1 GEMM: chunk i of the exchanged rows is
        multiplied while chunk i+1 arrives (each rank takes the chunks in its own rotated
        order, so every step's sends and receives spread over all links)."""
        s.overlap(d, h1, chunks=chunks)

    @schedule(program)
    def overlap_mm_a2a(s):
        """The W2 GEMM overlapped with the combine: rows are sent back as the GEMM finishes
        them."""
        s.overlap(y, back, chunks=chunks)

    @schedule(program)
    def overlap_both(s):
        """Both overlaps."""
        s.overlap(d, h1, chunks=chunks)
        s.overlap(y, back, chunks=chunks)

    return program, [fuse_combine_gate, overlap_a2a_mm, overlap_mm_a2a, overlap_both]


program, schedules = build()
