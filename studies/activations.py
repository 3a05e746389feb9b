"""The activation functions (tanh, erf, sigmoid; GeLU in both torch forms, SiLU) in one
generated elementwise kernel, f32 and f16: checked against the reference interpreter on one
GPU by `harness.py replay-activations`."""

from workbench import (
    Compute,
    P,
    Program,
    Replicated,
    Size,
    Tensor,
    float16,
    float32,
    gelu,
    gelu_tanh,
    sigmoid,
    silu,
    tanh,
)

N = Size("N", multiple_of=P)
sizes = {"N": 2**24}


def build(dtype):
    x = Tensor(dtype, [N], Replicated, "x")
    y = Compute(gelu(x) + gelu_tanh(x) + silu(x) + tanh(x) + sigmoid(x), name="y")
    return Program(inputs=[x], outputs=[y], name="activations")


program = build(float32)
f16 = build(float16)
