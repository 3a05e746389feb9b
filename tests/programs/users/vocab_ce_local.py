"""Vocab-parallel cross-entropy written with each rank's vocabulary slice declared Local (the
form that needs no partial reduction over a Sliced axis): per-row max, sum of exponentials and
the target's logit on each rank's columns, each combined across ranks by an AllReduce (Max,
Sum, Sum), then loss = log(sum) + max - target logit. Its autotuner candidates include a
fused AllReduce(Max) with the exponentials (one-shot: two-shot sums only) and, before issue 39,
fused collectives holding a row reduction of the Local logits, which lowering refused."""

from workbench import *

T = Size("T", multiple_of=P)
Vp = Size("Vp")  # vocabulary columns per rank
sizes = {"T": 4096, "Vp": 8192}

logits = Tensor(float32, [T, Vp], Local, "logits")
onehot = Tensor(float32, [T, Vp], Local, "onehot", range=(0.0, 1.0))
m_local = ReduceTensor(Max, logits, axis=-1)
m = AllReduce(Max, m_local, name="m")
e = Compute(exp(logits - m), name="e")
s = AllReduce(Sum, ReduceTensor(Sum, e, axis=-1), name="s")
picked = AllReduce(Sum, ReduceTensor(Sum, logits * onehot, axis=-1), name="picked")
loss = Compute(log(s) + m - picked, name="loss")
program = Program(inputs=[logits, onehot], outputs=[loss], name="vocab_ce_local")
