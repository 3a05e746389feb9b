"""Output paths checked before any work: a run that simulates for minutes, or measures on GPUs,
must not end in an OSError traceback because `--csv` names a folder that does not exist."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.files import check_target, write_atomic


def check_output_file(path: str | Path | None, option: str) -> None:
    """`option`'s file must be writable: its folder exists and can be written, and the path is
    not a folder, a device, a FIFO, a socket or a symlink. None (the option not given) passes."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise WorkbenchError(f"{option} must name a file, got the folder {path}; add a file "
                             f"name, e.g. {path / 'out'}{path.suffix or ''}")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise WorkbenchError(f"{option} must be in an existing folder, got {path} (no folder "
                             f"{folder}); create it first: mkdir -p {folder}")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise WorkbenchError(f"{option} must be writable, got {path} (permission denied); "
                             "pick another path")
    check_target(path)


def check_output_files(paths: dict[str, str | Path | None]) -> None:
    """check_output_file for each option -> path given, and no two options naming one file
    (`--csv X --json X` kept only the last written, without a word)."""
    seen: dict[str, str] = {}
    for option, path in paths.items():
        check_output_file(path, option)
        if path is None:
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise WorkbenchError(f"{option} must name a file of its own, got {path}, which "
                                 f"{seen[key]} names too; one would replace the other: pick "
                                 "two file names")
        seen[key] = option


def check_output_dir(path: str | Path | None, option: str) -> None:
    """`option`'s folder must exist or be creatable: not a file, and its nearest existing
    ancestor a writable folder; never a symlink (the command would write through it)."""
    if path is None:
        return
    path = Path(path)
    if path.is_symlink():
        raise WorkbenchError(f"{option} must be a real folder, got {path}, a symlink (to "
                             f"{os.path.realpath(path)}); the workbench never writes through a "
                             "link: pass the folder it points to")
    if path.exists() and not path.is_dir():
        raise WorkbenchError(f"{option} must name a folder, got the file {path}; pick a folder")
    ancestor = path
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK):
        raise WorkbenchError(f"{option} must be a folder that can be created or written, got "
                             f"{path} ({ancestor} is not a writable folder); pick another path")


def write_csv(df, path: str | Path, inside: str | Path | None = None) -> None:
    """A pandas table as CSV at `path`, atomically (write_atomic; `inside`: its --out)."""
    write_atomic(path, df.to_csv(index=False), inside)


def say_written(path: str | Path, what: str) -> None:
    """One line on stderr for a file a command wrote beside its answer (--csv, --json,
    --trace): where it is and what it holds."""
    import click

    click.echo(f"wrote {path}: {what}", err=True)


def save_figure(fig, path: str | Path, inside: str | Path | None = None, **kwargs) -> None:
    """A matplotlib figure at `path` (its suffix names the format), atomically."""
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip("."), **kwargs)
    write_atomic(path, buf.getvalue(), inside)


_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=-]*")


def confined(folder: str | Path, name: str, suffix: str = "") -> Path:
    """`folder / (name + suffix)` for a name read from data (a study's name in a CSV): a
    name that is not a plain file name (a separator, `..`, a leading dot, control characters)
    is replaced by its safe characters plus a hash of the original, so distinct names stay
    distinct and the path never leaves `folder`."""
    name = str(name)
    if not _SAFE_NAME.fullmatch(name) or ".." in name:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        stem = re.sub(r"[^A-Za-z0-9._+=-]", "_", name).replace("..", "_").lstrip("._-")
        name = f"{stem[:80]}-{digest}" if stem else digest
    path = Path(folder) / f"{name}{suffix}"
    if path.parent != Path(folder):  # cannot happen after the mangle; checked all the same
        raise WorkbenchError(f"a file name from a results file must stay in {folder}, got "
                             f"{name!r}")
    return path


@contextlib.contextmanager
def output_lock(folder: str | Path, option: str):
    """Hold `folder`'s lock while a run writes into it: a second run into the same folder is
    refused at its start (it would keep only the last writer's rows, or delete the other's
    partial file) instead of mixing the two. Every command that writes into an --out folder
    holds it from before its first result to after its last write (issue 40: a lock taken
    only around the final write let two sweeps both exit 0 with one's rows lost)."""
    import fcntl

    folder = Path(folder)
    check_output_dir(folder, option)
    folder.mkdir(parents=True, exist_ok=True)
    # The lock is on the folder itself (flock works on a directory's descriptor on Linux and
    # the BSDs): no lock file is left among the results.
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WorkbenchError(f"{option} must be a folder no other run is writing to, got "
                                 f"{folder}, which another workbench run holds; wait for it "
                                 "or pick another folder") from None
        yield folder
    finally:
        os.close(fd)


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal: progress bars are drawn there only."""
    import click

    return click.get_text_stream("stderr").isatty()


@contextlib.contextmanager
def status(what: str, quiet: bool = False):
    """A spinner on stderr saying `what` is under way, while the block runs (one step that
    takes seconds and has no items to count: the autotuner's search); on a terminal only,
    and not when `quiet`."""
    if quiet or not stderr_is_terminal():
        yield
        return
    from rich.console import Console

    with Console(stderr=True, force_terminal=True).status(what):
        yield


def progress(items, what: str, label=str, *, total: int | None = None, plain: bool = True,
             quiet: bool = False):
    """Yield `items`, saying on stderr which one is under way: a rich progress bar on a
    terminal, so that a command that works for seconds is never silent; elsewhere (a log, CI,
    a pipe) one plain line per item with `plain` (the sweeps and reports), nothing without it
    (the commands whose stderr is their warnings: check, compile, simulate). `quiet`: nothing
    at all (their --quiet). `total`: the count of an iterator that must not be read ahead
    (results yielded as they are done). stdout stays the command's answer, byte for byte."""
    import click

    if quiet or (not plain and not stderr_is_terminal()):
        yield from items
        return
    if total is None:
        items = list(items)
        total = len(items)
    if not stderr_is_terminal():
        for i, item in enumerate(items, 1):
            click.echo(f"{what} {label(item)} ({i}/{total})", err=True)
            yield item
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  console=Console(stderr=True, force_terminal=True), transient=True) as bar:
        task = bar.add_task(what, total=total)
        for item in items:
            bar.update(task, description=f"{what} {label(item)}")
            yield item
            bar.advance(task)
