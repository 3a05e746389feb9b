"""Megatron-style model-parallel layer (CoCoNet Figure 11): the row-parallel MatMul of a
transformer block leaves partial sums on every rank; AllReduce them, then add the bias, apply
dropout and add the residual."""

from workbench import *

T = Size("T")  # tokens: batch x sequence
H = Size("H", multiple_of=P)  # hidden size
sizes = {"T": 8192, "H": 12288}


def build(dtype=float16) -> "Program":
    x = Tensor(dtype, [T, H], Sliced(1), "x")  # activations, column-sliced by the layer before
    W = Tensor(dtype, [H, H], Sliced(0), "W")  # row-parallel weight
    b = Tensor(dtype, [H], Replicated, "b")
    r = Tensor(dtype, [T, H], Replicated, "r")  # residual
    y = MatMul(x, W)
    s = AllReduce(Sum, y)
    out = Compute(Dropout(s + b, 0.1) + r)
    return Program(inputs=[x, W, b, r], outputs=[out], name="model_parallel")


program = build()
