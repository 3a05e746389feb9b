"""An MoE layer whose dispatch scales and casts the tokens (f32 activations, a per-step scale,
bf16 on the wire and in the expert) and whose combine gates the expert's output: the
peer-memory AllToAll kernel fused with the computation before it (on the source's rows, as
they are loaded) and after it (design note 79)."""

from workbench import *

T = Size("T", multiple_of=P)
H = Size("H")
sizes = {"T": 4096, "H": 4096}

x = Tensor(float32, [T, H], Local, "x")  # this rank's tokens, grouped by expert
scale = Variable(float32, "scale")
gate = Tensor(bfloat16, [T, 1], Local, "gate", range=(0.0, 1.0))
W = Tensor(bfloat16, [H, H], Local, "W")  # this rank's expert
xs = Compute(Cast(bfloat16, x * scale), name="xs")
d = AllToAll(xs, name="d")
y = MatMul(d, W, name="y")
back = AllToAll(y, name="back")
out = Compute(back * gate, name="out")
program = Program(inputs=[x, scale, gate, W], outputs=[out], name="moe_scaled_dispatch")


@schedule(program)
def fuse_dispatch(s):
    """The scale and cast computed on the source's rows inside the dispatch kernel."""
    s.fuse(xs, d)


@schedule(program)
def fuse_both(s):
    """The dispatch with its cast, and the combine with the gate: two peer-memory kernels."""
    s.fuse(xs, d)
    s.fuse(back, out)
