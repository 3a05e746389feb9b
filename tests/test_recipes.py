"""The recipes of docs/architecture.md, followed at test time: a toy elementwise function is
registered into exactly the tables the recipe "How to add an elementwise function" names (with
monkeypatch, so nothing leaks), and a program using it is checked by the verifier, run by the
reference interpreter and the error-bound run, lowered, priced and simulated from its plan,
rendered to CUDA and (where nvcc is present) compiled. A table the recipe names that is gone
fails here (monkeypatch refuses a missing attribute); a table the recipe does not name that a
layer needs fails here too (that layer's lookup raises for the toy name)."""

from __future__ import annotations

import importlib
import re
import shutil
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from codegen import plan as cp
from workbench import (
    AllReduce,
    Compute,
    Local,
    P,
    Program,
    Replicated,
    Size,
    Sum,
    Tensor,
    float32,
    ir,
)
from workbench.dsl.trace import _stmt, _unary

# "cube": x^3, a function no layer knows (its name must not exist anywhere already).
TOY = "toycube"


def _recipe_tables(section: str) -> list[str]:
    """The `module.TABLE` names a recipe section of docs/architecture.md lists."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"`([a-z_.]+\.[A-Z][A-Z_]+)`", body)


# Each table the recipe names, and the toy's entry in it.
ELEMENTWISE_TABLES = {
    "workbench.ir.expressions.UNARY_OPS": None,  # a tuple of names: the toy joins it
    "workbench.interpreter.machine.UNARY_FNS": lambda v: v * v * v,
    "workbench.interpreter.bounds.LIBM_ULPS": 1,
    # d(x^3) for |dx| <= ex: 3 x^2 ex and the higher-order terms
    "workbench.interpreter.bounds.UNARY_ERRORS":
        lambda x, ex, r: 3 * x * x * ex + 3 * np.abs(x) * ex**2 + ex**3,
    "codegen.kernel_builder.C_UNARY": lambda x: f"({x} * {x} * {x})",
}


def _register(monkeypatch, tables: dict) -> None:
    """Each table gets the toy's entry, undone after the test; a missing table raises."""
    for dotted, entry in tables.items():
        module, name = dotted.rsplit(".", 1)
        table = getattr(importlib.import_module(module), name)
        if isinstance(table, tuple):
            monkeypatch.setattr(f"{module}.{name}", (*table, TOY))
        else:
            assert TOY not in table
            monkeypatch.setitem(table, TOY, entry)


@pytest.fixture
def toy_function(monkeypatch):
    """The toy function registered through the recipe's tables; its DSL constructor."""
    _register(monkeypatch, ELEMENTWISE_TABLES)
    return lambda x: _unary(TOY, x)


def test_the_elementwise_recipe_names_exactly_the_tables_the_test_registers_into():
    assert sorted(_recipe_tables("How to add an elementwise function")) == sorted(
        ELEMENTWISE_TABLES)


def _program(fn):
    N = Size("N", multiple_of=P)
    x = Tensor(float32, [N], Replicated, "x")
    y = Compute(fn(x) + 1.0, name="y")
    return Program(inputs=[x], outputs=[y], name="toy")


def test_a_toy_elementwise_function_runs_through_every_layer(toy_function, cubin_cache):
    source = _through_every_layer(_program(toy_function), lambda v: v**3 + 1, kernels=1)
    assert re.search(r"\* .* \*", source)  # the toy's C, x * x * x, is in the kernel


def _through_every_layer(program, want, kernels: int) -> str:
    """Interpret `program` (output checked against `want` of the input and inside its error
    bound), lower it, price and simulate its plan, render its kernels and compile them where
    nvcc is present; the rendered source."""
    from codegen.lower import lower
    from codegen.render import include_dir, render
    from cost_model.hardware import preset
    from cost_model.plan_cost import plan_cost
    from simulator import simulate
    from workbench.interpreter import bind_sizes, run
    from workbench.interpreter.bounds import bounded_reference

    out = program.outputs[0].name
    x = np.random.default_rng(0).normal(size=1024).astype(np.float32)
    got = run(program, {"x": x}, {"N": 1024, "P": 2})[out]
    np.testing.assert_allclose(got, want(x.astype(np.float64)), rtol=1e-6, atol=1e-6)
    ref = bounded_reference(program, {"x": x}, {"N": 1024, "P": 2})
    assert (np.abs(got - ref.values[out]) <= ref.bounds[out]).all()

    specs = lower(program, 2).kernels()
    assert len(specs) == kernels
    sources = [render(spec) for spec in specs]
    cluster, bound = preset("h200x4"), bind_sizes(program, {"N": 2**20, "P": 4})
    assert plan_cost(lower(program, 4), cluster, bound).time_s > 0
    assert simulate(program, cluster, bound).time_s > 0
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("nvcc (CUDA toolkit) not installed: the kernels were rendered, not compiled")
    from workbench.runtime.compiler import compile_cubin
    for spec, source in zip(specs, sources):
        assert compile_cubin(spec.name, source, include_dir()).stat().st_size > 0
    return "\n".join(sources)


# ------------------------------------------------------------------ a toy op


@dataclass(frozen=True, slots=True)
class ToyTwice:
    """A toy op: 2 x, elementwise (its own class, so every layer must look it up by class)."""

    x: str

    @property
    def expr(self):
        return ir.Binary("mul", ir.Const(2.0), ir.Ref(self.x))

    def operands(self):
        return (self.x,)

    def rename(self, m):
        return ToyTwice(m.get(self.x, self.x))

    def infer(self, env, what):
        return env[self.x]

    def __str__(self):
        return f"ToyTwice({self.x})"


def _as_compute(stmt):
    return ir.Stmt(stmt.outs, ir.Compute(stmt.op.expr), stmt.loc)


# Each op table the recipe "How to add an op" names, and the toy's entry (the shipped rules of
# Compute, which read the op's `expr`; lowering takes it as a Compute). The cost model needs no
# entry: the op is priced by the plan steps it lowers to (decision 104).
def _op_tables():
    from codegen.lower import LOWERING_RULES
    from workbench.interpreter.bounds import BOUND_RULES
    from workbench.interpreter.machine import INTERPRETER_RULES

    return {
        "workbench.interpreter.machine.INTERPRETER_RULES": INTERPRETER_RULES[ir.Compute],
        "workbench.interpreter.bounds.BOUND_RULES": BOUND_RULES[ir.Compute],
        "codegen.lower.LOWERING_RULES":
            lambda ctx, s, first: LOWERING_RULES[ir.Compute](ctx, _as_compute(s), first),
    }


@pytest.fixture
def toy_op(monkeypatch):
    """The toy op registered through the recipe's tables; its DSL constructor."""
    for dotted, entry in _op_tables().items():
        module, name = dotted.rsplit(".", 1)
        table = getattr(importlib.import_module(module), name)
        assert ToyTwice not in table
        monkeypatch.setitem(table, ToyTwice, entry)
    monkeypatch.setattr("workbench.ir.ops.OP_CLASSES", (*ir.OP_CLASSES, ToyTwice))
    return lambda x, name=None: _stmt(lambda a: ToyTwice(a[0]), [x], [False], name)


def test_the_op_recipe_names_the_tables_the_test_registers_into():
    named = _recipe_tables("How to add an op")
    assert set(_op_tables()) <= set(named), "a table the toy op needs is not in the recipe"


def test_a_toy_op_runs_through_every_layer(toy_op, cubin_cache):
    N = Size("N", multiple_of=P)
    x = Tensor(float32, [N], Replicated, "x")
    y = toy_op(x, name="y")
    z = Compute(y + 1.0, name="z")
    _through_every_layer(Program(inputs=[x], outputs=[z], name="toy_op"),
                         lambda v: 2 * v + 1, kernels=2)


# ------------------------------------------------------------------ a toy plan step


@dataclass(frozen=True)
class ToyNcclStep(cp.NcclStep):
    """A toy plan step: an NCCL collective under a class of its own. It inherits NcclStep's
    fields (and so passes NcclStep's isinstance checks); every table keyed by the exact step
    class must have an entry for it, which is what the recipe's list is held to."""


def _step_tables():
    from codegen.work import WORK_RULES
    from cost_model.plan_cost import PLAN_COST_RULES, PLAN_FIXED_RULES
    from simulator.plan_steps import PLAN_RUN_RULES
    from workbench.runtime.executor import PREPARERS

    return {
        "codegen.work.WORK_RULES": WORK_RULES[cp.NcclStep],
        "cost_model.plan_cost.PLAN_COST_RULES": PLAN_COST_RULES[cp.NcclStep],
        "cost_model.plan_cost.PLAN_FIXED_RULES": PLAN_FIXED_RULES[cp.NcclStep],
        "simulator.plan_steps.PLAN_RUN_RULES": PLAN_RUN_RULES[cp.NcclStep],
        "workbench.runtime.executor.PREPARERS": PREPARERS[cp.NcclStep],
    }


def _register_toy_step(monkeypatch) -> None:
    """The toy step registered through the recipe's tables, and an AllReduce lowered to it
    (its lowering rule: the shipped one, its NcclStep retyped)."""
    from codegen.lower import LOWERING_RULES

    for dotted, entry in _step_tables().items():
        module, name = dotted.rsplit(".", 1)
        table = getattr(importlib.import_module(module), name)
        monkeypatch.setitem(table, ToyNcclStep, entry)
    shipped = LOWERING_RULES[ir.AllReduce]

    def lower_to_toy(ctx, stmt, first):
        return [(ToyNcclStep(**{f.name: getattr(s, f.name) for f in fields(s)})
                 if type(s) is cp.NcclStep else s, groups)
                for s, groups in shipped(ctx, stmt, first)]
    monkeypatch.setitem(LOWERING_RULES, ir.AllReduce, lower_to_toy)


def test_the_plan_step_recipe_names_the_tables_the_test_registers_into():
    named = _recipe_tables("How to add a plan step")
    assert set(_step_tables()) <= set(named), "a table the toy step needs is not in the recipe"


def _allreduce_program():
    N = Size("N", multiple_of=P)
    x = Tensor(float32, [N], Local, "x")
    y = AllReduce(Sum, x, name="y")
    return Program(inputs=[x], outputs=[y], name="toy_step")


def test_a_toy_plan_step_is_lowered_priced_and_simulated_as_the_step_it_copies(monkeypatch):
    from codegen.lower import lower
    from cost_model.hardware import preset
    from cost_model.plan_cost import plan_cost
    from simulator import simulate
    from workbench.interpreter import bind_sizes

    program = _allreduce_program()
    cluster, bound = preset("h200x4"), bind_sizes(program, {"N": 2**24, "P": 4})
    shipped = (plan_cost(lower(program, 4), cluster, bound).time_s,
               simulate(program, cluster, bound).time_s)
    with monkeypatch.context() as m:
        _register_toy_step(m)
        plan = lower(program, 4)
        assert [type(s) for s in plan.steps] == [ToyNcclStep]
        toy = (plan_cost(plan, cluster, bound).time_s, simulate(program, cluster, bound).time_s)
    # the toy's rules are NcclStep's: it must cost and run exactly as the step it copies
    assert toy == pytest.approx(shipped, rel=1e-12)
    assert shipped[0] > 0 and shipped[1] > 0
    # The runtime's preparer is registered (PREPARERS) but not run here: running a plan needs
    # GPUs (the lead's device runs); tests/runtime/ pins each shipped step with its fakes.


# ------------------------------------------------------------------ every name the recipes cite

PACKAGES = ("workbench", "codegen", "cost_model", "simulator", "wbtorch")


def _resolves(dotted: str) -> bool:
    """Whether `package.module.attr...` names something that exists (the longest importable
    module prefix, then attributes)."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_dotted_name_the_architecture_cites_exists():
    text = (ROOT / "docs" / "architecture.md").read_text()
    names = {n for n in re.findall(r"`([A-Za-z_]+(?:\.[A-Za-z_]+)+)`", text)
             if n.split(".")[0] in PACKAGES}
    assert len(names) > 20  # the recipes cite their tables this way
    assert sorted(n for n in names if not _resolves(n)) == []
