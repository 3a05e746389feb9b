"""ZeRO-1 AdamW with bf16 gradients: the gradients are reduce-scattered, each rank updates its
slice of the fp32 master weights and moments (decoupled weight decay), and the bf16 weights the
next forward pass reads are all-gathered."""

from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**26}

g = Tensor(bfloat16, [N], Local, "g")
w = Tensor(float32, [N], Replicated, "w")
m = Tensor(float32, [N], Replicated, "m")
v = Tensor(float32, [N], Replicated, "v", range=(0.0, 1.0))
lr, wd = Variable(float32, "lr"), Variable(float32, "wd")
beta1, beta2 = Variable(float32, "beta1"), Variable(float32, "beta2")
eps, step = Variable(float32, "eps"), Variable(float32, "step")
g1 = AllReduce(Sum, g)
g32 = Cast(float32, g1)
m1 = Update(m, beta1 * m + (1 - beta1) * g32)
v1 = Update(v, beta2 * v + (1 - beta2) * g32 * g32)
w1 = Update(w, w * (1 - lr * wd) - lr * (m1 / (1 - beta1**step))
            / (sqrt(v1 / (1 - beta2**step)) + eps))
w16 = Compute(Cast(bfloat16, w1), name="w16")
program = Program(inputs=[g, w, m, v, lr, wd, beta1, beta2, eps, step],
                  outputs=[w16, w1, m1, v1], name="zero1_adamw", may_stay_sliced=[w1, m1, v1])


@schedule(program)
def zero1(s):
    """ReduceScatter, the update on each rank's slice, AllGather of the bf16 weights only."""
    rs, ag = s.split(g1)
    s.reorder(m1, v1, w1, w16, before=ag)
    s.as_slice(m, v, w)


@schedule(program)
def zero1_fused(s):
    """zero1 as one FusedAllReduce kernel."""
    rs, ag = s.split(g1)
    sliced = s.reorder(m1, v1, w1, w16, before=ag)
    s.as_slice(m, v, w)
    s.fuse(rs, *sliced, w16)
