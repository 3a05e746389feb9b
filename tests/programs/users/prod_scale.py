"""A product over the whole tensor inside a fused collective: all-reduce per-element factors,
average them over the ranks, take their product (a ReduceTensor(Prod) over slices: each rank
multiplies its slice in f64, the ranks' partials are multiplied in rank order) and scale the
averaged factors by it. The fused schedule holds the product inside the FusedAllReduce kernel,
as amax_cast.py holds a max."""

from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**20}

g = Tensor(float32, [N], Local, "g", range=(0.999, 1.001))  # factors near 1: a finite product
g1 = AllReduce(Sum, g)
f = Compute(g1 / P, name="f")
prod = ReduceTensor(Prod, f, name="prod")
scaled = Compute(f * prod, name="scaled")
program = Program(inputs=[g], outputs=[scaled, prod], name="prod_scale")


@schedule(program)
def rs_c_ag(s):
    """ReduceScatter, the average, the product and the scaling on slices, AllGather."""
    rs, ag = s.split(g1)
    s.reorder(f, prod, scaled, before=ag)


@schedule(program)
def fuse_rs_c_ag(s):
    """rs-c-ag as one FusedAllReduce kernel holding the product (two launches: the product of
    every rank's slice sits between them)."""
    rs, ag = s.split(g1)
    sliced = s.reorder(f, prod, scaled, before=ag)
    s.fuse(rs, *sliced)
