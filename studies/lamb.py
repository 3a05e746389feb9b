"""Data-parallel LAMB (CoCoNet Figure 10b): Adam's moments, then a layer-wise trust ratio
||w|| / ||u|| that scales the update. The norms are reductions: once the update runs on slices
they need communication of their own (a norm over a Sliced tensor all-reduces its partials).

Schedules: `rs-c-ag` (split; moments, update direction, both norms and the update on slices),
`rs-c-ag-sliced-state` (moments stay sliced) and `fuse-rs-c-ag` (one FusedAllReduce kernel whose
middle phase all-reduces the two norms' partial sums).
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
    beta1, beta2 = Variable(float32, "beta1"), Variable(float32, "beta2")
    eps, step, wd = Variable(float32, "eps"), Variable(float32, "step"), Variable(float32, "wd")
    g1 = AllReduce(Sum, g)
    g32 = Cast(float32, g1)
    m1 = Update(m, beta1 * m + (1 - beta1) * g32)
    v1 = Update(v, beta2 * v + (1 - beta2) * g32 * g32)
    u = Compute(m1 / (1 - beta1**step) / (sqrt(v1 / (1 - beta2**step)) + eps) + wd * w)
    w_norm = Norm(w)
    u_norm = Norm(u)
    w1 = Update(w, w - lr * (w_norm / u_norm) * u)
    mixed = grad_dtype != float32
    updates = [m1, v1, u, w_norm, u_norm, w1]
    outputs = [w1, m1, v1]
    if mixed:
        w16 = Compute(Cast(grad_dtype, w1), name="w16")
        updates.append(w16)
        outputs.append(w16)
    # the moments (and, mixed, the f32 master weights) are state each rank may keep sliced
    sliced = [m1, v1, w1] if mixed else [m1, v1]
    program = Program(inputs=[g, w, m, v, lr, beta1, beta2, eps, step, wd], outputs=outputs,
                      name="lamb", may_stay_sliced=sliced)
    state = (m, v, w) if mixed else (m, v)  # what each rank may keep as a slice only
    return program, optimizer_schedules(program, g1, updates, state,
                                        [w16] if mixed else [w1])


program, schedules = build()
mixed, mixed_schedules = build(grad_dtype=float16)
