"""A watchdog that ends a run's processes when its launcher ends, however it ends.

The launcher starts every rank in a session of its own and ends those sessions itself. Two
cases escaped it (issue 26): a launcher killed with SIGKILL (the OOM killer) runs no code, so
every rank lived on; and a process a rank started that called setsid() left the rank's
session, so it outlived every run. The watchdog is a small process of its own (its own
session, so a signal to the launcher's group does not reach it) that

- learns the ranks' session ids from its stdin (`sid PID` lines),
- records, every TICK_S, each process in those sessions and each descendant of one (by
  parent pid, so a setsid()'d helper is recorded while its parent still lives),
- learns the run's own folders from `dir PATH` lines (mpirun's session folders),
- on `end` (the launcher ended the run) or on end of file (the launcher died: the kernel
  closes its pipe even on SIGKILL) ends every recorded process that still runs (SIGTERM,
  then SIGKILL after GRACE_S), removes the run's folders, then exits.

A process is recorded with its start time, so a pid the system reused is never killed.
Linux only (/proc), as the launcher's own session scan is.

Recording by parent pid misses a double-forking daemon (issue 40): a rank's child that calls
setsid(), forks the daemon and exits within one tick leaves the daemon a child of init, in a
session of its own. So every rank runs under a reaper (`python -I watchdog.py --reap ARGV`,
`reaper_argv`): a process in the rank's session that makes itself the child subreaper of its
descendants (prctl PR_SET_CHILD_SUBREAPER), so an orphan below the rank becomes the reaper's
child, never init's: the watchdog records it by parent pid at its leisure, and when the rank
ends the reaper kills every descendant left and exits with the rank's status.

The reaper also frames the rank's output (`_forward`): it passes the rank's stdout and stderr
on as they come, and ends a line that has run FRAME_BYTES without a newline. Open MPI's
mpirun tags a line only once it is complete and holds it until then, at a cost quadratic in
its length (5.0.11 here: 1 MiB 2 s, 4 MiB 28 s, 16 MiB past 60 s), so a rank printing 400 MB
without a newline said nothing for minutes and was ended as hung while it printed (issue 40);
framed, mpirun passes 64 KiB lines as the rank writes them.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
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


# How long the recorded processes have to end on SIGTERM before SIGKILL: the launcher's own
# grace (launcher._end_sessions). Open MPI 4.1.6's mpirun took 2-3 s to end on SIGTERM on the
# GPU machines (GPU run 44), 5.0's prterun under 1 s here.
GRACE_S = 3.0


def _alive(seen: dict[int, str]) -> list[int]:
    """The recorded processes that still run (the same pid and start time)."""
    table = _table()
    return [pid for pid, start in seen.items() if table.get(pid, (0, 0, None))[2] == start]


def _kill(seen: dict[int, str]) -> None:
    """SIGTERM every recorded process that still runs, then SIGKILL what is left after
    GRACE_S. mpirun answers SIGTERM by ending its ranks and removing its session folder
    (/tmp/ompi.PID), which a SIGKILL leaves behind: the tests' SIGKILLed launchers had
    left 181 of them in this machine's /tmp."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _alive(seen):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + GRACE_S
        while sig == signal.SIGTERM and _alive(seen) and time.monotonic() < deadline:
            time.sleep(TICK_S / 2)


def _remove(folders: list[str]) -> None:
    """Remove the run's own folders (mpirun's session folders: `Watchdog.own`), once what
    could write into them has ended."""
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    """The watchdog's loop (see the module docstring); stdin is the launcher's pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the launcher's to handle
    sids: set[int] = set()
    seen: dict[int, str] = {}
    folders: list[str] = []
    buf = b""
    fd = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([fd], [], [], TICK_S)
        if ready:
            data = os.read(fd, 4096)
            if not data:  # the launcher is gone: end what it started
                _record(sids, seen)
                _kill(seen)
                _remove(folders)
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                word, _, arg = line.decode().partition(" ")
                if word == "sid":
                    sids.add(int(arg))
                elif word == "dir":
                    folders.append(arg)
                elif word == "end":
                    _record(sids, seen)
                    _kill(seen)
                    _remove(folders)
                    os.write(sys.stdout.fileno(), b"ended\n")
                    return
        _record(sids, seen)


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
FRAME_BYTES = 1 << 16  # the longest line the reaper passes on (the launcher reads as much)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _forward(src: int, dst: int) -> None:
    """Copy the rank's stream `src` to `dst` as it comes, a newline added wherever a line
    has run FRAME_BYTES without one (see the module docstring), until end of file."""
    run = 0  # bytes written since the last newline
    while True:
        try:
            chunk = os.read(src, FRAME_BYTES)
        except OSError:
            chunk = b""
        if not chunk:
            os.close(src)
            return
        out, start = bytearray(), 0
        while start < len(chunk):
            nl = chunk.find(b"\n", start)
            end = len(chunk) if nl < 0 else nl + 1
            text = end - start - (nl >= 0)  # the piece's bytes before its newline
            if run + text > FRAME_BYTES:  # the line would run past a frame: end it there
                take = FRAME_BYTES - run
                out += chunk[start:start + take] + b"\n"
                start, run = start + take, 0
                continue
            out += chunk[start:end]
            start, run = end, (0 if nl >= 0 else run + text)
        try:
            _write_all(dst, bytes(out))
        except OSError:  # the reader is gone (the launcher ended the run): drain, drop
            pass


def _descendants(root: int) -> list[int]:
    """Every live process below `root` (by parent pid)."""
    table = _table()
    out, frontier = [], {root}
    while frontier:
        below = [pid for pid, (ppid, _, _) in table.items() if ppid in frontier]
        out += below
        frontier = set(below)
    return out


def reap(argv: list[str]) -> int:
    """Run `argv` as the rank, as the subreaper of everything it starts; when it ends, kill
    what it left (descendants, daemons included) and return its exit status as a shell
    would (a signal N as 128 + N, after the caller re-raises it: see `main`)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:  # not Linux >= 3.4: run as before
        os.execvp(argv[0], argv)
    import threading

    pipes = [os.pipe(), os.pipe()]  # the rank's stdout and stderr, framed by _forward
    try:
        rank = os.posix_spawnp(argv[0], argv, os.environ, file_actions=[
            (os.POSIX_SPAWN_DUP2, pipes[0][1], 1), (os.POSIX_SPAWN_DUP2, pipes[1][1], 2),
            *[(os.POSIX_SPAWN_CLOSE, fd) for pair in pipes for fd in pair]])
    except OSError as e:
        print(f"the rank's command {argv[0]} must run, got {e.strerror}", file=sys.stderr)
        return 127 << 8  # a wait status: exit code 127, as a shell says "not found"
    copiers = []
    for (read, write), dst in zip(pipes, (1, 2)):
        os.close(write)
        copiers.append(threading.Thread(target=_forward, args=(read, dst), daemon=True))
        copiers[-1].start()
    status = None

    def forward(signum, frame):  # the launcher's SIGTERM: the rank's to handle
        try:
            if status is None:
                os.kill(rank, signum)
        except ProcessLookupError:  # reaped a moment ago
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    while status is None:
        pid, code = os.wait()  # the rank, or an orphan the subreaper inherited
        if pid == rank:
            status = code
    for _ in range(100):  # what the rank left: killed, their orphans inherited, and so on
        left = _descendants(os.getpid())
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.01)
    for copier in copiers:  # every writer is gone: the rest of the output, to its end
        copier.join(timeout=5)
    return status


def reaper_argv(argv: list[str]) -> list[str]:
    """`argv` run under the reaper (see the module docstring)."""
    return [sys.executable, "-I", __file__, "--reap", *argv]


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

    def own(self, folder: str) -> None:
        """Remove `folder` (the run's own) when the run ends, however it ends: told before
        the folder is made, so a launcher killed just after making it still has it removed."""
        self.proc.stdin.write(f"dir {folder}\n".encode())
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
    if sys.argv[1:2] == ["--reap"]:
        status = reap(sys.argv[2:])
        if os.WIFSIGNALED(status):  # die of the rank's signal, so the launcher sees it
            sig = os.WTERMSIG(status)
            if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler
                signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        sys.exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
    main()
