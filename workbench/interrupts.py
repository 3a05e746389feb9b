"""The user's interrupts, told apart from user code's exceptions.

Ctrl-C (SIGINT) and SIGTERM (`timeout`, a batch scheduler's preemption, `kill`) both unwind
the command as an exception, so that every writer's cleanup runs (workbench.files: no
temporary file, no work folder, no half file) and the entry point answers with one line
(workbench.cli.entry: exit 130 and 143, the shell's 128 + the signal). Python's default
SIGTERM ends the process on the spot, with none of that. User code (a program file, a
schedule function) may raise KeyboardInterrupt itself, which is its error, reported as such;
`received` says whether a signal really came, which is then the user's, not the code's."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_received: list[int] = []
_pending: list[int] = []  # signals held back by `deferred`, raised when it ends
_deferring = 0


class Terminated(BaseException):
    """SIGTERM reached the command: it unwinds as Ctrl-C's KeyboardInterrupt does."""


def _on_signal(signum: int, frame) -> None:
    _received.append(signum)
    if _deferring:
        _pending.append(signum)
        return
    _raise(signum)


def _raise(signum: int) -> None:
    raise KeyboardInterrupt if signum == signal.SIGINT else Terminated


def install() -> None:
    """Answer SIGINT with KeyboardInterrupt and SIGTERM with Terminated, in the main thread,
    recording that they came (`received`). The command's entry point installs this first."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)


def received() -> bool:
    """Whether SIGINT or SIGTERM reached this process since `install`."""
    return bool(_received)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back while the block runs, and raise the first when it ends:
    for a cleanup, which a signal must not cut halfway (a temporary folder half removed
    stays). Where `install` has not run (the package used as a library), the block runs as
    it is; in a thread other than the main one too: signals interrupt the main thread only,
    and one held back there must not be raised in a pool's thread."""
    global _deferring
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if not _deferring and _pending:
            signum = _pending[0]
            _pending.clear()
            _raise(signum)
