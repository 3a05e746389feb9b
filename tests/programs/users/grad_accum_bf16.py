"""Gradient accumulation through a bf16 cast: the micro-batch gradient is added to the fp32
accumulator, scaled by 1/steps and cast to bf16 before the data-parallel ReduceScatter
(computation before the collective), each rank keeping its slice of the mean gradient.
`fuse-cast-rs` fuses the computation into the ReduceScatter (design note 78): one kernel reads
acc and g, updates acc, and pushes the bf16 contribution into each slice's owner."""

from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**26}

acc = Tensor(float32, [N], Local, "acc")
g = Tensor(float32, [N], Local, "g")
inv_steps = Variable(float32, "inv_steps")
acc1 = Update(acc, acc + g)
g16 = Compute(Cast(bfloat16, acc1 * inv_steps), name="g16")
gs = ReduceScatter(Sum, g16, name="gs")
program = Program(inputs=[acc, g, inv_steps], outputs=[gs, acc1], name="grad_accum_bf16")


@schedule(program)
def fuse_cast(s):
    """The accumulation and the scaled cast as one kernel, then NCCL's ReduceScatter."""
    s.fuse(acc1, g16)


@schedule(program)
def fuse_cast_rs(s):
    """The accumulation, the scaled cast and the ReduceScatter as one kernel."""
    s.fuse(acc1, g16, gs)
