"""benchmarks/gpu/kernel_ops_dry.py (the kernel-ops replay's CPU half): one compile-and-measure
command's arguments checked on the CPU as the GPU run would check them. GPU run 23's part 1
named programs of different sizes in one command and stopped at once; the dry run must fail
on that too."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest
from conftest import load_script

from workbench.cli.measure import job_sizes
from workbench.errors import WorkbenchError

ROOT = Path(__file__).resolve().parents[2]


def _dry():
    return load_script("benchmarks/gpu/kernel_ops_dry.py")


def test_one_job_must_share_its_sizes():
    with pytest.raises(WorkbenchError, match=r"^--set must name sizes of program where_sizes, "
                                             r"got N; known: F, H, P, T$"):
        job_sizes(["studies/kernel_ops.py", "studies/kernel_ops.py:reductions"],
                  ("T=8", "H=8", "F=8", "N=8"))
    assert job_sizes(["studies/adagrad.py"], ("N=8", "N=16")) == [{"N": 8}, {"N": 16}]


def test_the_dry_run_fails_where_gpu_run_23_failed(capsys, monkeypatch, tmp_path):
    import tempfile

    monkeypatch.delenv("WB_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    failures = _dry().dry(["--gpus", "1", "studies/kernel_ops.py",
                           "studies/kernel_ops.py:reductions", "--set", "T=8", "--set", "N=8",
                           "--name", "x"])
    assert failures == 1
    # its own cubin cache is gone with the call, and the environment is as it was
    assert list(tmp_path.iterdir()) == [] and "WB_CACHE_DIR" not in os.environ
    assert "FAILED: error: --set must name sizes of program where_sizes, got N" in (
        capsys.readouterr().out)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (CUDA toolkit) not installed")
def test_the_dry_run_checks_lowers_compiles_and_runs_the_reference(capsys, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setenv("WB_CACHE_DIR", str(tmp_path))
    failures = _dry().dry(["--gpus", "1", "--reps", "20", "studies/adagrad.py",
                           "--set", "N=2**10", "--name", "x"])
    out = capsys.readouterr().out
    assert failures == 0, out
    assert "program adagrad ok, 3 schedules ok; sizes N=1024, P=1 ok on h100x8" in out
    lines = [line for line in out.splitlines() if line.startswith("studies/adagrad.py N=")]
    assert [line.split()[3] for line in lines] == [
        "unscheduled:", "rs-c-ag:", "rs-c-ag-sliced-state:", "fuse-rs-c-ag:"]
    assert all(": ok;" in line and "reference finite" in line for line in lines)


def test_every_command_of_the_kernel_ops_replay_shares_its_sizes():
    """The replay of GPU runs 23/26 (benchmarks/suites.toml's replay-kernel-ops): each
    compile-and-measure names programs of one set of sizes."""
    spec = importlib.util.spec_from_file_location("harness_k", ROOT / "benchmarks/harness.py")
    harness = importlib.util.module_from_spec(spec)
    sys.modules["harness_k"] = harness  # dataclasses look their module up
    spec.loader.exec_module(harness)
    runs = [r for r in harness.load_suites()["replay-kernel-ops"].runs if "programs" in r]
    assert len(runs) == 4  # part 1 in two size groups, part 2, part 3
    specs = []
    for run in runs:
        assert job_sizes(run["programs"], tuple(run["sizes"]))  # raises as the GPU run would
        specs += run["programs"]
    for wanted in ("studies/adagrad.py", "studies/sgd_momentum.py:sgd_momentum_wd",
                   "studies/parameter_server.py", "studies/kernel_ops.py:mlp"):
        assert wanted in specs
