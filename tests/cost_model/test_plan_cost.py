"""Pricing plan steps (cost_model.plan_cost, decisions 74 and 104): every step class has a
price, and the particular steps (a norm's own launch, a row kernel's whole AllReduce by its
algorithm, an overlap's chunks, copy engines, the link floor) are priced from the plan."""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy
from conftest import ROOT

from codegen import plan as cp
from codegen.lower import lower
from cost_model.hardware import load_hardware
from cost_model.plan_cost import PLAN_COST_RULES, PLAN_FIXED_RULES, plan_cost
from cost_model.plan_formula import plan_formula
from workbench import autotune
from workbench.cli.simulate import resolve_sizes
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


def test_every_plan_step_class_has_a_cost_rule():
    steps = {c for c in vars(cp).values() if isinstance(c, type) and c.__name__.endswith("Step")}
    assert steps == set(PLAN_COST_RULES) == set(PLAN_FIXED_RULES)


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
    priced = plan_cost(plan, cluster, bound)
    first, finish, collective = priced.stmts[-3:]
    assert float(priced.time_s) == pytest.approx(
        float(sum(c.time_s for c in priced.stmts[:-3])) + first.time_s + finish.time_s
        + collective.time_s, rel=1e-9)
    assert min(float(first.time_s), float(finish.time_s)) > 0  # each its own launch


PRICES: dict[str, float] = {}  # the row kernel's price by algorithm, as the cases run


@pytest.mark.parametrize("schedule", ["fuse-ar-c", "fuse-ar-c-oneshot", "fuse-ar-c-lamport"])
def test_a_row_kernels_whole_allreduce_is_priced_from_the_plan_by_its_algorithm(schedule):
    """The AllReduce at the head of a row kernel (two-shot, one-shot, Lamport): its peer
    bytes and HBM traffic from the kernel's spec (codegen.work), its fixed cost by its
    algorithm (design notes 87, 97): never below the plan's closed-form bound, and each
    algorithm priced apart."""
    cluster = load_hardware("h200x4")
    pf = load(str(ROOT / "studies/allreduce_rmsnorm.py"))
    program = pf.schedules[schedule].apply()
    sizes = resolve_sizes(pf.program, pf.sizes, {}, cluster)
    bound = bind_sizes(program, sizes)
    plan = lower(program, 4)
    assert any(s.spec.allreduce is not None for s in _kernels(plan.steps))
    priced = float(plan_cost(plan, cluster, bound).time_s)
    # at least the closed-form bound of its steps, and by its algorithm: no two alike
    assert float(plan_formula(plan, cluster).subs(bound)) <= priced * (1 + 1e-9)
    PRICES[schedule] = priced
    assert len(set(PRICES.values())) == len(PRICES)


def test_an_overlapped_kernel_is_priced_once_per_chunk():
    """An overlapped fused AllReduce is launched once per chunk on a chunk's rows: the plan
    prices it so, below the producer and the consumer one after the other."""
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
    apart = lower(pf.schedules["fuse-ar-c"].apply(), 4)  # the same kernels, not overlapped
    assert float(plan_cost(plan, cluster, bound).time_s) < \
        float(plan_cost(apart, cluster, bound).time_s)


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
    staging traffic from codegen.work, its pieces' fixed cost: never below the plan's
    closed-form bound, and growing with the bytes it moves."""
    from workbench import ir as wir
    from workbench.transforms import CopyEngines

    cluster = load_hardware("h200x4")
    program = load(str(ROOT / spec)).schedules["fuse-rs-c-ag"].apply()
    fused = next(s for s in program.stmts if isinstance(s.op, wir.Fused))
    program = CopyEngines(fused.outs[0].name, 8).apply(program)
    plan = lower(program, 4)
    assert any(isinstance(s, cp.CopyEngineStep) for s in plan.steps)
    times = []
    for n in (2**20, 2**26):
        bound = bind_sizes(program, {"N": n, "P": 4})
        times.append(float(plan_cost(plan, cluster, bound).time_s))
        assert float(plan_formula(plan, cluster).subs(bound)) <= times[-1] * (1 + 1e-9)
    assert times[1] > times[0]
