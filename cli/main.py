"""The `workbench` command line: show, check, schedules, simulate, compile-and-measure, ...

Every user error is a WorkbenchError: printed as one message, exit code 2, no traceback unless
`--debug` is given.
"""

from __future__ import annotations

import sys

import click

from cli.measure import calibrate, compile_and_measure
from cli.report import report
from cli.schedules import schedules
from cli.simulate import simulate
from cli.sweep import main as sweep
from workbench.errors import WorkbenchError
from workbench.loader import load
from workbench.verify import verify

PROGRAM_ARG = click.argument("program_file", metavar="PROGRAM.py[:NAME]")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show Python tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Co-optimize computation and communication of distributed ML programs."""
    ctx.obj = {"debug": debug}


@cli.command()
@PROGRAM_ARG
@click.option("--schedule", "schedule_name", default=None,
              help="Print the program after this named schedule.")
def show(program_file: str, schedule_name: str | None) -> None:
    """Print the program's IR with shapes, dtypes and layouts."""
    loaded = load(program_file)
    program = loaded.program
    if schedule_name is not None:
        program = _schedule(loaded, schedule_name).apply()
    click.echo(str(program))


@cli.command()
@PROGRAM_ARG
def check(program_file: str) -> None:
    """Verify the program (and every schedule it names); exit 0 when it is well formed."""
    loaded = load(program_file)
    verify(loaded.program)
    for sched in loaded.schedules.values():
        sched.apply()
    n = len(loaded.schedules)
    click.echo(f"{loaded.path}: program {loaded.program.name} ok"
               + (f", {n} schedule{'s' * (n != 1)} ok" if n else ""))


def _schedule(loaded, name: str):
    if name not in loaded.schedules:
        known = ", ".join(sorted(loaded.schedules)) or "none"
        raise WorkbenchError(f"--schedule must name a schedule of {loaded.path}, got {name!r}; "
                             f"known: {known}")
    return loaded.schedules[name]


for _command in (schedules, simulate, compile_and_measure, calibrate, report, sweep):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `workbench` console script."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        cli.main(args=args, prog_name="workbench", standalone_mode=False)
    except WorkbenchError as e:
        if debug:
            raise
        click.echo(f"error: {e}", err=True)
        return 2
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return 2
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 1
    return 0


def run() -> None:
    """Console-script wrapper: exit with main()'s code."""
    sys.exit(main())


if __name__ == "__main__":
    run()
