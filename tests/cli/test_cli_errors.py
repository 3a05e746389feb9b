"""compile-and-measure's bad-input messages, on a machine without GPUs (CPU only)."""

import shutil

import pytest

from workbench.cli.main import main


def _run(capsys, *args) -> tuple[int, str]:
    code = main(["compile-and-measure", *args])
    return code, capsys.readouterr().err


def test_reps_below_20_are_refused(capsys):
    code, err = _run(capsys, "studies/adam.py", "--gpus", "2", "--reps", "10")
    assert code == 2 and "--reps must be at least 20 for a stable median, got 10" in err


def test_unknown_schedule_lists_the_known_ones(capsys):
    code, err = _run(capsys, "studies/adam.py", "--gpus", "2", "--schedule", "nope")
    assert code == 2
    assert "--schedule must name a schedule of studies/adam.py, got 'nope'" in err
    assert "fuse-rs-c-ag" in err


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has GPUs")
def test_unscheduled_alone_is_a_known_schedule(capsys):
    code, err = _run(capsys, "studies/adam.py", "--gpus", "2", "--schedule", "unscheduled")
    assert code == 2 and "must name a schedule" not in err
    assert "compile-and-measure must run on a machine with NVIDIA GPUs" in err


def test_unroll_must_be_1_2_or_4(capsys):
    code, err = _run(capsys, "studies/adam.py", "--gpus", "2", "--unroll", "3")
    assert code == 2 and "--unroll must be 1, 2 or 4, got 3" in err


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has GPUs")
def test_no_gpus_says_where_to_run(capsys):
    code, err = _run(capsys, "studies/adam.py", "--gpus", "2")
    assert code == 2
    assert "compile-and-measure must run on a machine with NVIDIA GPUs, got no nvidia-smi" in err


def test_help_needs_no_gpu_library():
    import subprocess
    import sys

    code = ("import sys; from workbench.cli.main import main; rc = main(['compile-and-measure', "
            "'--help']); print(sorted({'pycuda', 'torch', 'mpi4py'} & set(sys.modules)), rc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert "--gpus" in out and out.strip().endswith("[] 0")
