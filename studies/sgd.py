"""Data-parallel SGD (CoCoNet's running example): AllReduce the gradients, update the weights."""

from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**28}  # the default for `workbench simulate`; override with --set N=...


def build(grad_dtype=float32, weight_dtype=float32) -> "Program":
    g = Tensor(grad_dtype, [N], Local, "g")
    w = Tensor(weight_dtype, [N], Replicated, "w")
    lr = Variable(float32, "lr")
    g1 = AllReduce(Sum, g)
    w1 = Update(w, w - lr * Cast(weight_dtype, g1))
    return Program(inputs=[g, w, lr], outputs=[w1], name="sgd")


program = build()
mixed = build(grad_dtype=float16)
