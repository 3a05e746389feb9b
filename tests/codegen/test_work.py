"""Work per plan step (codegen.work): what each step reads, writes, moves over links and
computes, from the plan alone, set against what the cost model counts from the IR for the
same schedules (the first part of pricing plan steps, design note 61)."""

import pytest
import sympy
from conftest import ROOT

from codegen import plan as plan_types
from codegen.lower import lower
from codegen.work import WORK_RULES, plan_work
from workbench.errors import WorkbenchError
from workbench.interpreter import bind_sizes
from workbench.loader import load

P = 4


def _case(spec, schedule, sizes):
    pf = load(str(ROOT / spec))
    program = pf.program if schedule is None else pf.schedules[schedule].apply()
    bound = bind_sizes(program, {**sizes, "P": P})
    works = [(s, w) for s, _, w in plan_work(lower(program, P))]
    return program, bound, None, works


def _n(expr, bound):
    return float(sympy.sympify(expr).subs(bound))


def test_every_plan_step_class_has_a_work_rule():
    steps = {c for c in vars(plan_types).values()
             if isinstance(c, type) and c.__name__.endswith("Step")}
    assert steps == set(WORK_RULES)


def test_a_gemm_is_its_flops_and_operands():
    _, bound, _, works = _case("studies/model_parallel.py", "fuse-ar-c", {"T": 8192, "H": 12288})
    gemm = next(w for s, w in works if isinstance(s, plan_types.GemmStep))
    T, H = 8192, 12288
    assert _n(gemm.flops, bound) == 2 * T * (H // P) * H
    assert _n(gemm.read_bytes, bound) == 2 * (T * H // P + H // P * H)
    assert _n(gemm.write_bytes, bound) == 2 * T * H and gemm.link_bytes == 0


def _kernel_steps(plan):
    """(kernel step, chunks of the step holding it) of every kernel of the plan."""
    found = []

    def note(kernel, chunks):
        found.append((kernel, chunks))
        return kernel

    for s in plan.steps:
        plan_types.map_kernels(s, note)
    return found


@pytest.mark.parametrize("schedule,flops", [
    ("ar-opt", 2 * sympy.Symbol("N")),  # w - lr * g1 on the whole N: 2 flops an element
    ("rs-c-ag", sympy.Symbol("N") / 2),  # ... on this rank's N / 4
    ("fuse-rs-c-ag", sympy.Symbol("N") / 2),
])
def test_lowering_counts_a_kernels_flops_once_on_its_step(schedule, flops):
    """The cost model prices a generated kernel from its step: lowering fills its flops
    (decision 104), sizes unbound, the statements' arithmetic on this rank's elements."""
    pf = load(str(ROOT / "studies/sgd.py"))
    kernels = [k for k, _ in _kernel_steps(lower(pf.schedules[schedule].apply(), P))]
    assert len(kernels) == 1
    n = sympy.Symbol("N", integer=True, positive=True)
    assert sympy.simplify(kernels[0].flops - flops.subs(sympy.Symbol("N"), n)) == 0
    assert (kernels[0].dropouts, kernels[0].flops_dtype) == (0, "f32")


def test_a_kernel_launched_per_chunk_counts_one_chunks_flops():
    pf = load(str(ROOT / "studies/model_parallel.py"))
    plan = lower(pf.schedules["overlap-mm-fuse-ar-c"].apply(), P)
    [(consumer, chunks)] = [(k, c) for k, c in _kernel_steps(plan) if c > 1]
    assert chunks == 4
    T, H = (sympy.Symbol(x, integer=True, positive=True) for x in "TH")
    # 3 flops an element of this rank's T H / P slice, a quarter of it per launch
    assert sympy.simplify(consumer.flops - 3 * T * H / (P * chunks)) == 0


def test_synchronizing_kernels_have_no_flops():
    pf = load(str(ROOT / "studies/allreduce_rmsnorm.py"))
    for name, sched in pf.schedules.items():
        try:
            plan = lower(sched.apply(), P)
        except WorkbenchError:
            continue
        for k, _ in _kernel_steps(plan):
            if k.spec.kind in ("barrier", "finish", "wait"):
                assert k.flops == 0, (name, k.spec.name)


@pytest.mark.parametrize("spec,schedule,rules", [
    ("studies/adam.py", "fuse-rs-c-ag", ["collective"]),
    ("studies/adam.py", "rs-c-ag", ["elementwise"] * 3),
    ("studies/lamb.py", "fuse-rs-c-ag", ["collective", "one", "collective"]),
    ("studies/allreduce_rmsnorm.py", "fuse-ar-c", ["collective"]),
    ("studies/pipeline.py", "fuse-rs-c-send-ag", ["collective", "one"]),
])
def test_lowering_decides_each_kernels_grid_rule(spec, schedule, rules):
    """The runtime sizes a kernel's grid by the rule its step carries (decision 104), which
    lowering decides once from its spec (codegen.plan.grid_rule_of)."""
    pf = load(str(ROOT / spec))
    kernels = [k for k, _ in _kernel_steps(lower(pf.schedules[schedule].apply(), P))]
    assert [k.grid_rule for k in kernels] == rules
    assert all(k.grid_rule == plan_types.grid_rule_of(k.spec) for k in kernels)
