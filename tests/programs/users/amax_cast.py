"""An amax-scaled cast (FP8-style scaling, bf16 here): reduce the gradients, take the largest
|g| over the whole tensor (a ReduceTensor over slices: a cross-rank max), scale and cast.
The fused schedule holds the ReduceTensor inside the FusedAllReduce kernel."""

from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**22}

g = Tensor(float32, [N], Local, "g")
g1 = AllReduce(Sum, g)
a = Compute(abs(g1), name="a")
amax = ReduceTensor(Max, a, name="amax")
scaled = Compute(Cast(bfloat16, g1 * (448.0 / (amax + 1e-12))), name="scaled")
program = Program(inputs=[g], outputs=[scaled, amax], name="amax_cast")


@schedule(program)
def rs_c_ag(s):
    """ReduceScatter, |g|, the amax and the cast on slices, AllGather."""
    rs, ag = s.split(g1)
    s.reorder(a, amax, scaled, before=ag)


@schedule(program)
def fuse_rs_c_ag(s):
    """rs-c-ag as one FusedAllReduce kernel holding the ReduceTensor (two launches: the max
    over every rank's slice sits between them)."""
    rs, ag = s.split(g1)
    sliced = s.reorder(a, amax, scaled, before=ag)
    s.fuse(rs, *sliced)
