"""The `workbench` command line: show, check, schedules, simulate, compile-and-measure, ...

Every user error is a WorkbenchError: printed as one message, exit code 2, no traceback unless
`--debug` is given.
"""

from __future__ import annotations

import sys

import click

from cost_model.hardware import load_hardware
from workbench.cli.measure import calibrate, compile_and_measure
from workbench.cli.report import report
from workbench.cli.schedules import schedules
from workbench.cli.simulate import resolve_sizes, simulate
from workbench.cli.sweep import main as sweep
from workbench.errors import WorkbenchError
from workbench.interpreter import bind_sizes
from workbench.loader import check_size_names, load, parse_sets
from workbench.verify import verify

PROGRAM_ARG = click.argument("program_file", metavar="PROGRAM.py[:NAME]")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show Python tracebacks for errors.")
@click.version_option(package_name="coconet-workbench", prog_name="workbench")
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
@click.option("--hardware", default="h200x4", show_default=True,
              help="The cluster whose GPU count P the default sizes must divide by.")
@click.option("--nodes", type=int, default=1, show_default=True)
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE",
              help="Bind a size over the file's `sizes`, as simulate does (with "
                   "--equivalence: the sizes the interpreter runs at).")
@click.option("--equivalence", is_flag=True,
              help="Also run every named schedule and every autotuner candidate against the "
                   "unscheduled program in the reference interpreter, at small sizes on "
                   "--ranks virtual ranks; a mismatch is reported by statement (exit 2).")
@click.option("--ranks", type=int, default=4, show_default=True,
              help="Virtual ranks (the group size P) of --equivalence.")
def check(program_file: str, hardware: str, nodes: int, sets: tuple[str, ...],
          equivalence: bool, ranks: int) -> None:
    """Verify the program, every schedule it names, and its default sizes on the cluster;
    exit 0 when all are well formed."""
    size_values = parse_sets(sets)
    cluster = load_hardware(hardware, nodes)
    loaded = load(program_file)
    verify(loaded.program)
    check_size_names(loaded.program, loaded.sizes, f"`sizes` in {loaded.path}")
    check_size_names(loaded.program, size_values)
    for sched in loaded.schedules.values():
        sched.apply()
    n = len(loaded.schedules)
    click.echo(f"{loaded.path}: program {loaded.program.name} ok"
               + (f", {n} schedule{'s' * (n != 1)} ok" if n else "")
               + _sizes_verdict(loaded, size_values, cluster))
    if equivalence:
        from workbench.equivalence import check_equivalence

        click.echo(check_equivalence(loaded, ranks, size_values))


def _sizes_verdict(loaded, size_values: dict, cluster) -> str:
    """Bind the default sizes (and --set) as simulate would on `cluster`: a size that must
    divide by P and does not is an error here, not minutes into a sweep."""
    sizes = resolve_sizes(loaded.program, loaded.sizes, size_values, cluster)
    missing = [s.name for s in loaded.program.symbols() if s.name not in sizes]
    if missing:
        return (f"; sizes {', '.join(missing)} have no default (pass --set "
                f"{missing[0]}=... to simulate)")
    bind_sizes(loaded.program, sizes)
    shown = ", ".join(f"{k}={v}" for k, v in sorted(sizes.items()))
    return f"; sizes {shown} ok on {cluster.name}"


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
    args = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in args
    if debug:  # allowed anywhere, also after the subcommand: click knows it on the group only
        args = ["--debug", *(a for a in args if a != "--debug")]
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
    except OSError as e:  # a file or folder the user named, or the disk, not a bug of ours
        if debug:
            raise
        click.echo(f"error: {e.strerror or e} ({e.filename or 'no file name'}); check the path "
                   "and its permissions", err=True)
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
