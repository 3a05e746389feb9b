"""Pipeline-parallel step (CoCoNet Figure 12): the last layer of a stage all-reduces its
partial sums within the stage's model-parallel group, adds bias, dropout and residual, and
sends the activations to the same rank of the next stage."""

from workbench import *

T = Size("T")
H = Size("H", multiple_of=P)
sizes = {"T": 8192, "H": 12288}
stage0, stage1 = Stage("stage0"), Stage("stage1")


def build(dtype=float16) -> "Program":
    y = Tensor(dtype, [T, H], Local, "y", group=stage0)  # partial sums of a row-parallel MatMul
    b = Tensor(dtype, [H], Replicated, "b", group=stage0)
    r = Tensor(dtype, [T, H], Replicated, "r", group=stage0)
    s = AllReduce(Sum, y)
    z = Compute(Dropout(s + b, 0.1) + r)
    out = Send(z, stage1)
    return Pipeline([stage0, stage1], inputs=[y, b, r], outputs=[out], name="pipeline")


program = build()
