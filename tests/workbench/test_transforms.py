"""Every schedule of every study computes what the original does (reference interpreter, random
data, sizes and group sizes 1..8); illegal transforms say why; the checker catches a wrong one."""

import numpy as np
import pytest
from conftest import STUDY_SPECS, load_study
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import ir
from workbench.interpreter import RTOL, assert_equivalent, compare_programs
from workbench.transforms import (
    AsSlice,
    DeadCodeElimination,
    Fuse,
    Overlap,
    Reorder,
    Split,
    transform_from_json,
)

SCHEDULES = [(spec, name) for spec in STUDY_SPECS for name in load_study(spec).schedules]


def _sizes(P_: int, k: int, t: int) -> dict:
    return {"N": P_ * k, "H": P_ * k, "T": P_ * t, "P": P_}


@pytest.mark.parametrize("spec,name", SCHEDULES)
@settings(max_examples=12, deadline=None)
@given(P_=st.integers(1, 8), k=st.integers(1, 4), t=st.integers(1, 3), seed=st.integers(0, 999))
def test_schedule_is_equivalent(spec, name, P_, k, t, seed):
    f = load_study(spec)
    sched = f.schedules[name].apply()
    # a hierarchical schedule declares P a multiple of its nodes' GPUs: P_ rounded up to one
    for sym, multiple in sched.facts:
        if sym.name == "P":
            P_ = -(-P_ // int(multiple)) * int(multiple)
    if sched.facts != f.program.facts and spec.endswith(":mixed"):
        # f16 gradients: the node's partial sum is rounded to f16 once more than the flat
        # reduction rounds it (test_hierarchical.py), so f16's bound on every output
        for out, err, _ in compare_programs(f.program, sched, _sizes(P_, k, t), seed):
            assert err <= RTOL["f16"], (out, err)
        return
    assert_equivalent(f.program, sched, _sizes(P_, k, t), seed)


def test_checker_catches_a_wrong_program():
    """Mutation check: a program that differs by one constant must fail the comparison."""
    f = load_study("studies/sgd.py")
    sched = f.schedules["fuse-rs-c-ag"].apply()
    region = sched.stmts[0]
    upd = region.op.body[1]
    wrong_expr = ir.rename_expr(upd.op.expr, {})
    wrong_expr = ir.Binary("sub", ir.Ref("w"), ir.Binary("mul", ir.Const(2.0), wrong_expr.b))
    wrong = ir.Stmt(upd.outs, ir.Update("w", wrong_expr), upd.loc)
    body = (region.op.body[0], wrong, region.op.body[2])
    bad = sched.with_stmts([ir.Stmt(region.outs, ir.Fused("allreduce", body), region.loc)])
    (_, err, tol), = compare_programs(f.program, bad, {"N": 8, "P": 4})
    assert err > tol


# ---------------------------------------------------------------- legality reasons


def test_split_needs_an_allreduce():
    f = load_study("studies/sgd.py")
    assert Split("w1").check(f.program).reason == (
        "split(w1): 'w1' must be an AllReduce, got Update(w, w - lr * g1)")


def test_split_needs_a_divisible_dim():
    from workbench import AllReduce as AR
    from workbench import Local, Program, Size, Sum, Tensor, float32

    M = Size("M")
    g = Tensor(float32, [M], Local, "g")
    prog = Program(inputs=[g], outputs=[AR(Sum, g)], name="p")
    reason = Split("t0").check(prog).reason
    assert reason.startswith("split(t0): a dim of g [M] must be provably divisible by the group "
                             "size P to scatter it, got none; declare a size with Size(")


def test_reorder_before_split_says_split_first():
    f = load_study("studies/sgd.py")
    reason = Reorder(("w1",), "g1").check(f.program).reason
    assert reason == ("reorder(w1, before=g1): 'g1' must be an AllGather (split the AllReduce "
                      "first), got AllReduce(Sum, g)")


def test_reorder_of_local_operand_is_illegal():
    from workbench import AllGather, Local, Program, Size, Sliced, Tensor, Update, float32
    from workbench import P as PP

    N = Size("N", multiple_of=PP)
    s = Tensor(float32, [N], Sliced(0), "s")
    loc = Tensor(float32, [N], Local, "loc")
    a = AllGather(s)
    u = Update(loc, loc + a)
    prog = Program(inputs=[s, loc], outputs=[u], name="p")
    reason = Reorder(("u",), "a").check(prog).reason
    assert "reads 'loc', which is Local: a per-rank tensor has no slice to take" in reason


def test_fuse_rejects_a_non_kernel_pattern():
    f = load_study("studies/sgd.py")
    reason = Fuse(("g1", "w1")).check(f.program).reason
    # a whole AllReduce and an elementwise update: the message gives the split that fuses them
    assert reason == ("fuse(g1, w1): a whole AllReduce fuses with computation that reduces along "
                      "rows (a norm or softmax: ReduceAxis statements), got [AllReduce, Update]; "
                      "for an elementwise epilogue split it first: rs, ag = s.split(g1); moved = "
                      "s.reorder(w1, before=ag); s.fuse(rs, *moved, w1)")


def test_fuse_of_fused_statement_says_so():
    f = load_study("studies/sgd.py")
    fused = f.schedules["fuse-rs-c-ag"].apply()
    reason = Fuse(("g1_rs", "w1_s")).check(fused).reason
    assert "must be a plain statement, got it inside FusedAllreduce" in reason


def test_overlap_needs_a_dependency_and_chunks():
    f = load_study("studies/model_parallel.py")
    assert "chunks must be an integer >= 2 and <= 1024, got 1" in Overlap(
        "y", "summed", 1).check(f.program).reason
    # an AllReduce then the epilogue kernel that reads it: no backend pipelines that pair
    assert ("the pair must be one of the overlaps the backends run" in
            Overlap("summed", "out", 2).check(f.program).reason)


def test_as_slice_needs_a_replicated_input():
    f = load_study("studies/adam.py")
    assert AsSlice(("g",)).check(f.program).reason == (
        "as-slice(g): 'g' must be a Replicated tensor, got f32[N] Local")
    assert "must be a program input" in AsSlice(("m1",)).check(f.program).reason


def test_unknown_value_is_named():
    f = load_study("studies/sgd.py")
    assert Split("nope").check(f.program).reason == (
        "split(nope): 'nope' must be a value of program sgd, got no such value")


# ---------------------------------------------------------------- purity, DCE, JSON


def test_transforms_are_pure_and_deterministic():
    f = load_study("studies/adam.py")
    before = str(f.program)
    a = f.schedules["fuse-rs-c-ag"].apply()
    b = f.schedules["fuse-rs-c-ag"].apply()
    assert str(f.program) == before and a == b


def test_dce_removes_dead_gathers_only():
    f = load_study("studies/sgd.py")
    split = Split("g1").apply(f.program)
    assert DeadCodeElimination().apply(split) == split  # everything is live
    reordered = Reorder(("w1",), "g1").apply(split)
    assert "g1 = AllGather" not in str(reordered)  # the gradient gather became dead


def test_transforms_roundtrip_through_json():
    for spec in STUDY_SPECS:
        for sched in load_study(spec).schedules.values():
            for t in sched.transforms():
                assert transform_from_json(t.to_json()) == t


def test_overlap_keeps_values():
    f = load_study("studies/model_parallel.py")
    sched = f.schedules["overlap-mm-fuse-ar-c"].apply()
    assert isinstance(sched.stmts[0].op, ir.Overlapped) and sched.stmts[0].op.chunks == 4
    res = compare_programs(f.program, sched, {"T": 8, "H": 8, "P": 4})
    assert all(np.isfinite(err) and err <= tol for _, err, tol in res)
