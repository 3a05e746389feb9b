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
Schedules fuse the SwiGLU into the second GEMM's epilogue kernel (`fuse-swiglu`). What is not
generated yet (issue 24, item 2): chunks of the AllToAll overlapped with the expert GEMMs
(`check` refuses that overlap with the forms the backends run) and the peer-memory AllToAll
kernel inside an NVLink domain; the AllToAll runs as NCCL's.
"""

from workbench import *

T = Size("T", multiple_of=P)  # tokens per rank (capacity: T/P per expert)
H = Size("H")  # hidden size
F = Size("F")  # expert FFN size
sizes = {"T": 4096, "H": 4096, "F": 14336}


def build(dtype=bfloat16, name="moe"):
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
    def fuse_swiglu(s):
        """The SwiGLU (silu(h1) * h3) as the epilogue of the W3 GEMM: one kernel fewer."""
        s.fuse(h3, h)

    return program, [fuse_swiglu]


program, schedules = build()
