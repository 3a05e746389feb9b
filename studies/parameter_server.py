"""A parameter server on P GPUs: the gradients are reduced onto rank 0 (Reduce), rank 0 alone
updates the weights and then broadcasts them (Broadcast). The reference the data-parallel
AllReduce replaced; it moves the same bytes through one root (NCCL's ring Reduce and
Broadcast), so it shows what the root costs.

    gs = Reduce(Sum, g, root=0)          OnRoot(0): only rank 0 holds the sum
    w1 = Update(w, w - lr * gs)          the update, on rank 0
    w2 = Broadcast(w1, root=0)           every rank gets the new weights
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
    return Program(inputs=[g, w, lr], outputs=[w2], name="parameter_server")


program = build()
