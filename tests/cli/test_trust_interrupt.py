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


def test_ctrl_c_while_nvcc_runs_stops_the_compile_and_leaves_no_work_folder(tmp_path):
    """A terminal's Ctrl-C reaches nvcc too, which answers it with exit code 2 ('cicc died
    due to signal 2'), not by dying of the signal: that read as a compile error, which kept
    the kernel's hidden work folder in the cubin cache, and the kernels not yet started were
    still compiled one by one. Here nvcc is a stand-in that answers SIGINT as nvcc does."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    started = tmp_path / "started"
    stop = tmp_path / "stop"  # one the pool started as the SIGINT came does not wait 30 s
    (bin_ / "nvcc").write_text(f"#!/bin/sh\ntrap 'exit 2' INT\necho x >> '{started}'\n"
                               f"i=0; while [ $i -lt 300 ] && [ ! -e '{stop}' ]; do sleep 0.1; "
                               "i=$((i+1)); done\nexit 2\n")
    (bin_ / "nvcc").chmod(0o755)
    out, cache = tmp_path / "out", tmp_path / "cache"
    env = dict(os.environ, PATH=f"{bin_}:{os.environ['PATH']}", WB_CACHE_DIR=str(cache))
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "compile", "studies/adam.py",
                             "--gpus", "2", "--out", str(out), "--quiet"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert started.exists(), proc.communicate()[1][-800:]
    os.killpg(proc.pid, signal.SIGINT)
    stopped = time.monotonic()
    stop.touch()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-800:]
    assert err.strip().splitlines()[-1] == ("error: interrupted; an output it had not yet "
                                            "reported was not written")
    assert time.monotonic() - stopped < 20  # the kernels not started are not compiled
    assert not [p.name for p in cache.iterdir() if p.name.startswith(".")]
    assert not [p.name for p in out.rglob("*") if p.name.startswith(".")
                and p.name != ".workbench.lock" or p.suffix == ".tmp"]


def _lock_is_free(folder: Path) -> bool:
    from workbench.files import output_lock

    try:
        with output_lock(folder, "--out"):
            return True
    except Exception:
        return False
