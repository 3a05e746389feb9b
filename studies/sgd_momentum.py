"""Data-parallel SGD with momentum (torch.optim.SGD(momentum=mu, dampening=0)): AllReduce the
gradient, b <- mu * b + g, w <- w - lr * b. The momentum buffer is state a schedule may keep
sliced. Timed against torch's fused SGD and a compiled step by `harness.py replay-optimizer-steps`
(no study has SGD with momentum; the program lives with the benchmark).

`sgd_momentum.py:sgd_momentum_wd` adds weight decay as torch.optim.SGD(momentum=mu,
weight_decay=wd) applies it: d = g + wd * w (to the reduced gradient), b <- mu * b + d,
w <- w - lr * b; checked on one GPU by `harness.py replay-kernel-ops` (issue 15)."""

from studies.optimizer_schedules import optimizer_schedules
from workbench import (
                  AllReduce,
                  Local,
                  P,
                  Program,
                  Replicated,
                  Size,
                  Sum,
                  Tensor,
                  Update,
                  Variable,
                  float32,
)

N = Size("N", multiple_of=P)
sizes = {"N": 2**26}

g = Tensor(float32, [N], Local, "g")
w = Tensor(float32, [N], Replicated, "w")
b = Tensor(float32, [N], Replicated, "b")
lr, mu = Variable(float32, "lr"), Variable(float32, "mu")
g1 = AllReduce(Sum, g)
b1 = Update(b, mu * b + g1)
w1 = Update(w, w - lr * b1)
program = Program(inputs=[g, w, b, lr, mu], outputs=[w1, b1], name="sgd_momentum",
                  may_stay_sliced=[b1])
schedules = optimizer_schedules(program, g1, [b1, w1], (b,), [w1])


def _with_weight_decay():
    g = Tensor(float32, [N], Local, "g")
    w = Tensor(float32, [N], Replicated, "w")
    b = Tensor(float32, [N], Replicated, "b")
    lr, mu, wd = Variable(float32, "lr"), Variable(float32, "mu"), Variable(float32, "wd")
    g1 = AllReduce(Sum, g)
    b1 = Update(b, mu * b + (g1 + wd * w))  # torch adds wd * w to the gradient first
    w1 = Update(w, w - lr * b1)
    wd_program = Program(inputs=[g, w, b, lr, mu, wd], outputs=[w1, b1],
                         name="sgd_momentum_wd", may_stay_sliced=[b1])
    return wd_program, optimizer_schedules(wd_program, g1, [b1, w1], (b,), [w1])


sgd_momentum_wd, sgd_momentum_wd_schedules = _with_weight_decay()
