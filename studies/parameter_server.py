"""A parameter server on P GPUs: the gradients are reduced onto rank 0 (Reduce), rank 0 alone
updates the weights and then broadcasts them (Broadcast). The reference the data-parallel
AllReduce replaced; it moves the same bytes through one root (NCCL's ring Reduce and
Broadcast), so it shows what the root costs.

    gs = Reduce(Sum, g, root=0)          OnRoot(0): only rank 0 holds the sum
    w1 = Update(w, w - lr * gs)          the update, on rank 0
    w2 = Broadcast(w1, root=0)           every rank gets the new weights

Schedules fuse the update into the collectives, as one kernel on NVLink peer loads and stores
in which only the root computes: `fuse-reduce-c` (the root loads every rank's gradient and
updates), `fuse-c-broadcast` (the root updates and stores into every rank), and
`fuse-reduce-c-broadcast` (the whole step); `overlap-c-bcast` pipelines the update with
NCCL's Broadcast in chunks instead. Through one root's links they are predicted slower
than NCCL's pipelined rings beyond two GPUs (design note 48).
"""

from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**26}


def build(dtype=float32):
    g = Tensor(dtype, [N], Local, "g")
    w = Tensor(dtype, [N], Replicated, "w")
    lr = Variable(float32, "lr")
    gs = Reduce(Sum, g, root=0)
    w1 = Update(w, w - lr * gs)
    w2 = Broadcast(w1, root=0)
    program = Program(inputs=[g, w, lr], outputs=[w2], name="parameter_server")

    @schedule(program)
    def fuse_reduce_c(s):
        """The update fused into the Reduce, at the root."""
        s.fuse(gs, w1)

    @schedule(program)
    def fuse_c_broadcast(s):
        """The root's update fused into the Broadcast."""
        s.fuse(w1, w2)

    @schedule(program)
    def fuse_reduce_c_broadcast(s):
        """Reduce, update and Broadcast in one kernel."""
        s.fuse(gs, w1, w2)

    @schedule(program)
    def overlap_c_bcast(s):
        """The root's update overlapped with the Broadcast, chunk by chunk: the Broadcast of
        chunk i runs while the root updates chunk i+1."""
        s.overlap(w1, w2, chunks=4)

    return program, [fuse_reduce_c, fuse_c_broadcast, fuse_reduce_c_broadcast, overlap_c_bcast]


program, schedules = build()
