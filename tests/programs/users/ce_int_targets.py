"""Cross-entropy's target logit picked by int32 ids (issue 39 item 2): the targets are token
ids (int32, one per row), each rank's vocabulary slice carries its columns' ids (int32,
Sliced(1): there is no iota), `where(equal(cols, ids), logits, 0)` keeps the target's logit,
each rank sums its columns (a partial over the Sliced axis) and an AllReduce(Sum) combines
them; the next position's ids (ids + 1, int32) are an output too. int32 is computed in f32,
as the interpreter does: exact below 2^24."""

from workbench import *

T = Size("T", multiple_of=P)
V = Size("V", multiple_of=P)
sizes = {"T": 4096, "V": 32768}

ids = Tensor(int32, [T, 1], Replicated, "ids")
cols = Tensor(int32, [T, V], Sliced(1), "cols")
logits = Tensor(float32, [T, V], Sliced(1), "logits")
hit = Compute(where(equal(cols, ids), logits, 0.0), name="hit")
picked = AllReduce(Sum, ReduceTensor(Sum, hit, axis=-1, name="part"), name="picked")
next_ids = Compute(ids + 1, name="next_ids")
program = Program(inputs=[ids, cols, logits], outputs=[picked, next_ids],
                  name="ce_int_targets")


@schedule(program)
def fuse_pick(s):
    """The comparison, the selection and each rank's row sum in one row kernel."""
    s.fuse(hit, "part")
