"""A program whose schedule the simulator prices but the GPU backend does not generate: CoCoNet's
update inside NCCL's ring (`s.ring`, design note 72: "simulated only: needs a fused network
collective"). Issue 24's cases (an amax or a product fused into a collective, LayerNorm's fused
collective overlapped with the MatMul, compute overlapped with a Broadcast) are generated now
(tests/codegen/test_everything_accepted_is_generated.py). `workbench simulate` shows the row
with its reason, never best (tests/cli/test_simulate_generated.py)."""

from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**20}

g = Tensor(float32, [N], Local, "g")
w = Tensor(float32, [N], Replicated, "w")
lr = Variable(float32, "lr")
g1 = AllReduce(Sum, g)
w1 = Update(w, w - lr * g1)
ring_sgd = Program(inputs=[g, w, lr], outputs=[w1], name="ring_sgd")


@schedule(ring_sgd)
def fuse_ring(s):
    """The fused SGD step carried by NCCL's ring (priced and simulated only)."""
    rs, ag = s.split(g1)
    (w1_s,) = s.reorder(w1, before=ag)
    s.ring(s.fuse(rs, w1_s, w1))


program = ring_sgd  # the default of the file
