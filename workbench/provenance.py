"""Where a result came from: the git commit of the code that produced it (with `-dirty` when
the work tree had uncommitted changes), recorded beside the codegen options in every result's
metadata (`workbench compile-and-measure`, `workbench compile`)."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

# The checkout this module runs from (an installed wheel has none: "unknown").
_ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def git_commit() -> str:
    """The commit of the checkout this code runs from, `-dirty` appended when files tracked by
    git differ from it; "unknown" outside a git checkout (an installed wheel) or without git.
    WB_SOURCE_COMMIT, where set, names it instead: a tree copied to another machine without its
    history (the device runs of `harness.py replay-multi-call*` carry the commit they were sent
    from; the copy's own .git there was the session's first and named a stale commit)."""
    sent = os.environ.get("WB_SOURCE_COMMIT", "").strip()
    if sent:
        return sent
    if not (_ROOT / "pyproject.toml").is_file():
        return "unknown"  # installed: site-packages is no checkout, whatever holds it
    try:
        head = subprocess.run(["git", "-C", str(_ROOT), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode:
            return "unknown"
        dirty = subprocess.run(["git", "-C", str(_ROOT), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def provenance(options) -> dict:
    """What a result's metadata records of how it was made: the commit and the codegen options
    (workbench.options.CodegenOptions.metadata: every knob, and which the cost model prices)."""
    return {"commit": git_commit(), "codegen": options.metadata()}
