"""The `workbench` command's entry point (console script and `python -m workbench`). It answers
Ctrl-C and SIGTERM (workbench.interrupts), wherever they land from here on: while the command
line's modules load and during the command (exit 130 and 143, the shell's 128 + the signal,
and one line, no traceback). Every output is written whole or not at all (workbench.files),
so nothing is left cut. Only this module and the packages above it load before; the first
import is the module that answers the signals, which imports nothing of ours."""

from __future__ import annotations

import sys

from workbench import interrupts

INTERRUPTED = "error: interrupted; an output it had not yet reported was not written"
TERMINATED = "error: terminated (SIGTERM); an output it had not yet reported was not written"


def run() -> None:
    """Exit with the command line's code (`workbench.cli.main.main`)."""
    try:
        interrupts.install()
        from workbench.cli.main import main

        code = main()
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        code = 130
    except interrupts.Terminated:
        print(TERMINATED, file=sys.stderr)
        code = 143
    sys.exit(code)
