"""Ctrl-C and SIGTERM at random points (issue 40 item 6): `simulate`, `compile` and `sweep
predict` interrupted by SIGINT end with exit 130, by SIGTERM with 143 (or finish: 0), and one
line on stderr, no traceback, no temporary file left in their output folder, no lock left held;
from the moment the command's entry point runs (workbench.cli.entry.run), its modules' loading
included. The delays count from there: before it the interpreter is still starting (site, the
environment's .pth files), where a signal is Python's own (a traceback, exit 1, or death by the
signal), not the workbench's, and a loaded machine stretches that start past any fixed delay.
A signal while the interpreter shuts down ends it by the signal itself (-2 or -15 here; 130 or
143 in a shell), the exit a shell reports. A signal while user code runs (a program file, a
schedule function) is the user's, not the code's error; the code raising KeyboardInterrupt
itself is its error."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[2]


# the runner and the judge; benchmarks/interrupt_stress.py runs many more
STRESS = load_script("benchmarks/interrupt_stress.py")
COMMANDS = ("compile", "simulate", "sweep-predict")
ANSWERS = STRESS.ANSWERS


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_signal_at_a_random_point_is_one_line_and_leaves_nothing_cut(tmp_path, command, sig):
    """SIGTERM (`timeout`, a batch scheduler) ended the process on the spot, as Python's
    default does: whatever a writer had made was left; it now unwinds as Ctrl-C does."""
    rng = random.Random(f"{command}-{sig}-{os.getpid()}")
    args_for, finished = STRESS.COMMANDS[command]
    # the first while the command's modules load (tens of ms), then at random in its run
    for i, delay in enumerate([rng.uniform(0.0, 0.03), 0.6, 1.2, rng.uniform(0.3, 2.5)]):
        out, tmp = tmp_path / f"out{i}", tmp_path / f"tmp{i}"
        out.mkdir()
        tmp.mkdir()
        done = STRESS.interrupted(args_for(out), delay, sig, tmp)
        assert STRESS.problem(done, sig, STRESS.leftovers(out, tmp), finished) == "", delay
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


SLOW_SCHEDULE = """
import time
from workbench import *

N = Size("N", multiple_of=P)
sizes = {"N": 1024}
g = Tensor(float32, [N], Local, "g")
program = Program(inputs=[g], outputs=[AllReduce(Sum, g)], name="slow")


@schedule(program)
def slow(s):
    print("schedule running", flush=True)
    time.sleep(30)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_while_a_schedule_function_runs_is_the_users(tmp_path, sig):
    """A schedule raising KeyboardInterrupt is its error (left out of `simulate` with the
    reason); a real Ctrl-C while one ran was taken for that, and the command went on."""
    (tmp_path / "prog.py").write_text(SLOW_SCHEDULE)
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "simulate",
                             str(tmp_path / "prog.py"), "--hardware", "h200x4", "--quiet"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while proc.stdout.readline().strip() != "schedule running":
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()[-800:]
    os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    code, line = ANSWERS[sig]
    assert proc.returncode == code, err[-800:]
    assert err.strip().splitlines() == [line]


def test_a_program_file_raising_keyboard_interrupt_itself_is_its_error(tmp_path, capsys):
    from workbench.cli.main import main

    (tmp_path / "prog.py").write_text("raise KeyboardInterrupt('mine')\n")
    assert main(["check", str(tmp_path / "prog.py")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: program file must run without errors, got KeyboardInterrupt: mine at "
        f"{tmp_path / 'prog.py'}:1; fix the file (run it with python to see the whole "
        "traceback)")


@pytest.fixture
def answering(monkeypatch):
    """This process answers SIGINT and SIGTERM as the command line does, for the test only."""
    from workbench import interrupts

    monkeypatch.setattr(interrupts, "_received", [])
    monkeypatch.setattr(interrupts, "_pending", [])
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    interrupts.install()
    yield interrupts
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_during_a_temporary_folders_removal_waits_for_it(tmp_path, monkeypatch,
                                                                  answering, sig):
    """A Ctrl-C landing while a temporary folder was being removed (the job's `wb-job-*`,
    under load) left it half removed; the removal now holds the signal back until it ends."""
    import shutil

    from workbench import files

    real = shutil.rmtree

    def signalled_midway(path, *args, **kwargs):
        os.kill(os.getpid(), sig)  # handled at once, in the middle of the removal
        real(path, *args, **kwargs)

    monkeypatch.setattr(files.shutil, "rmtree", signalled_midway)
    expected = KeyboardInterrupt if sig == signal.SIGINT else answering.Terminated
    with pytest.raises(expected):
        with files.temporary_folder("wb-test-", tmp_path) as folder:
            (folder / "a").mkdir()
            (folder / "a" / "b.txt").write_text("x")
    assert list(tmp_path.iterdir()) == []
    assert answering.received()


def test_deferred_raises_the_signal_when_the_block_ends(answering):
    done = []
    with pytest.raises(KeyboardInterrupt):
        with answering.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("the block went on")
    assert done == ["the block went on"]
