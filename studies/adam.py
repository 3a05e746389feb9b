"""Data-parallel Adam (CoCoNet Figure 10a): AllReduce the gradients, then the Adam update.

`program` is fp32 throughout; `mixed` has fp16 gradients and fp32 master weights and moments,
and also produces the fp16 copy of the weights that the next forward pass reads.
"""

from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**28}


def build(grad_dtype=float32) -> "Program":
    g = Tensor(grad_dtype, [N], Local, "g")
    w = Tensor(float32, [N], Replicated, "w")
    m = Tensor(float32, [N], Replicated, "m")
    v = Tensor(float32, [N], Replicated, "v")
    lr, beta1, beta2 = Variable(float32, "lr"), Variable(float32, "beta1"), Variable(float32, "beta2")
    eps, step = Variable(float32, "eps"), Variable(float32, "step")
    g1 = AllReduce(Sum, g)
    g32 = Cast(float32, g1)
    m1 = Update(m, beta1 * m + (1 - beta1) * g32)
    v1 = Update(v, beta2 * v + (1 - beta2) * g32 * g32)
    m_hat = m1 / (1 - beta1**step)
    v_hat = v1 / (1 - beta2**step)
    w1 = Update(w, w - lr * m_hat / (sqrt(v_hat) + eps))
    outputs = [w1, m1, v1]
    if grad_dtype != float32:
        w16 = Compute(Cast(grad_dtype, w1))
        outputs.append(w16)
    return Program(inputs=[g, w, m, v, lr, beta1, beta2, eps, step], outputs=outputs, name="adam")


program = build()
mixed = build(grad_dtype=float16)
