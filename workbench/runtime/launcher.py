"""Start one process per GPU and end them all, with a clear message, when one fails or hangs.

Works like `mpirun -np P`: each child gets WB_RANK, WB_WORLD_SIZE, MASTER_ADDR and MASTER_PORT
(torch.distributed's rendezvous) and runs in a session of its own, so that the launcher can end
the child and everything it started (nvcc, NCCL helpers) with one killpg. A child reports
progress by printing lines; a child that exits non-zero, or prints nothing for `hang_s`
seconds, ends the whole run within a few seconds of being noticed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass

from workbench.errors import RuntimeFault

# NVLink multicast must stay off on the shared GPU machines (a program that uses it can take the
# host's GPUs out of service); every process we start carries these.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}


def free_port() -> int:
    """A TCP port that was free a moment ago (for torch.distributed's store)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen
    last_output_s: float
    tail: deque
    reader: threading.Thread


def _reader(r: _Rank, echo) -> None:
    for raw in iter(r.proc.stdout.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        r.last_output_s = time.monotonic()
        r.tail.append(line)
        if echo is not None:
            echo(r.rank, line)


def _kill_all(ranks: list[_Rank], grace_s: float = 3.0) -> None:
    """SIGTERM every child's session, then SIGKILL what is left after `grace_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for r in ranks:
            # Also when the rank itself has exited: what it started may live on in its group.
            try:
                os.killpg(r.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(r.proc.poll() is None for r in ranks):
            time.sleep(0.05)
    for r in ranks:
        try:
            r.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass


def _describe(ranks: list[_Rank]) -> str:
    parts = []
    for r in ranks:
        last = "\n      ".join(list(r.tail)[-8:]) or "(no output)"
        parts.append(f"  rank {r.rank} (exit {r.proc.poll()}):\n      {last}")
    return "\n".join(parts)


def launch(P: int, argv: list[str], *, hang_s: float = 60.0, env: dict | None = None,
           echo=None, poll_s: float = 0.1) -> list[str]:
    """Run `argv` as P ranks; return each rank's output lines when all exit 0.

    Raises RuntimeFault (and leaves no child behind) when a rank exits non-zero or prints
    nothing for `hang_s` seconds; the message names the rank and shows every rank's last lines.
    """
    if P < 1:
        raise RuntimeFault(f"the number of ranks must be at least 1, got {P}")
    base = dict(os.environ)
    base.update(env or {})
    base.update(SAFE_ENV)
    base.update({"WB_WORLD_SIZE": str(P), "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(free_port()), "PYTHONUNBUFFERED": "1"})
    ranks: list[_Rank] = []
    try:
        for rank in range(P):
            child_env = dict(base, WB_RANK=str(rank), RANK=str(rank), LOCAL_RANK=str(rank),
                             WORLD_SIZE=str(P))
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=child_env,
                                    start_new_session=True)
            r = _Rank(rank, proc, time.monotonic(), deque(maxlen=2000), None)
            r.reader = threading.Thread(target=_reader, args=(r, echo), daemon=True)
            r.reader.start()
            ranks.append(r)
        while True:
            codes = [r.proc.poll() for r in ranks]
            failed = [r for r, c in zip(ranks, codes) if c not in (None, 0)]
            if failed:
                r = failed[0]
                time.sleep(0.3)  # let the failing rank's last lines arrive
                _kill_all(ranks)
                raise RuntimeFault(
                    f"rank {r.rank} must exit 0, got exit code {r.proc.returncode}; every rank "
                    f"was stopped. Last lines:\n{_describe(ranks)}")
            if all(c == 0 for c in codes):
                for r in ranks:
                    r.reader.join(timeout=5)
                return ["\n".join(r.tail) for r in ranks]
            now = time.monotonic()
            silent = [r for r, c in zip(ranks, codes)
                      if c is None and now - r.last_output_s > hang_s]
            if silent:
                r = silent[0]
                _kill_all(ranks)
                raise RuntimeFault(
                    f"rank {r.rank} must report progress at least every {hang_s:.0f} s, got "
                    f"none for {now - r.last_output_s:.0f} s (hung, or waiting for a rank that "
                    f"hung); every rank was stopped. Last lines:\n{_describe(ranks)}")
            time.sleep(poll_s)
    except BaseException:
        _kill_all(ranks)
        raise


def python_argv(module: str, *args: str) -> list[str]:
    """argv that runs `python -m module args...` with this interpreter."""
    return [sys.executable, "-m", module, *args]
