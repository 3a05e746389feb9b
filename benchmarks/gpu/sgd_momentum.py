"""Data-parallel SGD with momentum (torch.optim.SGD(momentum=mu, dampening=0)): AllReduce the
gradient, b <- mu * b + g, w <- w - lr * b. The momentum buffer is state a schedule may keep
sliced. Timed against torch's fused SGD and a compiled step by benchmarks/gpu/run_torch17.sh
(no study has SGD with momentum; the program lives with the benchmark)."""

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
