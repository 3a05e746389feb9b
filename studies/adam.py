"""Data-parallel Adam (CoCoNet Figure 10a): AllReduce the gradients, then the Adam update.

`program` is fp32 throughout; `mixed` has fp16 gradients and fp32 master weights and moments,
and also produces the fp16 copy of the weights that the next forward pass reads.

Schedules: `rs-c-ag` (split, update on slices, gather everything), `rs-c-ag-sliced-state` (the
moments stay sliced: each rank keeps only its slice of m and v), and `fuse-rs-c-ag` (that in one
FusedAllReduce kernel). In `mixed`, the fp32 master weights stay sliced too and only the fp16
weights are gathered, which halves the all-gather's bytes.
"""

from studies.optimizer_schedules import optimizer_schedules
from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**28}


def build(grad_dtype=float32):
    g = Tensor(grad_dtype, [N], Local, "g")
    w = Tensor(float32, [N], Replicated, "w")
    m = Tensor(float32, [N], Replicated, "m")
    v = Tensor(float32, [N], Replicated, "v", range=(0.0, 1.0))  # a second moment: >= 0
    lr = Variable(float32, "lr")
    # Adam's betas below 1 and a step count from 1, as training runs them: a beta near 1 at a
    # step below 1 divides m by ~0 (1 - beta1**step), and the f16 weights copy of `mixed`
    # overflowed on such random inputs (checks would have no oracle there).
    beta1 = Variable(float32, "beta1", range=(0.5, 0.95))
    beta2 = Variable(float32, "beta2", range=(0.5, 0.999))
    eps, step = Variable(float32, "eps"), Variable(float32, "step", range=(1.0, 10.0))
    g1 = AllReduce(Sum, g)
    g32 = Cast(float32, g1)
    m1 = Update(m, beta1 * m + (1 - beta1) * g32)
    v1 = Update(v, beta2 * v + (1 - beta2) * g32 * g32)
    m_hat = m1 / (1 - beta1**step)
    v_hat = v1 / (1 - beta2**step)
    w1 = Update(w, w - lr * m_hat / (sqrt(v_hat) + eps))
    mixed = grad_dtype != float32
    updates = [m1, v1, w1]
    outputs = [w1, m1, v1]
    if mixed:
        w16 = Compute(Cast(grad_dtype, w1), name="w16")
        updates.append(w16)
        outputs.append(w16)
    # the moments (and, mixed, the f32 master weights) are state each rank may keep sliced
    sliced = [m1, v1, w1] if mixed else [m1, v1]
    program = Program(inputs=[g, w, m, v, lr, beta1, beta2, eps, step], outputs=outputs,
                      name="adam", may_stay_sliced=sliced)
    state = (m, v, w) if mixed else (m, v)  # what each rank may keep as a slice only

    return program, optimizer_schedules(program, g1, updates, state,
                                        [w16] if mixed else [w1])


program, schedules = build()
mixed, mixed_schedules = build(grad_dtype=float16)
