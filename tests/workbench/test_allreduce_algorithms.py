"""The fused AllReduce + row computation without split (issue 25): the `AllReduce C+` fused
pattern and its algorithms (two-shot, one-shot, Lamport; transforms.AllReduceAlgorithm), each
schedule checked against the original program in the reference interpreter, and the pinned
refusals."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import AllReduce, Local, Program, Size, Sum, Tensor, float32, int32, ir
from workbench.errors import IllegalTransform
from workbench.interpreter import assert_equivalent
from workbench.transforms import (
    ALLREDUCE_ALGORITHMS,
    AllReduceAlgorithm,
    Fuse,
    transform_from_json,
)
from workbench.verify import fused_kind_of

NEW = ("fuse-ar-c", "fuse-ar-c-pipelined", "fuse-ar-c-oneshot", "fuse-ar-c-lamport")


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("variant", ["", ":bf16"])
def test_every_new_schedule_computes_what_the_program_does(study, name, variant):
    f = study(f"studies/allreduce_rmsnorm.py{variant}")
    sched = f.schedules[name].apply()
    (region,) = sched.stmts
    assert region.op.kind == "allreduce"
    assert [type(s.op).__name__ for s in region.op.body] == [
        "AllReduce", "Compute", "ReduceAxis", "Compute"]
    want = {"fuse-ar-c": "two-shot", "fuse-ar-c-pipelined": "pipelined",
            "fuse-ar-c-oneshot": "one-shot", "fuse-ar-c-lamport": "lamport"}[name]
    assert region.op.algorithm == want
    for Pv in (1, 2, 4):
        assert_equivalent(f.program, sched, {"T": 3 * Pv, "H": 24, "P": Pv}, seed=Pv)


@settings(max_examples=15, deadline=None)
@given(Pv=st.sampled_from([1, 2, 3, 4]), tq=st.integers(1, 4), h=st.integers(1, 40),
       algorithm=st.sampled_from(ALLREDUCE_ALGORITHMS), seed=st.integers(0, 99))
def test_algorithms_are_equivalent_on_random_sizes(study, Pv, tq, h, algorithm, seed):
    f = study("studies/allreduce_rmsnorm.py")
    fused = Fuse(("summed", "h", "t0", "out")).apply(f.program)
    sched = AllReduceAlgorithm("summed", algorithm).apply(fused)
    assert_equivalent(f.program, sched, {"T": Pv * tq, "H": h, "P": Pv}, seed)


def test_the_algorithm_prints_and_replays(study):
    f = study("studies/allreduce_rmsnorm.py")
    sched = f.schedules["fuse-ar-c-lamport"]
    assert "FusedAllreduce[lamport]" in ir.format_program(sched.apply())
    records = [t.to_json() for t in sched.transforms()]
    assert records[-1] == {"transform": "allreduce-algorithm", "region": "summed",
                           "algorithm": "lamport"}
    assert transform_from_json(records[-1]) == sched.transforms()[-1]


def test_the_pattern_needs_an_axis_reduction_after_a_flat_allreduce(study):
    f = study("studies/allreduce_rmsnorm.py")
    body = list(f.program.stmts)
    assert fused_kind_of(body) == "allreduce"
    assert fused_kind_of(body[:2]) is None  # AllReduce + residual: no row kernel to run it in


def test_an_allreduce_with_elementwise_only_does_not_fuse():
    N = Size("N")
    g = Tensor(float32, [N], Local, "g")
    s = AllReduce(Sum, g)
    prog = Program([g], [s * 2.0], name="ar_scale")
    with pytest.raises(IllegalTransform, match=r"a whole AllReduce fuses with computation that "
                       r"reduces along rows .*; for an elementwise epilogue split it first"):
        Fuse(tuple(st_.out.name for st_ in prog.stmts)).apply(prog)


def test_refusals_are_pinned(study):
    f = study("studies/allreduce_rmsnorm.py")
    p = f.program
    assert AllReduceAlgorithm("summed", "three-shot").check(p).reason == (
        "allreduce_algorithm(summed, 'three-shot'): algorithm must be one of ('two-shot', "
        "'pipelined', 'one-shot', 'lamport'), got 'three-shot'")
    assert AllReduceAlgorithm("summed", "one-shot").check(p).reason == (
        "allreduce_algorithm(summed, 'one-shot'): the statement must be a FusedAllreduce that "
        "starts with a whole AllReduce, got AllReduce(Sum, y); fuse the AllReduce with its row "
        "computation first (s.fuse(allreduce, ...), no split)")
    rs = f.schedules["fuse-rs-c-ag"].apply()
    assert "starts with a whole AllReduce, got FusedAllreduce" in AllReduceAlgorithm(
        "summed_rs", "lamport").check(rs).reason


def test_lamport_needs_a_float_input():
    from workbench import Replicated, rms_norm
    T, H = Size("T"), Size("H")
    y = Tensor(int32, [T, H], Local, "y")
    g = Tensor(float32, [H], Replicated, "g")
    s = AllReduce(Sum, y)
    prog = Program([y, g], [rms_norm(s, g)], name="ints")
    fused = Fuse(tuple(st_.out.name for st_ in prog.stmts)).apply(prog)
    assert AllReduceAlgorithm(fused.stmts[0].outs[0].name, "lamport").check(fused).reason.endswith(
        "Lamport synchronization must reduce a floating-point input (its poison is a "
        "sign-flipped zero), got i32")
