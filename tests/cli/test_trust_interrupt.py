"""Ctrl-C at random points (issue 40 item 6): `simulate`, `compile` and `sweep predict`
interrupted by SIGINT end with exit 130 (or finish: 0) and one line on stderr, no traceback,
no temporary file left in their output folder, no lock left held; from the moment the command's
entry point runs (workbench.cli.entry.run), its modules' loading included. The delays count
from there: before it the interpreter is still starting (site, the environment's .pth files),
where a SIGINT is Python's own (a traceback, exit 1 or -2), not the workbench's, and a loaded
machine stretches that start past any fixed delay. A SIGINT while the interpreter shuts down
ends it by the signal itself (-2 here; 130 in a shell), the exit a shell reports."""

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


# `workbench ARGS` as the console script runs it, saying on stderr when its entry point starts.
ENTRY = ("import sys; from workbench.cli.entry import run; sys.argv[0] = 'workbench'; "
         "print(READY, file=sys.stderr, flush=True); run()")
READY = "entry point running"


def _interrupted(args, delay_s: float) -> subprocess.CompletedProcess:
    """`workbench ARGS` in its own session, SIGINT `delay_s` after its entry point starts (as a
    terminal's Ctrl-C reaches the foreground job)."""
    proc = subprocess.Popen([sys.executable, "-c", ENTRY.replace("READY", repr(READY)), *args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    first = proc.stderr.readline()
    assert first.strip() == READY, first
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
    # the first while the command's modules load (tens of ms), then at random in its run
    for i, delay in enumerate([rng.uniform(0.0, 0.03), 0.6, 1.2, rng.uniform(0.3, 2.5)]):
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
