"""A watchdog that ends a run's processes when its launcher ends, however it ends.

The launcher starts every rank in a session of its own and ends those sessions itself. Two
cases escaped it (issue 26): a launcher killed with SIGKILL (the OOM killer) runs no code, so
every rank lived on; and a process a rank started that called setsid() left the rank's
session, so it outlived every run. The watchdog is a small process of its own (its own
session, so a signal to the launcher's group does not reach it) that

- learns the ranks' session ids from its stdin (`sid PID` lines),
- records, every TICK_S, each process in those sessions and each descendant of one (by
  parent pid, so a setsid()'d helper is recorded while its parent still lives),
- on `end` (the launcher ended the run) or on end of file (the launcher died: the kernel
  closes its pipe even on SIGKILL) kills every recorded process that still runs, then exits.

A process is recorded with its start time, so a pid the system reused is never killed.
Linux only (/proc), as the launcher's own session scan is.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

TICK_S = 0.1


def _table() -> dict[int, tuple[int, int, str]]:
    """pid -> (ppid, session, start time) of every live process."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state ppid pgrp session ... starttime
        if fields[0] != "Z":
            out[int(entry)] = (int(fields[1]), int(fields[3]), fields[19])
    return out


def _record(sids: set[int], seen: dict[int, str]) -> None:
    """Add to `seen` (pid -> start time) every process of the sessions `sids` and every
    descendant of a process seen."""
    table = _table()
    changed = True
    while changed:
        changed = False
        for pid, (ppid, sid, start) in table.items():
            if pid in seen or pid == os.getpid():
                continue
            if sid in sids or (ppid in seen and seen[ppid] == table.get(ppid, (0, 0, ""))[2]):
                seen[pid] = start
                changed = True


def _kill(seen: dict[int, str]) -> None:
    table = _table()
    for pid, start in seen.items():
        if table.get(pid, (0, 0, None))[2] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def main() -> None:
    """The watchdog's loop (see the module docstring); stdin is the launcher's pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the launcher's to handle
    sids: set[int] = set()
    seen: dict[int, str] = {}
    buf = b""
    fd = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([fd], [], [], TICK_S)
        if ready:
            data = os.read(fd, 4096)
            if not data:  # the launcher is gone: end what it started
                _record(sids, seen)
                _kill(seen)
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                word, _, arg = line.decode().partition(" ")
                if word == "sid":
                    sids.add(int(arg))
                elif word == "end":
                    _record(sids, seen)
                    _kill(seen)
                    os.write(sys.stdout.fileno(), b"ended\n")
                    return
        _record(sids, seen)


class Watchdog:
    """The launcher's handle on its watchdog process."""

    def __init__(self):
        # Run as a script, isolated (-I): the standard library only, so it watches within a
        # fraction of a second (importing the workbench package would take seconds).
        self.proc = subprocess.Popen([sys.executable, "-I", __file__],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     start_new_session=True)

    def watch(self, sid: int) -> None:
        """Record session `sid` (a rank's, or mpirun's) and what runs in it from now on."""
        self.proc.stdin.write(f"sid {sid}\n".encode())
        self.proc.stdin.flush()

    def end(self, timeout_s: float = 10.0) -> None:
        """Kill what is left of the watched sessions and their descendants; wait for it."""
        try:
            self.proc.stdin.write(b"end\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    main()
