"""Computation fused before a ReduceScatter (issue 24 item 3, design note 78): gradient
accumulation's `ReduceScatter(cast(g * s))` as one FusedReduceScatter that reads g, computes,
and reduce-scatters. Its legality (pinned refusals), its meaning in the interpreter
(hypothesis over P, sizes and dtypes), its price (the cast value crosses the links) and its
lowering (one kernel: a computed push phase, then the reduction from the staging buffer)."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_priced import kernel_steps

from codegen.lower import lower
from codegen.plan import KernelStep
from codegen.render import render
from codegen.spec import ComputedPush
from codegen.work import step_work
from cost_model.hardware import preset
from cost_model.plan_cost import PlanContext, fused_parts_of
from workbench import (
    AllGather,
    Cast,
    Compute,
    Dropout,
    Local,
    P,
    Program,
    ReduceScatter,
    Replicated,
    Size,
    Sliced,
    Sum,
    Tensor,
    Update,
    Variable,
    bfloat16,
    float16,
    float32,
)
from workbench.errors import IllegalTransform
from workbench.interpreter import random_inputs, run
from workbench.loader import load
from workbench.transforms import Fuse


def _grad_accum(dtype=bfloat16):
    N = Size("N", multiple_of=P)
    acc = Tensor(float32, [N], Local, "acc")
    g = Tensor(float32, [N], Local, "g")
    inv = Variable(float32, "inv_steps")
    acc1 = Update(acc, acc + g, name="acc1")
    g16 = Compute(Cast(dtype, acc1 * inv), name="g16")
    gs = ReduceScatter(Sum, g16, name="gs")
    return Program(inputs=[acc, g, inv], outputs=[gs, acc1], name="ga")


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), st.sampled_from([bfloat16, float16, float32]),
       st.integers(0, 2**16))
def test_the_fused_kernel_means_what_the_program_says(p, per_rank, dtype, seed):
    program = _grad_accum(dtype)
    fused = Fuse(("acc1", "g16", "gs")).apply(program)
    (region,) = fused.stmts
    assert region.op.kind == "reducescatter"
    sizes = {"N": p * per_rank, "P": p}
    inputs = random_inputs(program, sizes, seed)
    want, got = run(program, inputs, sizes), run(fused, inputs, sizes)
    for name in ("gs", "acc1"):
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(want[name]))


def _refused(build, message):
    with pytest.raises(IllegalTransform, match=message):
        build()


def test_computation_before_a_reduce_scatter_must_read_whole_tensors_of_its_shape():
    N = Size("N", multiple_of=P)
    g = Tensor(float32, [N], Local, "g")
    w = Tensor(float32, [N], Sliced(0), "w")
    wg = AllGather(w, name="wg")
    c = Compute(g * wg, name="c")
    rs = ReduceScatter(Sum, c, name="rs")
    program = Program(inputs=[g, w], outputs=[rs], name="bad")
    ok = Fuse(("c", "rs")).apply(program)  # wg is whole (Replicated): legal
    assert ok.stmts[-1].op.kind == "reducescatter"
    T, H = Size("T", multiple_of=P), Size("H")
    x = Tensor(float32, [T, H], Local, "x")
    bias = Tensor(float32, [H], Replicated, "bias")
    xb = Compute(x + bias, name="xb")
    rs2 = ReduceScatter(Sum, xb, name="rs2")
    p2 = Program(inputs=[x, bias], outputs=[rs2], name="bias")
    _refused(lambda: Fuse(("xb", "rs2")).apply(p2),
             r"computation fused before a ReduceScatter must read scalars or whole tensors of "
             r"the reduced shape \[T, H\], got 'bias' \(f32\[H\] Replicated\) in xb; compute "
             r"it in a kernel of its own")


def test_a_dropout_mask_before_the_reduce_scatter_is_refused():
    N = Size("N", multiple_of=P)
    g = Tensor(float32, [N], Local, "g")
    c = Compute(Dropout(g, 0.1, seed=3), name="c")
    rs = ReduceScatter(Sum, c, name="rs")
    program = Program(inputs=[g], outputs=[rs], name="drop")
    _refused(lambda: Fuse(("c", "rs")).apply(program),
             r"computation fused before a ReduceScatter must not draw a dropout mask, got one "
             r"in c; apply it after the reduction or in a kernel of its own")


def test_a_value_of_the_prologue_read_after_the_reduction_is_refused():
    N = Size("N", multiple_of=P)
    g = Tensor(float32, [N], Local, "g")
    w = Tensor(float32, [N], Replicated, "w")
    c = Compute(w * 2.0, name="c")
    d = Compute(g + c, name="d")
    rs = ReduceScatter(Sum, d, name="rs")
    out = Compute(rs + c, name="out")
    program = Program(inputs=[g, w], outputs=[out, c], name="late")
    fused = Fuse(("c", "d", "rs")).apply(program)  # c is stored (an output), d is pushed
    assert fused.stmts[0].op.kind == "reducescatter"
    _refused(lambda: Fuse(("c", "d", "rs", "out")).apply(program),
             r"a value computed before a fused ReduceScatter must be read only up to the "
             r"reduction, got 'c' read by out; compute out in a kernel of its own")


def test_the_reduced_value_must_come_from_the_fused_computation():
    N = Size("N", multiple_of=P)
    g = Tensor(float32, [N], Local, "g")
    h = Tensor(float32, [N], Local, "h")
    c = Compute(h * 2.0, name="c")
    rs = ReduceScatter(Sum, g, name="rs")
    both = Compute(c + 0.0, name="both")
    program = Program(inputs=[g, h], outputs=[both, rs], name="unrelated")
    _refused(lambda: Fuse(("c", "rs")).apply(program),
             r"a fused ReduceScatter after computation must reduce a value that computation "
             r"makes, got 'g'; fuse the statement that computes it, or fuse only the "
             r"ReduceScatter and what follows")


def test_the_scattered_dim_must_be_the_first():
    T, H = Size("T", multiple_of=P), Size("H", multiple_of=P)
    g = Tensor(float32, [T, H], Local, "g")
    c = Compute(g * 2.0, name="c")
    rs = ReduceScatter(Sum, c, dim=1, name="rs")
    program = Program(inputs=[g], outputs=[rs], name="cols")
    _refused(lambda: Fuse(("c", "rs")).apply(program),
             r"a fused ReduceScatter after computation must scatter dim 0 \(contiguous rows\), "
             r"got dim 1; put the scattered dim first")


def _user():
    return load(str(ROOT / "tests/programs/users/grad_accum_bf16.py"))


def test_priced_as_a_push_of_the_cast_value():
    pf = _user()
    fused = pf.schedules["fuse-cast-rs"].apply()
    bound = {sympy.Symbol("N", integer=True, positive=True): 2**26,
             sympy.Symbol("P", integer=True, positive=True): 4}
    pc = PlanContext.of(lower(fused, 4), preset("h200x4"), bound)
    (kernel,) = kernel_steps(pc.plan, "collective")
    parts = fused_parts_of(pc, kernel)
    assert parts.pushed and parts.rs_nbytes == 2 * 2**26  # bf16, not the f32 it came from
    from workbench.cli import simulate as sim

    preds = {p.name: p for p in sim.predict(pf, sim.load_hardware("h200x4", 1), {})}
    assert preds["fuse-cast-rs"].time_s < 0.7 * preds["unscheduled"].time_s


def test_lowered_to_one_kernel_with_a_computed_push_phase():
    fused = _user().schedules["fuse-cast-rs"].apply()
    plan = lower(fused, 4)
    (step,) = plan.steps
    assert isinstance(step, KernelStep) and step.spec.kind == "collective"
    (push,) = step.spec.pushes
    assert isinstance(push, ComputedPush) and push.c_type == "__nv_bfloat16"
    assert [ld.var for ld in push.loads] == ["q_acc", "q_g"] and len(push.stores) == 1
    assert {b.name for b in plan.buffers} >= {"stage_g16", "gs"}
    assert "g16" not in {b.name for b in plan.buffers}  # the cast value never reaches HBM
    source = render(step.spec)
    assert source.count("This rank's contribution to rank") == 8  # 4 ranks, vector and tail
    work = step_work(step, 4, {b.name: b.numel for b in plan.buffers})
    n = sympy.Symbol("N", integer=True, positive=True)
    assert sympy.simplify(work.link_bytes - 3 * n / 4 * 2) == 0  # P - 1 bf16 slices out


def test_copy_engines_refuse_a_reduce_scatter_with_computation_before_it():
    from workbench.transforms import CopyEngines

    fused = _user().schedules["fuse-cast-rs"].apply()
    _refused(lambda: CopyEngines("acc1", 4).apply(fused),
             r"copy_engines\(acc1, chunks=4\): a fused ReduceScatter with computation before it "
             r"must push its computed values from the SMs, got acc1 before the ReduceScatter; "
             r"keep this region on the SMs")
