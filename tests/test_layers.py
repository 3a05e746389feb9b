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
