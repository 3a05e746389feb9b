"""Lowering of Slice and Norm (LAMB): unfused norms as a streaming kernel of per-block partial
sums plus a finishing kernel, and fused regions split into launches where a norm's value is
needed. CPU only: the plans and rendered text, not their execution."""

import sympy
from codegen_cases import case_program

from codegen.lower import lower
from codegen.plan import RANK, KernelStep, NcclStep
from codegen.render import render


def _plan(schedule, spec="studies/lamb.py", P=2):
    return lower(case_program(("", spec, schedule, P)), P=P)


def _kinds(plan):
    return [s.op if isinstance(s, NcclStep) else s.spec.kind for s in plan.steps]


def test_fused_lamb_is_three_launches_around_the_norms():
    plan = _plan("fuse-rs-c-ag")
    assert _kinds(plan) == ["collective", "finish", "collective"]
    first, finish, second = plan.steps
    assert {"w_norm", "u_norm"} <= set(first.stmts) and second.stmts == ("w1_s", "w1")
    # both norms accumulate in the first kernel and are finished together, across ranks
    assert [n.var for n in first.spec.norms] == ["a_w_slice", "r_u_s"]
    assert [len(n.partials) for n in finish.spec.norms] == [2, 2] and finish.flags
    # u_s crosses launches, so it is spilled to memory; the norms are f32 scalars in memory
    bufs = {b.name: b for b in plan.buffers}
    assert bufs["u_s"].dtype == "f32" and bufs["partials_u_norm"].peer
    assert str(bufs["w_norm"].numel) == "1"
    # the second kernel reads the norms as scalars and the spilled u_s as a vector
    assert {s.var for s in second.spec.scalars} >= {"s_w_norm", "s_u_norm"}
    assert any(ld.var == "a_u_s" for ld in second.spec.loads)
    # every launch of the region synchronises on flags of its own
    assert len({first.flags, finish.flags, second.flags}) == 3


def test_slice_is_a_view_at_the_rank_offset():
    plan = _plan("rs-c-ag")
    loc = plan.locs["w_slice"]
    assert loc.buffer == "w" and sympy.simplify(loc.offset - RANK * sympy.Symbol(
        "N", integer=True, positive=True) / 2) == 0
    assert "w_slice" not in {n for s in plan.steps for n in getattr(s, "stmts", ())}


def test_unfused_norm_over_slices_finishes_across_ranks():
    plan = _plan("rs-c-ag")
    finishes = [s for s in plan.steps if isinstance(s, KernelStep) and s.spec.kind == "finish"]
    assert len(finishes) == 2 and all(s.flags for s in finishes)
    assert "block_barrier<2>" in render(finishes[0].spec)


def test_norm_of_a_replicated_tensor_needs_no_communication():
    plan = _plan(None)
    finishes = [s for s in plan.steps if isinstance(s, KernelStep) and s.spec.kind == "finish"]
    assert len(finishes) == 2 and not any(s.flags for s in finishes)
    assert [len(n.partials) for s in finishes for n in s.spec.norms] == [1, 1]
    assert "block_barrier" not in render(finishes[0].spec)
    assert _kinds(plan).count("all_reduce") == 1  # only the gradient's


def test_mixed_fused_lamb_gathers_the_f16_copy_in_the_second_launch():
    plan = _plan("fuse-rs-c-ag", "studies/lamb.py:mixed")
    assert _kinds(plan) == ["collective", "finish", "collective"]
    assert plan.steps[2].stmts == ("w1_s", "w16_s", "w16")
    src = render(plan.steps[0].spec)
    assert "wb::write_block_partial(nacc1, p_partials_u_norm, 1024);" in src
