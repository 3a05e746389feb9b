"""Attention scores of one head group per rank (heads split over ranks: Local scores), a
softmax over the keys with its max-subtraction (statistics as their own statements), in one
row kernel."""

from workbench import *
from workbench import ir

S = Size("S")
sizes = {"S": 2048}

scores = Tensor(bfloat16, [S, S], Local, "scores")
probs = Compute(softmax(scores * 0.125), name="probs")
program = Program(inputs=[scores], outputs=[probs], name="attention_softmax")
stats = [s.out.name for s in program.stmts if isinstance(s.op, ir.ReduceAxis)]


@schedule(program)
def fused(s):
    """The max, the sum of exponentials and the normalization in one row kernel."""
    s.fuse(*stats, probs)
