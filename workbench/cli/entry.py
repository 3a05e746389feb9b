"""The `workbench` command's entry point (console script and `python -m workbench`): it loads
the command line itself, so a Ctrl-C while its modules load ends as one during the run does
(exit 130 and one line, no traceback). Only this module and the packages above it, which
import nothing, load before."""

from __future__ import annotations

import sys

INTERRUPTED = "error: interrupted; an output it had not yet reported was not written"


def run() -> None:
    """Exit with the command line's code (`workbench.cli.main.main`)."""
    try:
        from workbench.cli.main import main
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(130)
    sys.exit(main())
