"""Ctrl-C at random points (issue 40 item 6): `simulate`, `compile` and `sweep predict`
interrupted by SIGINT end with exit 130 (or finish: 0) and one line on stderr, no traceback,
no temporary file left in their output folder, no lock left held. A SIGINT that lands while
the interpreter starts or shuts down ends it by the signal itself (-2 here; 130 in a shell),
which is the same exit a shell reports."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

COMMANDS = {
    "simulate": lambda out: ["simulate", "studies/adam.py", "--hardware", "h200x4",
                             "--json", str(out / "s.json"), "--csv", str(out / "s.csv"),
                             "--quiet"],
    "compile": lambda out: ["compile", "studies/sgd.py", "--gpus", "2", "--out", str(out),
                            "--no-nvcc", "--quiet"],
    "sweep-predict": lambda out: ["sweep", "predict", "--hardware", "h200x4", "--out",
                                  str(out)],
}


def _interrupted(args, delay_s: float) -> subprocess.CompletedProcess:
    """`workbench ARGS` in its own session, SIGINT after `delay_s` (as a terminal's Ctrl-C
    reaches the foreground job)."""
    proc = subprocess.Popen([sys.executable, "-m", "workbench", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    time.sleep(delay_s)
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        pass  # it finished first
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_ctrl_c_at_a_random_point_is_exit_130_and_leaves_nothing_cut(tmp_path, command):
    rng = random.Random(f"{command}-{os.getpid()}")
    for i, delay in enumerate([0.6, 1.2, rng.uniform(0.3, 2.5)]):
        out = tmp_path / f"out{i}"
        out.mkdir()
        done = _interrupted(COMMANDS[command](out), delay)
        assert done.returncode in (0, 130, -signal.SIGINT), (delay, done.returncode,
                                                              done.stderr[-800:])
        assert "Traceback" not in done.stderr, done.stderr[-800:]
        if done.returncode == 130:
            assert done.stderr.strip().splitlines()[-1] == (
                "error: interrupted; an output it had not yet reported was not written")
        leftovers = [p.name for p in out.rglob("*") if p.name.startswith(".")
                     and p.name != ".workbench.lock" or p.suffix == ".tmp"]
        assert not leftovers, (delay, leftovers)
        # the run's lock is released: a second run into the folder is not refused as busy
        assert not (out / ".workbench.lock").exists() or _lock_is_free(out)


def _lock_is_free(folder: Path) -> bool:
    from workbench.files import output_lock

    try:
        with output_lock(folder, "--out"):
            return True
    except Exception:
        return False
