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
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from workbench import Compute, P, Program, Replicated, Size, Tensor, float32
from workbench.dsl.trace import _unary

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
    from codegen.lower import lower
    from codegen.render import include_dir, render
    from cost_model.hardware import preset
    from cost_model.plan_cost import plan_cost
    from simulator import simulate
    from workbench.interpreter import bind_sizes, run
    from workbench.interpreter.bounds import bounded_reference

    program = _program(toy_function)
    x = np.random.default_rng(0).normal(size=1024).astype(np.float32)
    got = run(program, {"x": x}, {"N": 1024, "P": 2})["y"]
    np.testing.assert_allclose(got, x.astype(np.float64) ** 3 + 1, rtol=1e-6, atol=1e-6)
    ref = bounded_reference(program, {"x": x}, {"N": 1024, "P": 2})
    assert (np.abs(got - ref.values["y"]) <= ref.bounds["y"]).all()

    plan = lower(program, 2)
    (spec,) = plan.kernels()
    source = render(spec)
    assert re.search(r"\* .* \*", source)  # the toy's C, x * x * x, is in the kernel
    cluster, bound = preset("h200x4"), bind_sizes(program, {"N": 2**20, "P": 4})
    assert plan_cost(lower(program, 4), cluster, bound).time_s > 0
    assert simulate(program, cluster, bound).time_s > 0
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("nvcc (CUDA toolkit) not installed: the toy kernel was rendered, not compiled")
    from workbench.runtime.compiler import compile_cubin
    assert compile_cubin(spec.name, source, include_dir()).stat().st_size > 0
