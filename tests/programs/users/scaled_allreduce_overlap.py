"""Data-parallel SGD with the gradient averaged before its AllReduce (issue 39 item 1): the
documented "elementwise kernel then an AllReduce of it" overlap, `overlap-c-ar`, runs the
scaling chunk by chunk beside NCCL's AllReduce of the chunks already scaled."""

from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**24}

g = Tensor(float32, [N], Local, "g")
w = Tensor(float32, [N], Replicated, "w")
lr = Variable(float32, "lr")
ga = Compute(g / P, name="ga")
gs = AllReduce(Sum, ga, name="gs")
w1 = Update(w, w - lr * gs)
program = Program(inputs=[g, w, lr], outputs=[w1], name="scaled_allreduce_overlap")


@schedule(program)
def overlap_c_ar(s):
    """The averaging beside the AllReduce of its chunks."""
    s.overlap(ga, gs)
