"""Shared fixtures: the studies, and golden-file comparison (regenerate with
WORKBENCH_REGEN_GOLDEN=1, never silently)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).resolve().parent / "golden"

STUDY_SPECS = [
    "studies/sgd.py", "studies/sgd.py:mixed", "studies/adam.py", "studies/adam.py:mixed",
    "studies/lamb.py", "studies/lamb.py:mixed", "studies/model_parallel.py", "studies/pipeline.py",
    "studies/allreduce_rmsnorm.py", "studies/allreduce_rmsnorm.py:bf16",
]


@functools.cache
def gpu_count() -> int:
    """NVIDIA GPUs this process may use (nvidia-smi -L, narrowed by CUDA_VISIBLE_DEVICES); 0
    without one or with WORKBENCH_NO_GPU=1."""
    smi = shutil.which("nvidia-smi")
    if smi is None or os.environ.get("WORKBENCH_NO_GPU") == "1":
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    from workbench.runtime.job import visible_of

    present = sum(line.startswith("GPU ") for line in out.splitlines())
    return visible_of(present, os.environ.get("CUDA_VISIBLE_DEVICES"))


def gpu_params(counts=(1, 2, 4, 8)):
    """The group sizes P a GPU test runs at, each marked gpu(P) (skipped where fewer GPUs are
    visible); WORKBENCH_GPU_P="4" (or "2,4") keeps only those, for a run at one P."""
    only = os.environ.get("WORKBENCH_GPU_P")
    keep = {int(p) for p in only.split(",")} if only else set(counts)
    return [pytest.param(p, marks=pytest.mark.gpu(p), id=f"P{p}") for p in counts if p in keep]


def pytest_collection_modifyitems(config, items):
    """`@pytest.mark.gpu` needs one GPU, `@pytest.mark.gpu(2)` two: skipped, never failed,
    on a machine with fewer."""
    have = gpu_count()
    for item in items:
        marker = item.get_closest_marker("gpu")
        if marker is None:
            continue
        need = int(marker.args[0]) if marker.args else 1
        if have < need:
            item.add_marker(pytest.mark.skip(
                reason=f"needs {need} NVIDIA GPU{'s' * (need > 1)}, this machine has {have}"))


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


def load_script(relpath: str, name: str | None = None):
    """A script of the repository that is not in a package (benchmarks/gpu/*.py,
    examples/*.py), loaded by path as a module."""
    import importlib.util

    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def load_study(spec: str):
    """A study's ProgramFile, loaded once per test session (loading is deterministic)."""
    from workbench.loader import load

    path, _, attr = spec.partition(":")
    return load(str(ROOT / path) + (f":{attr}" if attr else ""))


@pytest.fixture(scope="session")
def study():
    return load_study
