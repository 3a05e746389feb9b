"""A schedule that changes the program's meaning (a hand-written "transform" that turns the
AllReduce's Sum into a Max): `check --equivalence` must catch it and name the statement."""

import dataclasses

from workbench import *
from workbench import ir

N = Size("N", multiple_of=P)
sizes = {"N": 1024}
g = Tensor(float32, [N], Local, "g")
w = Tensor(float32, [N], Replicated, "w")
g1 = AllReduce(Sum, g)
w1 = Update(w, w - 0.1 * g1)
program = Program(inputs=[g, w], outputs=[w1], name="changes_meaning")


class SumToMax:
    def apply(self, p):
        stmts = [dataclasses.replace(s, op=ir.AllReduce(ir.ReduceOp.Max, s.op.x))
                 if isinstance(s.op, ir.AllReduce) else s for s in p.stmts]
        return p.with_stmts(stmts)

    def results(self, before, after):
        return None


@schedule(program)
def wrong(s):
    """Not a transform of this project: it changes what the program computes."""
    s.apply(SumToMax())


@schedule(program)
def right(s):
    """ReduceScatter, update on slices, AllGather."""
    rs, ag = s.split(g1)
    s.reorder(w1, before=ag)
