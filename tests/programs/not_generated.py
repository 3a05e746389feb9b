"""A program whose schedule the simulator prices but the GPU backend does not generate yet: a
ReduceTensor(Prod) inside a fused collective (its per-block partials are sums, maxima or
minima; a product is left unfused). Issue 24's cases (an amax fused into a collective, a
MatMul overlapped with LayerNorm's fused collective, compute overlapped with a Broadcast) are
generated now (tests/codegen/test_everything_accepted_is_generated.py). `workbench simulate`
shows the row with its reason, never best (tests/cli/test_simulate_generated.py)."""

from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**20}

g = Tensor(float32, [N], Local, "g")
summed = AllReduce(Sum, g)
prod = ReduceTensor(Prod, summed, name="prod")
scaled = Compute(summed * prod, name="scaled")
prod_scale = Program(inputs=[g], outputs=[scaled], name="prod_scale")


@schedule(prod_scale)
def fuse_prod(s):
    rs, ag = s.split(summed)
    moved = s.reorder(prod, scaled, before=ag)
    s.fuse(rs, *moved, scaled)


program = prod_scale  # the default of the file
