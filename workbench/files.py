"""Files written whole or not at all, and only where they were meant to go (issues 26, 40):
every output of the workbench (CSV, JSON, figures, reports, plans, kernel sources, hardware
profiles, replay files) goes through `write_atomic`, so a full disk, a size limit or a kill
leaves the previous file as it was, never half a file that a later command reads as fewer
rows; and a target that is not a regular file (a device such as /dev/null, a FIFO, a socket,
a folder) or is a symlink is refused, never replaced or written through (the workbench runs as
root on CI and the GPU machines, where replacing /dev/null breaks the system)."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from workbench import interrupts
from workbench.errors import WorkbenchError

_KINDS = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder",
          stat.S_IFLNK: "a symlink", stat.S_IFREG: "a file"}


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def check_target(path: str | Path, inside: str | Path | None = None) -> None:
    """Raise a WorkbenchError unless `path` can be written as an output: absent, or a regular
    file that is not a symlink. With `inside` (an --out folder the command owns), `inside`
    itself and every folder between it and `path` must be a real folder, not a symlink, so
    that a planted link cannot send the command's files elsewhere."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        fix = ("remove the link or name another file" if stat.S_ISLNK(st.st_mode)
               else "name a regular file (leave the option out to write no file)")
        raise WorkbenchError(f"the output {path} must be a regular file or not exist yet, got "
                             f"{_kind(st.st_mode)}, which the workbench never replaces or "
                             f"writes through; {fix}")
    if inside is None:
        return
    inside = Path(inside)
    try:
        rel = path.parent.relative_to(inside)
    except ValueError:
        raise WorkbenchError(f"the output {path} must be inside {inside}") from None
    for i in range(len(rel.parts) + 1):
        folder = inside.joinpath(*rel.parts[:i])
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            return  # made by the command itself, after this check
        if not stat.S_ISDIR(st.st_mode):
            fix = (f"the workbench never writes through a link: pass the folder it points to "
                   f"({os.path.realpath(folder)}) or remove it" if stat.S_ISLNK(st.st_mode)
                   else "remove it or pick another --out")
            raise WorkbenchError(f"the output folder {folder} must be a real folder, got "
                                 f"{_kind(st.st_mode)}; {fix}")


NAME_MAX = 100  # characters of a name that becomes a file or folder name


def check_name(name: object, what: str, fix: str) -> str:
    """`name` (a schedule's name, a run's or a result's stem) if it can be one path component:
    a non-empty string of at most NAME_MAX characters, without a path separator or a control
    character, and not '.' or '..'; else a WorkbenchError naming `what` and `fix`. Checked
    where the name is given (a program file, an option, suites.toml), so a bad one fails at
    load, not as a file written outside --out minutes later."""
    shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "..."
    why = ("not a string" if not isinstance(name, str) else
           "empty" if not name else
           f"{len(name)} characters" if len(name) > NAME_MAX else
           "a path separator" if "/" in name or "\\" in name else
           "a control character" if any(ord(c) < 32 or ord(c) == 127 for c in name) else
           "a path of its own" if name in (".", "..") else "")
    if why:
        raise WorkbenchError(f"{what} must be a plain name (1 to {NAME_MAX} characters, no "
                             f"'/' or '\\', no control characters, not '.' or '..'): it names "
                             f"files and folders, got {shown} ({why}); {fix}")
    return name


def write_atomic(path: str | Path, data: str | bytes, inside: str | Path | None = None) -> None:
    """Write `data` to `path` whole or not at all: into a temporary file in the same folder,
    flushed to disk, then renamed over `path`. A full disk, a size limit or a kill leaves the
    previous file as it was (never a truncated CSV that a report reads as fewer rows), and the
    error names the file. A target that is a symlink, a device, a FIFO, a socket or a folder is
    refused (check_target); `inside`: the --out folder the file must stay in, through no link."""
    path = Path(path)
    check_target(path, inside)
    try:
        with _temporary_beside(path) as (tmp, f):
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
            f.close()
            check_target(path, inside)  # again just before the rename: the check is not a lock
            os.replace(tmp, path)
    except OSError as e:
        if e.filename != str(path):  # a full disk: say which file
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise


@contextlib.contextmanager
def _temporary_beside(path: Path) -> Iterator[tuple[Path, BinaryIO]]:
    """A new empty file in `path`'s folder, hidden and named after `path`, with the mode that
    open() gives (0o666 less the umask), as (its path, it opened for writing) for the block to
    fill and rename over `path`. If the block raises, Ctrl-C included, the file is removed.
    Its name is chosen before the file exists, so that a Ctrl-C landing just as it is created
    still finds it: tempfile.mkstemp says the name only after, and a clean clone's CI at
    cb8eeae was left a `.plan.txt.*.tmp` by a SIGINT in that window."""
    tmp: Path | None = None
    try:
        for _ in range(100):
            tmp = path.parent / f".{path.name[:64]}.{secrets.token_hex(6)}.tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o666)
                break
            except FileExistsError:
                tmp = None  # another's file: never removed here
        else:
            raise FileExistsError(errno.EEXIST, "no free temporary name beside it", str(path))
        with os.fdopen(fd, "wb") as f:
            yield tmp, f
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise


@contextlib.contextmanager
def temporary_folder(prefix: str, parent: str | Path | None = None) -> Iterator[Path]:
    """A new private folder (mode 0700) named PREFIX + random in `parent` (default: the
    temporary folder), removed with all it holds when the block ends, however it ends. It is
    named before it is made, so a Ctrl-C landing as it is made still finds it, and removed
    with Ctrl-C and SIGTERM held back (interrupts.deferred): a signal during the removal left
    `wb-job-*` folders half removed (stress runs at 4785899 under load)."""
    folder: Path | None = None
    try:
        folder = Path(parent or tempfile.gettempdir()) / f"{prefix}{secrets.token_hex(6)}"
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            folder = None  # another's: never removed here
            raise
        yield folder
    finally:
        with interrupts.deferred():
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)


READ_MAX_BYTES = 64 << 20  # a results table or JSON of the workbench is at most megabytes


def read_bounded(path: str | Path, what: str, fix: str, limit: int = READ_MAX_BYTES,
                 follow: bool = False, error: type[WorkbenchError] = WorkbenchError) -> bytes:
    """The bytes of input file `path`, read only if it is a regular file (not a link, a FIFO
    that would block the read forever, a device or a folder) of at most `limit` bytes: the
    size is checked before anything is read, so a 1 GB file is refused at once instead of
    parsed into gigabytes of memory. `what` names the input in the error ("results file"),
    `fix` says what to pass instead; the error never quotes the file's content. `follow`: a
    file the user named on the command line may be a link (to a regular file); one found in
    a folder (a report's inputs) may not. `error`: the WorkbenchError raised."""
    path = Path(path)
    try:
        # O_NOFOLLOW: a link is refused, not followed out of a results folder to any file the
        # user may read (which a report would then quote); O_NONBLOCK: a FIFO does not block
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW))
    except OSError as e:
        kind = "a symlink" if os.path.islink(path) else e.strerror
        raise error(f"{what} {path} must be a regular file that can be read, got "
                             f"{kind}; {fix}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} {path} must be a regular file, got "
                                 f"{_kind(st.st_mode)}; {fix}")
        if st.st_size > limit:
            raise error(f"{what} {path} must be at most {limit} bytes, got "
                                 f"{st.st_size}; {fix}")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while being read
        raise error(f"{what} {path} must be at most {limit} bytes, got more; {fix}")
    return data
