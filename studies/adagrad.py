"""Data-parallel Adagrad (torch.optim.Adagrad with its defaults: lr_decay = 0, weight_decay = 0,
initial_accumulator_value = 0): AllReduce the gradient, then

    s <- s + g * g                       the sum of squared gradients (state)
    w <- w - lr * g / (sqrt(s) + eps)

The sum is state each rank may keep only its slice of (`may_stay_sliced`), as the optimizer
studies keep Adam's moments. Written from the README alone, as a new user would (issue 15's
done-when); checked on one GPU by `harness.py replay-kernel-ops`.

    workbench check studies/adagrad.py
    workbench simulate studies/adagrad.py --hardware h200x4 --set N=2**26
"""

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
    schedule,
    sqrt,
)

N = Size("N", multiple_of=P)
sizes = {"N": 2**26}

g = Tensor(float32, [N], Local, "g")            # gradient: different on every rank
w = Tensor(float32, [N], Replicated, "w")       # weights
s = Tensor(float32, [N], Replicated, "s", range=(0.0, 1.0))  # sum of squares: >= 0
lr, eps = Variable(float32, "lr"), Variable(float32, "eps")
g1 = AllReduce(Sum, g)
s1 = Update(s, s + g1 * g1)
w1 = Update(w, w - lr * g1 / (sqrt(s1) + eps))
program = Program(inputs=[g, w, s, lr, eps], outputs=[w1, s1], name="adagrad",
                  may_stay_sliced=[s1])


@schedule(program)
def rs_c_ag(sch):
    """ReduceScatter, the update on slices, AllGather of the weights and the sum."""
    rs, ag = sch.split(g1)
    sch.reorder(s1, w1, before=ag)


@schedule(program)
def rs_c_ag_sliced_state(sch):
    """rs-c-ag keeping the sum sliced: only the weights are gathered."""
    rs, ag = sch.split(g1)
    sch.reorder(s1, w1, before=ag)
    sch.as_slice(s)


@schedule(program)
def fuse_rs_c_ag(sch):
    """rs-c-ag-sliced-state as one FusedAllReduce kernel."""
    rs, ag = sch.split(g1)
    sliced = sch.reorder(s1, w1, before=ag)
    sch.as_slice(s)
    sch.fuse(rs, *sliced, w1)
