"""The worker's heartbeat during long CPU work (the launcher ends a rank silent for
--hang-timeout seconds; a reference computation that takes minutes is not a hang)."""

import time

from workbench.runtime.worker import busy


def test_busy_logs_while_the_body_runs_and_stops_after(capsys):
    with busy(3, "computing the reference", every_s=0.05):
        time.sleep(0.3)
    during = capsys.readouterr().out.splitlines()
    assert len(during) >= 3
    assert all(line.startswith("[rank 3 ") and "still computing the reference (" in line
               for line in during)
    time.sleep(0.2)
    assert capsys.readouterr().out == ""  # the heartbeat ended with the body


def test_busy_ends_its_heartbeat_when_the_body_raises(capsys):
    try:
        with busy(0, "working", every_s=0.05):
            raise ValueError("boom")
    except ValueError:
        pass
    time.sleep(0.2)
    capsys.readouterr()
    time.sleep(0.2)
    assert capsys.readouterr().out == ""
