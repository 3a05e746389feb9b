"""wbtorch.overlap.Readiness without torch (CI): a bucket is launched once, when every
parameter of it is marked in one backward and every earlier bucket is launched, never while
accumulating; partial marks do not outlive a backward; the step takes what is left."""

from __future__ import annotations

from wbtorch.buckets import plan_buckets
from wbtorch.overlap import Readiness


def _ready():
    # parameters 0..3 of 4, 4, 4 and 8 elements, cap 8: buckets [3], [2, 1], [0] (reversed)
    shapes = [("a", (4,), "float32"), ("b", (4,), "float32"), ("c", (4,), "float32"),
              ("d", (8,), "float32")]
    buckets = plan_buckets(shapes, 1, bucket_bytes=32)
    assert [[s.index for s in b.slots] for b in buckets] == [[3], [2, 1], [0]]
    return Readiness.of(buckets)


def test_a_bucket_launches_when_its_last_parameter_is_marked_and_only_once():
    r = _ready()
    assert r.mark(3) == [0]
    assert r.mark(2) == [] and r.mark(1) == [1]
    assert r.mark(3) == []  # a second backward in the same step: not again
    assert r.pending() == [2]
    assert r.take_pending() == [2] and r.pending() == []
    assert r.new_step() == [0, 1, 2] and r.launched == []


def test_buckets_launch_in_bucket_order_only():
    r = _ready()
    assert r.mark(1) == [] and r.mark(2) == []  # bucket 1 complete, bucket 0 not yet
    assert r.mark(0) == []  # bucket 2 complete too: both wait for bucket 0
    assert r.mark(3) == [0, 1, 2]
    assert r.new_step() == [0, 1, 2]


def test_accumulating_launches_nothing_and_partial_marks_end_with_the_backward():
    r = _ready()
    r.accumulating = True
    assert [r.mark(i) for i in (3, 2, 1, 0)] == [[]] * 4
    r.end_backward()
    r.accumulating = False
    assert r.mark(3) == [0]
    assert r.mark(2) == []
    r.end_backward()  # parameter 1 got no gradient in that backward
    assert r.mark(1) == []  # 2's mark from the last backward does not count
    assert r.mark(2) == [1]
