"""SGD that also returns the weight delta: `delta = w1 - w` reads the weight after its in-place
Update (the old value is kept where a later statement needs it)."""

from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 2**22}

g = Tensor(float32, [N], Local, "g")
w = Tensor(float32, [N], Replicated, "w")
lr = Variable(float32, "lr")
g1 = AllReduce(Sum, g)
w1 = Update(w, w - lr * g1)
delta = Compute(w1 - w, name="delta")
program = Program(inputs=[g, w, lr], outputs=[w1, delta], name="weight_delta")


@schedule(program)
def rs_c_ag(s):
    """The update on slices, then gathered."""
    rs, ag = s.split(g1)
    s.reorder(w1, before=ag)
