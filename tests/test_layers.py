"""The layers of the house, as pyproject.toml's import-linter contracts state them: the core
imports nothing above it, the studies import the core alone, and no package has an import
circle. A change that breaks one fails here, with lint-imports' report."""

from __future__ import annotations

import shutil
import subprocess

from conftest import ROOT


def test_import_contracts_are_kept():
    lint = shutil.which("lint-imports")
    assert lint is not None, "lint-imports must be installed: pip install -e '.[dev]'"
    done = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_plans_readers_are_held_off_the_ir_by_a_contract():
    """Decision 104: the simulator and the cost model's plan readers import no IR statement
    type (workbench.ir); the contract that says so cannot go missing without this failing."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = {c["name"]: c for c in config["tool"]["importlinter"]["contracts"]}
    contract = contracts["the plan's readers import no IR statement type"]
    assert contract["type"] == "forbidden" and contract["forbidden_modules"] == ["workbench.ir"]
    assert {"simulator", "cost_model.plan_cost", "cost_model.plan_explain",
            "cost_model.plan_memory"} <= set(contract["source_modules"])
    # and the statement rules are gone: nothing can price an IR statement (decision 104)
    import importlib.util

    assert importlib.util.find_spec("cost_model.ops.rules") is None
    assert importlib.util.find_spec("cost_model.ops.program") is None
