"""A tensor-parallel attention output projection with residual + LayerNorm: the row-parallel
MatMul leaves partial sums, AllReduce them, add the residual, LayerNorm the sum. The fused
schedule runs the reduce-scatter, residual, LayerNorm (its statistics are axis reductions)
and the gathers in one row kernel; the overlapped one also pipelines the MatMul with it."""

from workbench import *
from workbench import ir

T = Size("T", multiple_of=P)
H = Size("H", multiple_of=P)
sizes = {"T": 4096, "H": 4096}

x = Tensor(bfloat16, [T, H], Sliced(1), "x")  # attention output, heads split over ranks
Wo = Tensor(bfloat16, [H, H], Sliced(0), "Wo")  # row-parallel output projection
r = Tensor(bfloat16, [T, H], Replicated, "r")  # residual stream
gamma = Tensor(bfloat16, [H], Replicated, "gamma")
beta = Tensor(bfloat16, [H], Replicated, "beta")
y = MatMul(x, Wo)
summed = AllReduce(Sum, y)
h = Compute(summed + r, name="h")
out = Compute(layer_norm(h, gamma, beta, eps=1e-5), name="out")
program = Program(inputs=[x, Wo, r, gamma, beta], outputs=[out, h], name="tp_attn_out_ln")
# layer_norm's two statistics (mean, variance): statements of their own that schedules move
stats = [s.out.name for s in program.stmts if isinstance(s.op, ir.ReduceAxis)]


@schedule(program)
def fuse_rs_c_ag(s):
    """Reduce-scatter of rows, residual, LayerNorm, both gathers: one row kernel."""
    rs, ag = s.split(summed)
    moved = s.reorder(h, *stats, out, before=ag)
    s.fuse(rs, *moved, h, out)


@schedule(program)
def overlap_mm_fuse_rs_c_ag(s):
    """fuse-rs-c-ag overlapped with the MatMul, 4 chunks of rows."""
    rs, ag = s.split(summed)
    moved = s.reorder(h, *stats, out, before=ag)
    s.fuse(rs, *moved, h, out)
    s.overlap(y, rs, chunks=4)
