"""Adam with global gradient-norm clipping, written naturally: the clip factor is its own
statement (`clip = Compute(minimum(1, c / (norm + eps)))`), then `g * clip`. The fused
schedule runs the norm and the clipped update inside one FusedAllReduce (two launches around
the cross-rank norm)."""

from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**24}

g = Tensor(float32, [N], Local, "g")
w = Tensor(float32, [N], Replicated, "w")
m = Tensor(float32, [N], Replicated, "m")
v = Tensor(float32, [N], Replicated, "v", range=(0.0, 1.0))
lr, beta1, beta2 = Variable(float32, "lr"), Variable(float32, "beta1"), Variable(float32, "beta2")
eps, step, c = Variable(float32, "eps"), Variable(float32, "step"), Variable(float32, "c")
g1 = AllReduce(Sum, g)
norm = Norm(g1, name="norm")
clip = Compute(minimum(1.0, c / (norm + 1e-6)), name="clip")
gc = g1 * clip
m1 = Update(m, beta1 * m + (1 - beta1) * gc)
v1 = Update(v, beta2 * v + (1 - beta2) * gc * gc)
w1 = Update(w, w - lr * (m1 / (1 - beta1**step)) / (sqrt(v1 / (1 - beta2**step)) + eps))
program = Program(inputs=[g, w, m, v, lr, beta1, beta2, eps, step, c], outputs=[w1, m1, v1],
                  name="clipped_adam", may_stay_sliced=[m1, v1])


@schedule(program)
def fuse_rs_c_ag(s):
    """The clipped update on slices in one FusedAllReduce; the norm over slices."""
    rs, ag = s.split(g1)
    sliced = s.reorder(norm, clip, m1, v1, w1, before=ag)
    s.as_slice(m, v)
    s.fuse(rs, *sliced, w1)
