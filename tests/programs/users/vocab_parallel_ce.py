"""Vocab-parallel softmax and cross-entropy (Megatron's), written naturally (issue 39 item 3):
the LM head's logits are Sliced(1), each rank holding V/P vocabulary columns. A row's max over
each rank's columns is that rank's partial (ReduceTensor over the Sliced axis: Local, [T, 1]),
AllReduce(Max) combines them; likewise the sum of exponentials and the target's logit (a one-hot
row slice) with AllReduce(Sum). loss = log(sum) + max - target logit; probs stay Sliced(1).

`fuse-exp-sum` computes the exponentials and their row sum in one row kernel;
`fuse-exp-sum-peer-ar` also runs the max's and the target logit's [T, 1] AllReduces as fused
peer-memory kernels (NCCL's latency is most of their time)."""

from workbench import *

T = Size("T", multiple_of=P)
V = Size("V", multiple_of=P)  # the vocabulary ("V" is spelt size_V in the generated C)
sizes = {"T": 4096, "V": 32768}

logits = Tensor(float32, [T, V], Sliced(1), "logits")
onehot = Tensor(float32, [T, V], Sliced(1), "onehot", range=(0.0, 1.0))
m_part = ReduceTensor(Max, logits, axis=-1, name="m_part")
m = AllReduce(Max, m_part, name="m")
e = Compute(exp(logits - m), name="e")
s_part = ReduceTensor(Sum, e, axis=-1, name="s_part")
s = AllReduce(Sum, s_part, name="s")
picked = AllReduce(Sum, ReduceTensor(Sum, logits * onehot, axis=-1, name="t_part"),
                   name="picked")
loss = Compute(log(s) + m - picked, name="loss")
probs = Compute(e / s, name="probs")
program = Program(inputs=[logits, onehot], outputs=[loss, probs], name="vocab_parallel_ce")


@schedule(program)
def fuse_exp_sum(s_):
    """The exponentials and their row sum in one row kernel."""
    s_.fuse(e, s_part)


@schedule(program)
def fuse_exp_sum_peer_ar(s_):
    """fuse-exp-sum, and the max's and the target logit's AllReduces as fused kernels."""
    s_.fuse(e, s_part)
    for ar in (m, picked):
        rs, ag = s_.split(ar)
        s_.fuse(rs, ag)
