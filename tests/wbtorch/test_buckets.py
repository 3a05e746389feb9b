"""Bucketing, padding, slicing and optimizer state of the data-parallel optimizer, without
torch (wbtorch.buckets): what CI tests for real."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wbtorch import buckets as bk

SHAPES = [("emb", (65, 32), "float32"), ("ln", (32,), "float32"), ("fc", (32, 128), "float32"),
          ("fc.b", (128,), "float32"), ("head", (32, 65), "float32")]


def test_buckets_fill_in_reverse_order_up_to_the_cap():
    b = bk.plan_buckets(SHAPES, P=1, bucket_bytes=4 * 4500)
    # reverse registration order: head first (2080), then fc.b (128), fc (4096) overflows
    assert [[s.name for s in x.slots] for x in b] == [["head", "fc.b"], ["fc", "ln"], ["emb"]]
    assert [x.used for x in b] == [2080 + 128, 4096 + 32, 2080]
    assert b[0].slots[1].offset == 2080


def test_every_parameter_in_exactly_one_bucket_without_overlap():
    b = bk.plan_buckets(SHAPES, P=4, bucket_bytes=4 * 3000)
    seen = sorted(s.index for x in b for s in x.slots)
    assert seen == list(range(len(SHAPES)))
    for x in b:
        ends = [(s.offset, s.offset + s.numel) for s in x.slots]
        assert all(e0 <= s1 for (_, e0), (s1, _) in zip(ends, ends[1:]))
        assert x.numel % (4 * bk.ALIGN_ELEMS) == 0 and x.numel >= x.used


def test_a_bucket_that_does_not_divide_by_P_is_padded_and_says_so():
    b = bk.plan_buckets([("w", (1001,), "float32")], P=3)
    assert b[0].used == 1001 and b[0].numel == 1008 and b[0].padding == 7
    assert "padded by 7" in bk.describe(b)
    assert b[0].rank_range(2, 3) == (672, 1008)


def test_a_dtype_change_starts_a_new_bucket():
    b = bk.plan_buckets([("a", (10,), "float32"), ("b", (10,), "float16")], P=1)
    assert [x.dtype for x in b] == ["float16", "float32"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=1, max_size=12), st.integers(1, 8),
       st.integers(1, 20000), st.integers(0, 2**31 - 1))
def test_state_round_trips_through_slices_and_parameters(sizes, P, cap, seed):
    """Whole per-parameter state -> bucket -> every rank's slice -> joined -> per parameter
    gives back the same arrays, for any sizes, P and bucket cap."""
    params = [(f"p{i}", (n,), "float32") for i, n in enumerate(sizes)]
    rng = np.random.default_rng(seed)
    state = {i: rng.standard_normal(n).astype(np.float32) for i, n in enumerate(sizes)}
    for b in bk.plan_buckets(params, P, 4 * cap):
        whole = bk.bucket_state(state, b)
        assert not whole[b.used:].any()  # padding stays zero
        parts = [bk.slice_state(whole, b, r, P) for r in range(P)]
        assert {p.size for p in parts} == {b.numel // P}
        back = bk.param_state(bk.join_state(parts, b), b)
        for i, arr in back.items():
            np.testing.assert_array_equal(arr, state[i])


def test_bad_input_is_named_with_the_fix():
    with pytest.raises(bk.BucketError, match="at least one parameter, got none"):
        bk.plan_buckets([], P=2)
    with pytest.raises(bk.BucketError, match="P must be at least 1, got 0"):
        bk.plan_buckets(SHAPES, P=0)
    with pytest.raises(bk.BucketError, match="must divide by P = 3 to be sliced, got a "
                                             "remainder of 1; pad it"):
        bk.rank_range(10, 0, 3)
    b = bk.plan_buckets([("w", (16,), "float32")], P=2)[0]
    with pytest.raises(bk.BucketError, match="must have 16 elements, got 15"):
        bk.slice_state(np.zeros(15), b, 0, 2)
    with pytest.raises(bk.BucketError, match=r"parameter 0 \(w\) must be in the state_dict"):
        bk.bucket_state({}, b)
    with pytest.raises(bk.BucketError, match="must have 16 elements, got 4; the model's shapes"):
        bk.bucket_state({0: np.zeros(4)}, b)


def test_a_parameter_of_alone_bytes_or_more_gets_a_bucket_of_its_own():
    # head (2080 elements), fc (4096) and emb (2080) reach 2000 elements: each alone, at
    # its place in reverse order; the small ones (fc.b, ln) fill one bucket across them,
    # numbered when it closes (after emb: its last parameter is ready last)
    b = bk.plan_buckets(SHAPES, P=1, bucket_bytes=4 * 4500, alone_bytes=4 * 2000)
    assert [[s.name for s in x.slots] for x in b] == [["head"], ["fc"], ["emb"], ["fc.b", "ln"]]
    assert [x.index for x in b] == [0, 1, 2, 3]
    assert all(x.numel == x.used and x.slots[0].offset == 0 for x in b[:3])
    assert b[3].slots[1].offset == 128
    # without the rule the plan is the one above
    assert len(bk.plan_buckets(SHAPES, P=1, bucket_bytes=4 * 4500)) == 3
