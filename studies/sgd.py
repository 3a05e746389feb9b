"""Data-parallel SGD (CoCoNet's running example): AllReduce the gradients, update the weights.

Schedules (CoCoNet section 2): the program as written is `ar-c`; `rs-c-ag` splits the
AllReduce and runs the update on slices; `fuse-rs-c-ag` does that in one FusedAllReduce kernel.
`mixed` has fp16 gradients and fp32 master weights and also produces the fp16 weights the next
forward pass reads; its schedules keep the master weights sliced and gather only the fp16 copy.
"""

from studies.optimizer_schedules import optimizer_schedules
from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**28}  # the default for `workbench simulate`; override with --set N=...


def build(grad_dtype=float32):
    g = Tensor(grad_dtype, [N], Local, "g")
    w = Tensor(float32, [N], Replicated, "w")
    lr = Variable(float32, "lr")
    g1 = AllReduce(Sum, g)
    w1 = Update(w, w - lr * Cast(float32, g1))
    mixed = grad_dtype != float32
    updates, outputs = [w1], [w1]
    if mixed:
        w16 = Compute(Cast(grad_dtype, w1), name="w16")
        updates.append(w16)
        outputs.append(w16)
    # mixed: the f32 master weights are state each rank may keep sliced (w16 is gathered)
    program = Program(inputs=[g, w, lr], outputs=outputs, name="sgd",
                      may_stay_sliced=[w1] if mixed else [])
    state = (w,) if mixed else ()  # what each rank may keep as a slice only
    return program, optimizer_schedules(program, g1, updates, state, [w16] if mixed else [w1])


program, schedules = build()
mixed, mixed_schedules = build(grad_dtype=float16)
