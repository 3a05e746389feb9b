"""A parameter server written as the README's overlap table promises (issue 39 item 1): the
loss-scaled gradients are unscaled and reduced onto rank 0, the root's update is a plain
expression (no Update: a new value), and it is broadcast. Each documented "elementwise kernel
then an AllReduce, Broadcast or Reduce of it" overlap is a schedule: `overlap-c-bcast` the
update beside the Broadcast, `overlap-c-reduce` the unscaling beside the Reduce, and
`overlap-both` the two (each producer's chunks stored for the NCCL call that reads them)."""

from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**24}

g = Tensor(float32, [N], Local, "g")
w = Tensor(float32, [N], Replicated, "w")
lr = Variable(float32, "lr")
inv_scale = Variable(float32, "inv_scale")
gu = Compute(g * inv_scale, name="gu")
gsum = Reduce(Sum, gu, 0, name="gsum")
wn = Compute(w - lr * gsum, name="wn")
w1 = Broadcast(wn, 0, name="w1")
program = Program(inputs=[g, w, lr, inv_scale], outputs=[w1], name="ps_overlap_update")


@schedule(program)
def overlap_c_bcast(s):
    """The root's update beside the Broadcast of its chunks."""
    s.overlap(wn, w1)


@schedule(program)
def overlap_c_reduce(s):
    """The unscaling beside the Reduce of its chunks."""
    s.overlap(gu, gsum)


@schedule(program)
def overlap_both(s):
    """Both overlaps."""
    s.overlap(gu, gsum)
    s.overlap(wn, w1)
