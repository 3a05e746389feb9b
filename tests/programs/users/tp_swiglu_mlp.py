"""A tensor-parallel SwiGLU MLP (Llama's): column-parallel gate and up projections, the SiLU
gate (one kernel after the GEMMs, as written: no GEMM library runs it, so `s.fuse(up, h)`
would change nothing and is refused), row-parallel down projection, AllReduce of the partial
sums, overlapped with the down projection."""

from workbench import *

T = Size("T", multiple_of=P)
H = Size("H")
F = Size("F", multiple_of=P)
sizes = {"T": 4096, "H": 4096, "F": 11008}

x = Tensor(bfloat16, [T, H], Replicated, "x")
Wg = Tensor(bfloat16, [H, F], Sliced(1), "Wg")
Wu = Tensor(bfloat16, [H, F], Sliced(1), "Wu")
Wd = Tensor(bfloat16, [F, H], Sliced(0), "Wd")
gate = MatMul(x, Wg)
up = MatMul(x, Wu)
h = Compute(silu(gate) * up, name="h")
y = MatMul(h, Wd)
out = AllReduce(Sum, y)
program = Program(inputs=[x, Wg, Wu, Wd], outputs=[out], name="tp_swiglu")


@schedule(program)
def overlap_mm_ar(s):
    """The down projection overlapped with the AllReduce in 4 chunks."""
    s.overlap(y, out, chunks=4)
