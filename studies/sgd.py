"""Data-parallel SGD (CoCoNet's running example): AllReduce the gradients, update the weights.

Schedules (CoCoNet section 2): `ar-c` is the program as written; `rs-c-ag` splits the AllReduce
and runs the update on slices; `fuse-rs-c-ag` does that in one FusedAllReduce kernel.
"""

from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**28}  # the default for `workbench simulate`; override with --set N=...


def build(grad_dtype=float32, weight_dtype=float32):
    g = Tensor(grad_dtype, [N], Local, "g")
    w = Tensor(weight_dtype, [N], Replicated, "w")
    lr = Variable(float32, "lr")
    g1 = AllReduce(Sum, g)
    w1 = Update(w, w - lr * Cast(weight_dtype, g1))
    program = Program(inputs=[g, w, lr], outputs=[w1], name="sgd")

    @schedule(program)
    def rs_c_ag(s):
        """ReduceScatter, the update on slices, AllGather of the new weights."""
        rs, ag = s.split(g1)
        s.reorder(w1, before=ag)

    @schedule(program)
    def fuse_rs_c_ag(s):
        """rs-c-ag in one FusedAllReduce kernel."""
        rs, ag = s.split(g1)
        (w1_s,) = s.reorder(w1, before=ag)
        s.fuse(rs, w1_s, w1)

    return program, [rs_c_ag, fuse_rs_c_ag]


program, schedules = build()
mixed, mixed_schedules = build(grad_dtype=float16)
