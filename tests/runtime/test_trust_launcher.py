"""Ranks never outlive the run (issue 26), with stand-in ranks on a CPU: a launcher killed
with SIGKILL (the OOM killer) leaves no rank behind, and a process a rank started that left
its session (setsid) is ended with the run, under both launchers."""

import os
import signal
import subprocess
import sys
import time

import pytest
from test_launcher import FAKE, LAUNCHERS, _nothing_left, _pids

from workbench.errors import RuntimeFault
from workbench.runtime.launcher import launch
from workbench.runtime.watchdog import GRACE_S


def _wait_for_pids(tmp_path, P, proc, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while not all((tmp_path / f"pids.{r}").exists() for r in range(P)):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    time.sleep(0.5)  # the watchdog records the grandchildren within its tick


@pytest.mark.parametrize("setsid", [False, True])
@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_sigkilled_launcher_leaves_no_rank_behind(tmp_path, kind, setsid):
    code = ("import sys; from workbench.runtime.launcher import launch; "
            f"launch(2, [sys.executable, {FAKE!r}, 'hang', {str(tmp_path / 'pids')!r}], "
            f"hang_s=60, launcher={kind!r})")
    tmp = tmp_path / "tmp"  # mpirun's session folder (ompi.PID) goes there
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), **({"WB_FAKE_SETSID": "1"} if setsid else {})}
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL, env=env)
    _wait_for_pids(tmp_path, 2, proc)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    # SIGTERM first, SIGKILL after the grace: Open MPI 4.1.6's mpirun took 2-3 s to end on
    # SIGTERM on the GPU machines (GPU run 44 call 24), while its ranks were gone at once
    assert _nothing_left(tmp_path, 2, timeout_s=GRACE_S + 2), [p for p in _pids(tmp_path, 2)]
    assert time.monotonic() - t0 < GRACE_S + 5
    # and the watchdog removes the run's own folder, which mpirun's session folder is in,
    # once what could write into it has ended (a moment after the processes above)
    deadline = time.monotonic() + 5
    while list(tmp.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p.name for p in tmp.iterdir()] == []


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_setsid_helper_is_ended_with_a_failed_run(tmp_path, kind, monkeypatch):
    monkeypatch.setenv("WB_FAKE_SETSID", "1")
    with pytest.raises(RuntimeFault, match=r"^rank 1 must exit 0, got exit code 3"):
        launch(2, [sys.executable, FAKE, "die", str(tmp_path / "pids")], hang_s=30,
               launcher=kind)
    assert _nothing_left(tmp_path, 2)


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_setsid_helper_is_ended_with_a_run_that_succeeds(tmp_path, kind, monkeypatch):
    monkeypatch.setenv("WB_FAKE_SETSID", "1")
    # Each rank starts a helper that leaves its session and detaches from its output (as a
    # daemon does: mpirun would wait for a helper holding the rank's stdout), lives on a
    # moment, then exits 0.
    rank = ("import os, subprocess, sys, time; r = os.environ['WB_RANK']; "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
            "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
            f"open({str(tmp_path / 'pids')!r} + '.' + r, 'w').write(f'{{os.getpid()}} "
            "{c.pid}'); print('up', flush=True); time.sleep(1)")
    launch(2, [sys.executable, "-c", rank], hang_s=30, launcher=kind)
    assert _nothing_left(tmp_path, 2)


def test_a_rank_printing_without_newlines_keeps_the_launcher_bounded():
    from workbench.runtime.launcher import _LINE_KEPT, _TAIL_LINES

    chatty = ("import sys; sys.stdout.write('x' * (10 * 2**20)); sys.stdout.flush(); "
              "print(); print('done')")
    outs = launch(1, [sys.executable, "-c", chatty], hang_s=30, launcher="spawn")
    lines = outs[0].splitlines()
    assert lines[-1] == "done" and max(map(len, lines)) <= _LINE_KEPT
    assert len(outs[0]) <= _TAIL_LINES * (_LINE_KEPT + 1)


@pytest.mark.parametrize("hang_s", [float("nan"), float("inf"), 0, -1])
def test_hang_detection_cannot_be_turned_off(hang_s):
    with pytest.raises(RuntimeFault, match=r"hang_s must be a finite number of seconds > 0 and "
                       r"<= 86400, got .*; NaN or inf would turn hang detection off"):
        launch(1, [sys.executable, "-c", "pass"], hang_s=hang_s, launcher="spawn")


def test_a_fault_after_rank_0_finished_leaves_the_partial_file_incomplete(
        tmp_path, monkeypatch):
    """Rank 0 wrote its records and marked them complete, then another rank hung: the partial
    file must say incomplete, the fault, and which ranks had exited 0."""
    import importlib.util
    import json

    from workbench.runtime import compiler, launcher
    from workbench.runtime import job as runtime_job
    from workbench.runtime.worker import ResultsLog

    real = importlib.util.find_spec
    monkeypatch.setattr(runtime_job, "gpu_count", lambda: 8)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "pycuda" else real(name, *a))
    monkeypatch.setattr(compiler, "nvcc_path", lambda: "/usr/bin/true")

    def launch_(P, argv, hang_s=60.0, echo=None, **kw):
        out = json.loads(open(argv[-1]).read())["out"]
        log = ResultsLog(out, {"P": P}, writing=True)
        log.append({"schedule": "unscheduled"})
        log.finish()
        fault = RuntimeFault("rank 1 must report progress at least every 60 s, got none")
        fault.ranks_ok = [0]
        raise fault

    monkeypatch.setattr(launcher, "launch", launch_)
    partial = tmp_path / "p.partial.json"
    with pytest.raises(RuntimeFault, match="1 record was written before the fault"):
        runtime_job.run_job(["studies/sgd.py"], 2, [{"N": 1024}], "all", 20, 2, False, 60.0,
                            partial=partial)
    meta = json.loads(partial.read_text())["meta"]
    assert meta["complete"] is False and meta["ranks_exited_0"] == [0]
    assert meta["fault"] == "rank 1 must report progress at least every 60 s, got none"


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_rank_that_prints_while_stuck_meets_the_wall_clock_limit(tmp_path, kind):
    """Rank 0 prints progress forever (a heartbeat over a deadlock): hang detection never
    fires, the wall-clock limit does."""
    t0 = time.monotonic()
    with pytest.raises(RuntimeFault, match=r"^the run must end within --time-limit 3 s, got "
                       r"\d+ s; every rank was stopped\. Last lines:\n") as e:
        launch(2, [sys.executable, FAKE, "hang", str(tmp_path / "pids")], hang_s=60,
               launcher=kind, limit_s=3)
    assert time.monotonic() - t0 < 15 and e.value.ranks_ok == []
    assert _nothing_left(tmp_path, 2)


def test_the_busy_heartbeat_stops_after_its_bound(capsys):
    from workbench.runtime.worker import busy

    with busy(0, "computing", every_s=0.05, max_s=0.2):
        time.sleep(0.6)
    lines = capsys.readouterr().out.splitlines()
    assert "still computing after" in lines[-1] and "no more progress lines" in lines[-1]
    assert len(lines) <= 6


def test_time_limit_option_is_checked(capsys):
    from workbench.cli.main import main

    code = main(["compile-and-measure", "studies/sgd.py", "--gpus", "1", "--time-limit", "nan"])
    assert code == 2 and "Invalid value for '--time-limit': must be a finite number > 0" in (
        capsys.readouterr().err)


# A rank that starts a daemon the classic way: a child that leaves the session and forks the
# daemon, then exits at once, so the daemon is an orphan in a session of its own.
DOUBLE_FORK = """
import os, sys, time
r = os.environ['WB_RANK']
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open(sys.argv[1] + '.' + r, 'w').write(str(os.getpid()))
        time.sleep(600)
        os._exit(0)
    os._exit(0)
while not os.path.exists(sys.argv[1] + '.' + r):
    time.sleep(0.01)
print('up', flush=True)
sys.exit(int(sys.argv[2]))
"""


@pytest.mark.parametrize("exit_code", [0, 3])
@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_double_forked_daemon_is_ended_with_its_rank(tmp_path, kind, exit_code):
    """The watchdog records descendants by parent pid every tick and missed a daemon whose
    parent exited within one (issue 40); each rank now runs under a subreaper, which inherits
    the orphan and ends it with the rank."""
    argv = [sys.executable, "-c", DOUBLE_FORK, str(tmp_path / "pids"), str(exit_code)]
    if exit_code:
        with pytest.raises(RuntimeFault, match=r"^rank \d must exit 0, got exit code 3"):
            launch(2, argv, hang_s=30, launcher=kind)
    else:
        launch(2, argv, hang_s=30, launcher=kind)
    assert _nothing_left(tmp_path, 2), _pids(tmp_path, 2)


def test_a_rank_killed_by_a_signal_is_reported_as_such():
    """The reaper dies of its rank's signal, so the launcher reports what it reported."""
    with pytest.raises(RuntimeFault, match=r"^rank 0 must exit 0, got exit code -9"):
        launch(1, [sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], hang_s=30,
               launcher="spawn")


def test_mpirun_output_of_a_line_without_newlines_counts_for_its_rank():
    """mpirun tags a line once, at its start: a rank printing 400 MB without a newline was
    read _LINE_BYTES at a time, every piece after the first taken for mpirun's own, and the
    rank ended as hung while it printed (issue 40). Each piece is now its rank's output."""
    import io
    import itertools
    import threading

    from workbench.runtime import launcher as L

    run = L._Mpirun.__new__(L._Mpirun)
    start = time.monotonic() - 100
    run.ranks, run.own, run.echo = [L._Rank(0, start), L._Rank(1, start)], L._Rank(-1, start), None
    run.seq, run.lock = itertools.count(1), threading.Lock()
    long = b"[1,1]<stdout>:" + b"x" * (3 * L._LINE_BYTES) + b"\n"
    run._read(io.BytesIO(long + b"[1,0]<stdout>:hi\nmpirun says\n"), L._TagParser(False))
    assert run.ranks[1].last_output_s > start + 50 and len(run.ranks[1].tail) == 4
    assert list(run.ranks[0].tail) == ["hi"] and list(run.own.tail) == ["mpirun says"]


CHATTY_NO_NEWLINE = """\
import sys, time
for i in range(24):
    sys.stdout.write('x' * 2**20)
    sys.stdout.flush()
    time.sleep(0.15)
print()
print('done', flush=True)
"""


@pytest.mark.parametrize("kind", LAUNCHERS)
def test_a_rank_printing_megabytes_without_a_newline_is_not_hung(kind):
    """Under mpirun a rank printing 400 MB without a newline was ended as hung while it
    printed (issue 40): Open MPI holds a line until its newline, at a cost quadratic in its
    length (4 MiB: 28 s). The rank's reaper frames its output (64 KiB lines), so 24 MiB over
    3.6 s passes with hang_s 2 and the launcher keeps its bounded tail."""
    from workbench.runtime.launcher import _LINE_KEPT

    outs = launch(1, [sys.executable, "-c", CHATTY_NO_NEWLINE], hang_s=2, launcher=kind)
    lines = outs[0].splitlines()
    assert lines[-1] == "done" and max(map(len, lines)) <= _LINE_KEPT


@pytest.mark.parametrize("chunks, want", [
    ([b"a" * 10 + b"\n" + b"b" * 5], b"a" * 10 + b"\n" + b"b" * 5),
    ([b"x" * (3 << 16) + b"\n"], (b"x" * (1 << 16) + b"\n") * 3),
    ([b"y" * 40000, b"y" * 40000, b"\nz"], b"y" * (1 << 16) + b"\n" + b"y" * (80000 - (1 << 16))
     + b"\nz"),
], ids=["short lines", "three frames", "a line across reads"])
def test_the_reaper_frames_long_lines_and_passes_the_rest_as_is(chunks, want):
    import threading

    from workbench.runtime.watchdog import _forward

    (r_in, w_in), (r_out, w_out) = os.pipe(), os.pipe()
    copier = threading.Thread(target=_forward, args=(r_in, w_out), daemon=True)
    copier.start()

    def rank():  # writes as a rank does, while the test reads what the reaper passes on
        for chunk in chunks:
            while chunk:
                chunk = chunk[os.write(w_in, chunk[:32768]):]
        os.close(w_in)

    writer = threading.Thread(target=rank, daemon=True)
    writer.start()
    got = b""
    while len(got) < len(want):
        got += os.read(r_out, 1 << 20)
    writer.join(timeout=5)
    copier.join(timeout=5)
    os.close(w_out)
    assert got == want and not copier.is_alive()
