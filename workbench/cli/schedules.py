"""`workbench schedules PROGRAM.py`: list the named schedules of a program (and, with
--autotune, every candidate the autotuner finds), optionally with their printed IR."""

from __future__ import annotations

from pathlib import Path

import click

from workbench import autotune as at
from workbench.cli.outputs import check_output_file
from workbench.errors import WorkbenchError
from workbench.loader import load


@click.command()
@click.argument("program_file", metavar="PROGRAM.py[:NAME]")
@click.option("--ir", "show_ir", is_flag=True, help="Print each schedule's program.")
@click.option("--autotune", is_flag=True, help="Also list the autotuner's candidates.")
@click.option("--max-depth", type=click.IntRange(1, 64), default=8, show_default=True,
              help="Autotuner: transforms per candidate at most.")
@click.option("--max-candidates", type=click.IntRange(1, 100_000), default=200,
              show_default=True,
              help="Autotuner: candidates at most.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Autotuner: write the candidates (replayable transforms) to this file.")
@click.option("--replay", type=click.Path(dir_okay=False, path_type=Path),
              help="Replay the candidates of a JSON file written by --json and print each.")
def schedules(program_file: str, show_ir: bool, autotune: bool, max_depth: int,
              max_candidates: int, json_path: Path | None, replay: Path | None) -> None:
    """List the schedules of a program: the named ones, and with --autotune every candidate."""
    check_output_file(json_path, "--json")
    loaded = load(program_file)
    program = loaded.program
    click.echo(f"program {program.name} ({loaded.path}): {len(loaded.schedules)} named "
               "schedule(s)")
    click.echo("  unscheduled                the program as written")
    illegal = 0
    for name, sched in loaded.schedules.items():
        click.echo(f"  {name:<26} {sched.doc.splitlines()[0] if sched.doc else ''}")
        try:
            run = sched.run()
        except WorkbenchError as e:  # shown as its row, and the listing goes on
            illegal += 1
            click.echo(f"  {'':<26} ILLEGAL: {e}")
            continue
        click.echo(f"  {'':<26} = {'; '.join(str(t) for t in run.trace)}")
        if show_ir:
            click.echo(_indent(str(run.program)))
    if replay is not None:
        _replay(program, replay, show_ir)
    if illegal:
        click.echo(f"{illegal} illegal schedule(s): fix them or remove them from the file",
                   err=True)
    if not (autotune or json_path):
        return
    result = at.search(program, max_depth=max_depth, max_candidates=max_candidates)
    named = at.label_named(result, loaded.schedules)
    bound = " (search cut short by a bound: raise --max-depth/--max-candidates)" \
        if result.truncated else ""
    click.echo(f"autotuner: {len(result.candidates)} distinct programs{bound}")
    for cand in result.candidates:
        label = f"  = {named[cand.name]}" if cand.name in named else ""
        click.echo(f"  {cand.name}{label}")
        click.echo(f"      {'; '.join(str(t) for t in cand.transforms) or '(none)'}")
        if show_ir:
            click.echo(_indent(str(cand.program)))
    if json_path is not None:
        at.save(result, program, json_path)
        click.echo(f"wrote {json_path}")


def _replay(program, path: Path, show_ir: bool) -> None:
    record = at.load_candidates(path)
    if record.get("program") != program.name:
        raise WorkbenchError(f"candidates file {path} must be for program {program.name}, got "
                             f"{record.get('program')!r}")
    click.echo(f"replayed from {path}:")
    for cand in record["candidates"]:
        replayed = at.replay(program, cand)
        click.echo(f"  {cand['name']}: ok")
        if show_ir:
            click.echo(_indent(str(replayed)))


def _indent(text: str) -> str:
    return "\n".join("      " + line for line in text.splitlines())
