"""`--symbolic`'s closed form (cost_model.plan_formula): a lower bound on the plan's price
(cost_model.plan_cost) at every size, for every shipped study's named schedules."""

from __future__ import annotations

import pytest
from conftest import ROOT

from codegen.lower import lower
from cost_model.hardware import load_hardware
from cost_model.plan_cost import plan_cost
from cost_model.plan_formula import plan_formula
from workbench.cli.simulate import resolve_sizes
from workbench.errors import WorkbenchError
from workbench.interpreter import bind_sizes
from workbench.loader import load

SKIP = {"__init__.py", "sweep.py", "optimizer_schedules.py", "kernel_ops.py"}
STUDIES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "studies").glob("*.py")
                 if p.name not in SKIP) + ["studies/adam.py:mixed"]


def _scaled(sizes: dict, scale: int) -> dict:
    """The study's sizes divided by `scale` (P kept: the plan is lowered for it)."""
    return {k: v if k == "P" else max(1, v // scale) for k, v in sizes.items()}


@pytest.mark.parametrize("spec", STUDIES)
def test_the_formula_is_a_lower_bound_on_the_plans_price(spec):
    """At the study's sizes and at 1/4 and 1/64 of them (where fixed costs dominate), the
    formula evaluated is at most plan_cost's time (1e-9 relative: float rounding only; the
    bound counts fewer costs at faster rates, never more) and more than 0."""
    cluster = load_hardware("h200x4")
    pf = load(str(ROOT / spec))
    sizes = resolve_sizes(pf.program, pf.sizes, {}, cluster)
    P = sizes.get("P", cluster.world_size)
    checked = 0
    for program in [pf.program, *(s.apply() for s in pf.schedules.values())]:
        try:
            plan = lower(program, P, priced_only=True)
        except WorkbenchError:
            continue  # a schedule lowering refuses has no price to bound
        formula = plan_formula(plan, cluster)
        for scale in (1, 4, 64):
            bound = program.sizes_by_symbol(bind_sizes(program, _scaled(sizes, scale)))
            priced = float(plan_cost(plan, cluster, bound).time_s)
            assert {s.name for s in formula.free_symbols} <= {s.name for s in bound} - {"P"}
            value = float(formula.subs(bound))
            assert 0 < value <= priced * (1 + 1e-9), (program.name, scale, value, priced)
            checked += 1
    assert checked


def test_the_formula_is_the_roofline_where_a_kernel_is_memory_bound():
    """rmsnorm's fused kernel streams its rows: the bound is its HBM time plus a launch, which
    is what plan_cost prices it at (so the bound is tight where nothing else is paid)."""
    cluster = load_hardware("h200x4")
    pf = load(str(ROOT / "studies/rmsnorm.py"))
    program = pf.schedules["fused"].apply()
    sizes = resolve_sizes(pf.program, pf.sizes, {}, cluster)
    plan = lower(program, sizes.get("P", cluster.world_size))
    bound = program.sizes_by_symbol(bind_sizes(program, sizes))
    formula = plan_formula(plan, cluster)
    assert float(formula.subs(bound)) == pytest.approx(
        float(plan_cost(plan, cluster, bound).time_s), rel=1e-9)


def test_p_is_the_plans_number_not_a_symbol():
    """A plan is lowered for a number of ranks: the formula has no P, and halving the ranks
    moves an AllReduce's bus bytes by 2 (P - 1) / P."""
    cluster = load_hardware("h200x4")
    program = load(str(ROOT / "studies/sgd.py")).program
    formulas = {P: plan_formula(lower(program, P), cluster) for P in (2, 4)}
    assert all("P" not in {s.name for s in f.free_symbols} for f in formulas.values())
    assert formulas[2] != formulas[4]
