"""The user's interrupts, told apart from user code's exceptions.

Ctrl-C (SIGINT) and SIGTERM (`timeout`, a batch scheduler's preemption, `kill`) both unwind
the command as an exception, so that every writer's cleanup runs (workbench.files: no
temporary file, no work folder, no half file) and the entry point answers with one line
(workbench.cli.entry: exit 130 and 143, the shell's 128 + the signal). Python's default
SIGTERM ends the process on the spot, with none of that. User code (a program file, a
schedule function) may raise KeyboardInterrupt itself, which is its error, reported as such;
`received` says whether a signal really came, which is then the user's, not the code's."""

from __future__ import annotations

import signal

_received: list[int] = []


class Terminated(BaseException):
    """SIGTERM reached the command: it unwinds as Ctrl-C's KeyboardInterrupt does."""


def _on_signal(signum: int, frame) -> None:
    _received.append(signum)
    raise KeyboardInterrupt if signum == signal.SIGINT else Terminated


def install() -> None:
    """Answer SIGINT with KeyboardInterrupt and SIGTERM with Terminated, in the main thread,
    recording that they came (`received`). The command's entry point installs this first."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)


def received() -> bool:
    """Whether SIGINT or SIGTERM reached this process since `install`."""
    return bool(_received)
