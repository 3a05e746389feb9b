"""Files written whole or not at all (issue 26): every output of the workbench (CSV, JSON,
figures, reports, hardware profiles, replay files) goes through `write_atomic`, so a full
disk, a size limit or a kill leaves the previous file as it was, never half a file that a
later command reads as fewer rows."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write `data` to `path` whole or not at all: into a temporary file in the same folder,
    flushed to disk, then renamed over `path`. A full disk, a size limit or a kill leaves the
    previous file as it was (never a truncated CSV that a report reads as fewer rows), and a
    symlink at `path` is replaced, never written through."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give what open() would
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None:  # a full disk: say which file
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
