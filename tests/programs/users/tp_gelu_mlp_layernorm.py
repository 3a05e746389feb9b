"""A Megatron tensor-parallel MLP block (issue 39 item 5): column-parallel W1 with its bias and
the exact (erf) GeLU, row-parallel W2, AllReduce of the partial sums, residual + LayerNorm.
The GeLU is one statement no GEMM library runs (cuBLASLt's GeLU is the tanh form), so it is
one kernel after the GEMM as written and `s.fuse(mm, h)` is refused as a fuse that would
change nothing; what pays is the AllReduce + residual + LayerNorm as one kernel (`fuse-ar-ln`)
and the down projection overlapped with the AllReduce (`overlap-mm-ar`)."""

from workbench import *
from workbench import ir

T = Size("T", multiple_of=P)
H = Size("H", multiple_of=P)
F = Size("F", multiple_of=P)
sizes = {"T": 2048, "H": 4096, "F": 16384}

x = Tensor(bfloat16, [T, H], Replicated, "x")
W1 = Tensor(bfloat16, [H, F], Sliced(1), "W1")
b1 = Tensor(bfloat16, [F], Sliced(0), "b1")
W2 = Tensor(bfloat16, [F, H], Sliced(0), "W2")
gamma = Tensor(bfloat16, [H], Replicated, "gamma")
beta = Tensor(bfloat16, [H], Replicated, "beta")
mm = MatMul(x, W1)
h = Compute(gelu(mm + b1), name="h")
y = MatMul(h, W2)
ar = AllReduce(Sum, y)
out = Compute(layer_norm(ar + x, gamma, beta), name="out")
program = Program(inputs=[x, W1, b1, W2, gamma, beta], outputs=[out], name="tp_gelu_mlp_ln")
stats = [s.out.name for s in program.stmts if isinstance(s.op, ir.ReduceAxis)]


@schedule(program)
def fuse_ar_ln(s):
    """The AllReduce, residual and LayerNorm as one row kernel."""
    s.fuse(ar, *stats, out)


@schedule(program)
def overlap_mm_ar(s):
    """The down projection overlapped with NCCL's AllReduce, 4 chunks of rows."""
    s.overlap(y, ar)
