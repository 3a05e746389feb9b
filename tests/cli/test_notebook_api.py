"""The Python API for notebooks (issue 39 item 7): the README's example runs, the commands'
tables come back as DataFrames, and sizes keyed by `sympy.Symbol("N")` (no assumptions: a
different symbol to sympy than the DSL's N) bind by name where they raised a TypeError."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import sympy
from conftest import ROOT

import cost_model
import simulator
from workbench.cli import api
from workbench.errors import WorkbenchError
from workbench.loader import load


def test_the_example_script_runs():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "examples/notebook_api.py")],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "best adam schedule on h200x4: fuse-rs-c-ag" in done.stdout
    assert "simulator.simulate:" in done.stdout


def test_sizes_given_as_plain_sympy_symbols_bind_by_name():
    program = load(str(ROOT / "studies/sgd.py")).program
    cluster = cost_model.load_hardware("h200x4")
    plain = simulator.simulate(program, cluster, {sympy.Symbol("N"): 2**20,
                                                  sympy.Symbol("P"): 4})
    named = simulator.simulate(program, cluster, {"N": 2**20, "P": 4})
    assert plain.time_s == named.time_s > 0


def test_simulate_and_compile_give_dataframes(tmp_path):
    table = api.simulate("studies/sgd.py", "h200x4", {"N": 2**24})
    assert {"schedule", "time_ms", "speedup", "best"} <= set(table.columns)
    assert (table["best"] == "*").sum() == 1
    lowered = api.compile("studies/sgd.py", gpus=2, out=tmp_path / "sgd")
    assert set(lowered["status"]) <= {"generated", "not generated", "illegal"}
    manifest = json.loads((tmp_path / "sgd" / "manifest.json").read_text())
    assert [e["schedule"] for e in manifest["schedules"]] == list(lowered["schedule"])
    generated = lowered[lowered["status"] == "generated"]
    assert (generated["kernels"] > 0).all()


def test_the_api_names_what_it_takes():
    with pytest.raises(WorkbenchError, match=r"program must be a program file path, a loaded "
                                             r"ProgramFile or a Program, got int; e\.g\. "
                                             r"'studies/adam\.py'"):
        api.simulate(3)
    with pytest.raises(WorkbenchError, match=r"schedule must name a schedule of sgd, got "
                                             r"'nope'; one of \['ar-opt', 'fuse-rs-c-ag', "):
        api.interpret("studies/sgd.py", {"N": 8, "P": 2}, schedule="nope")


def test_the_interpreter_and_the_plan_price_take_plain_symbols_too():
    import numpy as np

    from codegen.lower import lower
    from cost_model.plan_cost import plan_cost
    from workbench.interpreter import random_inputs, run

    program = load(str(ROOT / "studies/sgd.py")).program
    N, P = sympy.Symbol("N"), sympy.Symbol("P")
    x = random_inputs(program, {N: 64, P: 2}, 1)
    np.testing.assert_array_equal(run(program, x, {N: 64, P: 2})["w1"],
                                  run(program, x, {"N": 64, "P": 2})["w1"])
    plan, cluster = lower(program, 4), cost_model.load_hardware("h200x4")
    assert plan_cost(plan, cluster, {N: 2**20, P: 4}).time_s == \
        plan_cost(plan, cluster, {"N": 2**20, "P": 4}).time_s > 0


def test_a_results_table_reads_as_a_dataframe():
    df = api.results(ROOT / "records/h200x4/predicted.csv", "predicted_s")
    assert {"study", "schedule", "size", "gpus", "predicted_s"} <= set(df.columns)
    assert (df["predicted_s"] > 0).all() and len(df) > 10
