"""Output paths checked before any work: a run that simulates for minutes, or measures on GPUs,
must not end in an OSError traceback because `--csv` names a folder that does not exist."""

from __future__ import annotations

import os
from pathlib import Path

from workbench.errors import WorkbenchError


def check_output_file(path: str | Path | None, option: str) -> None:
    """`option`'s file must be writable: its folder exists and can be written, and the path is
    not a folder. None (the option not given) passes."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise WorkbenchError(f"{option} must name a file, got the folder {path}; add a file "
                             f"name, e.g. {path / 'out'}{path.suffix or ''}")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise WorkbenchError(f"{option} must be in an existing folder, got {path} (no folder "
                             f"{folder}); create it first: mkdir -p {folder}")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise WorkbenchError(f"{option} must be writable, got {path} (permission denied); "
                             "pick another path")


def check_output_dir(path: str | Path | None, option: str) -> None:
    """`option`'s folder must exist or be creatable: not a file, and its nearest existing
    ancestor a writable folder."""
    if path is None:
        return
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise WorkbenchError(f"{option} must name a folder, got the file {path}; pick a folder")
    ancestor = path
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK):
        raise WorkbenchError(f"{option} must be a folder that can be created or written, got "
                             f"{path} ({ancestor} is not a writable folder); pick another path")


def progress(items, what: str, label=str):
    """Yield `items`, saying on stderr which one is under way: a rich progress bar on a
    terminal, one plain line per item otherwise (a log, CI, a pipe), so that a command that
    works for seconds is never silent. stdout stays the command's answer."""
    import click

    items = list(items)
    if not click.get_text_stream("stderr").isatty():
        for i, item in enumerate(items, 1):
            click.echo(f"{what} {label(item)} ({i}/{len(items)})", err=True)
            yield item
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=len(items))
        for item in items:
            bar.update(task, description=f"{what} {label(item)}")
            yield item
            bar.advance(task)
