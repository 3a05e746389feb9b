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
    env = {**os.environ, **({"WB_FAKE_SETSID": "1"} if setsid else {})}
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL, env=env)
    _wait_for_pids(tmp_path, 2, proc)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert _nothing_left(tmp_path, 2), [p for p in _pids(tmp_path, 2)]
    assert time.monotonic() - t0 < 5


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
