"""Shared fixtures: the studies, golden-file comparison (regenerate with
WORKBENCH_REGEN_GOLDEN=1, never silently), the compiled-kernel cache of the tests, hypothesis
profiles, and the parallel run of the whole suite.

`python -m pytest` (no paths: the whole suite, as the README and CI run it) runs on every core
with pytest-xdist (the dev extra) when it is installed, each test file on one worker
(`--dist loadfile`: a module's fixtures build once); naming paths runs them in this process as
before, and `-n 0` (or `-n N`) says otherwise."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Examples per property test without a count of its own (a test's @settings(max_examples=...)
# keeps its count): "ci" sized for the 2-core machine and derandomized (the same examples every
# run, so a clean clone's CI passes or fails as the commit does, not as its draw does);
# HYPOTHESIS_PROFILE=thorough searches longer, with fresh examples each run (pass
# --hypothesis-seed=N to repeat one): the search that finds new cases. No deadline: a shared
# machine's pauses are no bug.
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True)
settings.register_profile("thorough", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """The whole suite (no paths given: pytest runs `testpaths`) on every core, test files
    spread over pytest-xdist's workers; nothing changes where xdist is absent, where -n, -p
    no:xdist, --pdb or --collect-only is given, or inside a worker."""
    whole_suite = config.args_source is pytest.Config.ArgsSource.TESTPATHS
    if (not whole_suite or hasattr(config, "workerinput")
            or not config.pluginmanager.has_plugin("xdist")
            or getattr(config.option, "numprocesses", 0) is not None
            or config.getoption("usepdb") or config.getoption("collectonly")):
        return
    config.option.numprocesses = "auto"
    if config.option.dist == "no":
        config.option.dist = "loadfile"

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
    sys.modules[spec.name] = module  # a dataclass of the script looks its module up
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


def _nvcc_version() -> str:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    try:
        return subprocess.run([nvcc, "--version"], capture_output=True, text=True,
                              timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "no nvcc"


@pytest.fixture(scope="session")
def _cubin_cache_dir(request, tmp_path_factory) -> Path:
    """One compiled-kernel cache for every test that compiles, kept between runs in pytest's
    cache folder (`.pytest_cache`, per nvcc version: a cubin of another nvcc proves nothing
    about this one): a kernel is compiled by nvcc once, not once per test and run. The cache
    is keyed by the kernel's source, nvcc's flags and the headers (runtime.compiler), and
    written atomically, so xdist's workers share it safely."""
    version = hashlib.sha256(_nvcc_version().encode()).hexdigest()[:12]
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    if cache is None:
        return tmp_path_factory.mktemp("cubin")
    return Path(cache.mkdir(f"cubin-nvcc-{version}"))


@pytest.fixture
def cubin_cache(_cubin_cache_dir, monkeypatch) -> Path:
    """WB_CACHE_DIR set to the tests' shared cubin cache (`_cubin_cache_dir`) for one test;
    a test of the cache itself uses a folder of its own."""
    monkeypatch.setenv("WB_CACHE_DIR", str(_cubin_cache_dir))
    return _cubin_cache_dir

