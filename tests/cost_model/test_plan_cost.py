"""Pricing plan steps (cost_model.plan_cost, design note 74) against the IR-level cost model
(program_cost) on every shipped study's named schedules and autotuner candidates: each
statement that the plan prices alone costs what its IR statement costs, to rounding, except
where the plan shows what the GPU runs differently, each case named here."""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy
from conftest import ROOT

from codegen import plan as cp
from codegen.lower import lower
from cost_model.hardware import load_hardware
from cost_model.ops import CostContext, program_cost, stmt_cost
from cost_model.plan_cost import PLAN_COST_RULES, PLAN_FIXED_RULES, plan_cost
from workbench import autotune
from workbench.cli.simulate import resolve_sizes
from workbench.errors import WorkbenchError
from workbench.interpreter import bind_sizes
from workbench.loader import load

SKIP = {"__init__.py", "sweep.py", "optimizer_schedules.py", "kernel_ops.py"}
STUDIES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "studies").glob("*.py")
                 if p.name not in SKIP) + ["studies/adam.py:mixed"]



def _programs(spec):
    pf = load(str(ROOT / spec))
    named = [(n, s.apply()) for n, s in pf.schedules.items()]
    found = autotune.search(pf.program, max_depth=4, max_candidates=40)
    return pf, [("unscheduled", pf.program), *named,
                *((c.name, c.program) for c in found.candidates[1:])]


def _kernels(steps):
    return [s for s in steps if isinstance(s, cp.KernelStep)]


def _explained(steps) -> str:
    """Why a statement's plan cost may differ from its IR cost, or "" (it must not)."""
    kinds = [k.spec.kind for k in _kernels(steps)]
    if "finish" in kinds and len(kinds) > 2:
        # a fused region whose norm's users need a second launch: the plan runs the first
        # launch (and its norm's finish) before the collective kernel; the IR-level model
        # overlaps all of its computation with the link
        return "two launches"
    if "finish" in kinds:
        # the finishing kernel of norms: one combine for all of them (the IR pays one per
        # norm), and a launch where the partials are one rank's (the IR pays none)
        return "finish kernel"
    return ""


def _fused(steps) -> bool:
    """Whether a statement runs as a kernel computing several statements: the IR-level model
    writes every value it computes to HBM, the kernel keeps some in registers (note 61)."""
    return any(len(k.stmts) > 1 for k in _kernels(steps))


def test_every_plan_step_class_has_a_cost_rule():
    steps = {c for c in vars(cp).values() if isinstance(c, type) and c.__name__.endswith("Step")}
    assert steps == set(PLAN_COST_RULES) == set(PLAN_FIXED_RULES)


@pytest.mark.parametrize("spec", STUDIES)
def test_plan_steps_cost_what_their_statements_cost(spec):
    cluster = load_hardware("h200x4")
    pf, programs = _programs(spec)
    try:
        sizes = resolve_sizes(pf.program, pf.sizes, {}, cluster)
    except WorkbenchError:
        pytest.skip(f"{spec} has no default sizes")
    P = sizes.get("P", cluster.world_size)
    compared = 0
    for name, program in programs:
        try:
            plan = lower(program, P)
        except WorkbenchError:
            continue  # not generated: simulate keeps the IR price and says so
        bound = bind_sizes(program, sizes)
        ir = program_cost(program, cluster, bound)
        priced = plan_cost(plan, cluster, bound)
        ctx = CostContext(program, cluster, bound)
        stmts = {s.name: s for s in program.stmts}
        for origin, steps, _ in plan.statements():
            stmt_name = origin.stmt
            model = float(stmt_cost(ctx, stmts[stmt_name]).time_s)
            got = sum(float(c.time_s) for c, n in zip(priced.stmts, priced.names)
                      if n == stmt_name)
            if any(isinstance(s, cp.PipelineStep) for s in steps):
                # the fused gather leg is launched per chunk and reads its scalars (the
                # hyperparameters) at every launch: a few bytes the IR counts once
                assert got == pytest.approx(model, rel=1e-6), (name, stmt_name, steps)
            elif not (_explained(steps) or _fused(steps)):
                assert got == pytest.approx(model, rel=1e-9), (name, stmt_name, steps)
            elif not _explained(steps):  # fewer writes, so never slower
                assert model * 0.9 <= got <= model * (1 + 1e-9), (name, stmt_name, steps)
            compared += 1
        moved = abs(float(priced.time_s) / float(ir.time_s) - 1) if ir.time_s else 0
        assert moved < 0.08, (name, float(priced.time_s), float(ir.time_s))
    assert compared


def test_a_norm_phase_before_the_collective_is_priced_as_its_own_launch():
    """LAMB with the norms reordered onto slices and fused into the gather: the plan runs the
    norms' launch, their finish, then the collective kernel; the IR-level model hid the first
    launch under the link (design note 74: +7.3 % on h200x4)."""
    cluster = load_hardware("h200x4")
    pf, programs = _programs("studies/lamb.py")
    program = dict(programs)["split+reorder+fuse+as-slice"]
    sizes = resolve_sizes(pf.program, pf.sizes, {}, cluster)
    bound = bind_sizes(program, sizes)
    plan = lower(program, 4)
    kinds = [s.spec.kind for s in plan.steps if isinstance(s, cp.KernelStep)]
    assert kinds[-3:] == ["elementwise", "finish", "collective"]
    priced, ir = plan_cost(plan, cluster, bound), program_cost(program, cluster, bound)
    first, finish, collective = priced.stmts[-3:]
    assert float(priced.time_s) == pytest.approx(
        float(sum(c.time_s for c in priced.stmts[:-3])) + first.time_s + finish.time_s
        + collective.time_s, rel=1e-9)
    assert float(priced.time_s) > float(ir.time_s) * 1.05


@pytest.mark.parametrize("schedule", ["fuse-ar-c", "fuse-ar-c-oneshot", "fuse-ar-c-lamport"])
def test_a_row_kernels_whole_allreduce_is_priced_from_the_plan_by_its_algorithm(schedule):
    """The AllReduce at the head of a row kernel (two-shot, one-shot, Lamport): its peer
    bytes and HBM traffic from the kernel's spec (codegen.work), its fixed cost by its
    algorithm; the same as the IR-level rule (design note 87), but for the per-row statistic
    that the IR writes and the kernel keeps in registers (T x 4 bytes, 32 KiB here), which
    the passes after a two-shot barrier or Lamport's stores no longer hide (design note 97)."""
    cluster = load_hardware("h200x4")
    pf = load(str(ROOT / "studies/allreduce_rmsnorm.py"))
    program = pf.schedules[schedule].apply()
    sizes = resolve_sizes(pf.program, pf.sizes, {}, cluster)
    bound = bind_sizes(program, sizes)
    plan = lower(program, 4)
    assert any(s.spec.allreduce is not None for s in _kernels(plan.steps))
    priced = float(plan_cost(plan, cluster, bound).time_s)
    ir_s = float(program_cost(program, cluster, bound).time_s)
    statistic_s = sizes["T"] * 4 / cluster.gpu.hbm_bandwidth_Bps
    assert ir_s - statistic_s * 1.01 <= priced <= ir_s * (1 + 1e-9)


def test_an_overlapped_kernel_is_priced_once_per_chunk():
    """An overlapped fused AllReduce is launched once per chunk on a chunk's rows: the plan
    prices it so, and the whole overlap costs what the IR-level rule says."""
    cluster = load_hardware("h200x4")
    pf = load(str(ROOT / "studies/model_parallel.py"))
    program = pf.schedules["overlap-mm-fuse-ar-c"].apply()
    sizes = resolve_sizes(pf.program, pf.sizes, {}, cluster)
    bound = bind_sizes(program, sizes)
    plan = lower(program, 4)
    (step,) = plan.steps
    assert sympy.sympify(step.consumer.extent).subs(bound) * 4 * 4 == \
        bound[sympy.Symbol("T", integer=True, positive=True)] * \
        bound[sympy.Symbol("H", integer=True, positive=True)]
    assert float(plan_cost(plan, cluster, bound).time_s) == pytest.approx(
        float(program_cost(program, cluster, bound).time_s), rel=1e-9)


def test_studies_list_is_every_shipped_program():
    found = {p.name for p in Path(ROOT / "studies").glob("*.py")} - SKIP
    assert {s.split(":")[0].removeprefix("studies/") for s in STUDIES} == found


@pytest.mark.parametrize("spec, P, floor", [
    # an AllReduce's ring: 2 (P - 1) / P of each of adam's N f32 gradients (N = 2^28)
    ("studies/adam.py", 4, 2 * 3 / 4 * 2**28 * 4),
    # a Reduce and a Broadcast chain move the whole buffer each (N = 2^26 f32); the IR-level
    # count priced only AllReduce, ReduceScatter, AllGather, AllToAll and Send, and said 0
    ("studies/parameter_server.py", 4, 2 * 2**26 * 4),
])
def test_the_runtime_link_floor_reads_the_plan(spec, P, floor):
    from workbench.runtime.worker import comm_bytes

    pf = load(str(ROOT / spec))
    assert comm_bytes(pf.program, {**pf.sizes, "P": P}, P) == floor


@pytest.mark.parametrize("spec", ["studies/adam.py", "studies/sgd.py"])
def test_copy_engines_are_priced_from_the_plan(spec):
    """A CopyEngineStep: its pulls and pushes as the reduce-scatter and gather it moves, its
    staging traffic from codegen.work, its pieces' fixed cost; what the IR-level rule says."""
    from workbench import ir as wir
    from workbench.transforms import CopyEngines

    cluster = load_hardware("h200x4")
    program = load(str(ROOT / spec)).schedules["fuse-rs-c-ag"].apply()
    fused = next(s for s in program.stmts if isinstance(s.op, wir.Fused))
    program = CopyEngines(fused.outs[0].name, 8).apply(program)
    plan = lower(program, 4)
    assert any(isinstance(s, cp.CopyEngineStep) for s in plan.steps)
    for n in (2**20, 2**26):
        bound = bind_sizes(program, {"N": n, "P": 4})
        priced = plan_cost(plan, cluster, bound)
        assert float(priced.time_s) == pytest.approx(
            float(program_cost(program, cluster, bound).time_s), rel=1e-9)
