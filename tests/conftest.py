"""Shared fixtures: the studies, and golden-file comparison (regenerate with
WORKBENCH_REGEN_GOLDEN=1, never silently)."""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).resolve().parent / "golden"

STUDY_SPECS = [
    "studies/sgd.py", "studies/sgd.py:mixed", "studies/adam.py", "studies/adam.py:mixed",
    "studies/lamb.py", "studies/lamb.py:mixed", "studies/model_parallel.py", "studies/pipeline.py",
]


def _gpu_available() -> bool:
    return shutil.which("nvidia-smi") is not None and os.environ.get("WORKBENCH_NO_GPU") != "1"


def pytest_collection_modifyitems(config, items):
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (nvidia-smi not found)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def assert_golden(relpath: str, text: str) -> None:
    """Compare text with tests/golden/<relpath>; WORKBENCH_REGEN_GOLDEN=1 rewrites it."""
    path = GOLDEN / relpath
    if os.environ.get("WORKBENCH_REGEN_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.is_file(), f"golden file {path} is missing; create it with WORKBENCH_REGEN_GOLDEN=1"
    assert text == path.read_text(), (f"{relpath} differs from its golden file; if the change is "
                                      "intended, regenerate with WORKBENCH_REGEN_GOLDEN=1")


@functools.cache
def load_study(spec: str):
    """A study's ProgramFile, loaded once per test session (loading is deterministic)."""
    from workbench.loader import load

    path, _, attr = spec.partition(":")
    return load(str(ROOT / path) + (f":{attr}" if attr else ""))


@pytest.fixture(scope="session")
def study():
    return load_study
