"""The `workbench` command's entry point (console script and `python -m workbench`). It answers
Ctrl-C, wherever it lands from here on: while the command line's modules load and during the
command (exit 130, the shell's 128 + SIGINT, and one line, no traceback). Every output is
written whole or not at all (workbench.files), so nothing is left cut. Only this module and
the packages above it, which import nothing, load before."""

from __future__ import annotations

import sys

INTERRUPTED = "error: interrupted; an output it had not yet reported was not written"


def run() -> None:
    """Exit with the command line's code (`workbench.cli.main.main`)."""
    try:
        from workbench.cli.main import main

        code = main()
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        code = 130
    sys.exit(code)
