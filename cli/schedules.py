"""`workbench schedules PROGRAM.py`: list the named schedules of a program (and, with
--autotune, every candidate the autotuner finds), optionally with their printed IR."""

from __future__ import annotations

from pathlib import Path

import click

from workbench.errors import WorkbenchError


@click.command()
@click.argument("program_file", metavar="PROGRAM.py[:NAME]")
@click.option("--ir", "show_ir", is_flag=True, help="Print each schedule's program.")
@click.option("--autotune", is_flag=True, help="Also list the autotuner's candidates.")
@click.option("--max-depth", default=8, show_default=True, help="Autotuner: transforms per "
              "candidate at most.")
@click.option("--max-candidates", default=200, show_default=True,
              help="Autotuner: candidates at most.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Autotuner: write the candidates (replayable transforms) to this file.")
@click.option("--replay", type=click.Path(dir_okay=False, path_type=Path),
              help="Replay the candidates of a JSON file written by --json and print each.")
def schedules(program_file: str, show_ir: bool, autotune: bool, max_depth: int,
              max_candidates: int, json_path: Path | None, replay: Path | None) -> None:
    """List the schedules of a program: the named ones, and with --autotune every candidate."""
    from workbench.loader import load

    loaded = load(program_file)
    program = loaded.program
    click.echo(f"program {program.name} ({loaded.path}): {len(loaded.schedules)} named "
               "schedule(s)")
    click.echo("  unscheduled                the program as written")
    for name, sched in loaded.schedules.items():
        trace = "; ".join(str(t) for t in sched.transforms())
        click.echo(f"  {name:<26} {sched.doc.splitlines()[0] if sched.doc else ''}")
        click.echo(f"  {'':<26} = {trace}")
        if show_ir:
            click.echo(_indent(str(sched.apply())))
    if replay is not None:
        _replay(program, replay, show_ir)
    if not (autotune or json_path):
        return
    from workbench import autotune as at

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
    from workbench import autotune as at

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
