"""The `workbench` command line: show, check, schedules, simulate, compile-and-measure, ...

Every user error is a WorkbenchError: printed as one message, exit code 2, no traceback unless
`--debug` is given.
"""

from __future__ import annotations

import importlib
import sys

import click
from click.utils import make_default_short_help

from workbench.errors import WorkbenchError

# The commands that live in their own modules, imported when one runs (not for `workbench
# --help`, which must answer in well under a second: they import pandas, sympy, scipy and the
# runtime). name -> (module:attribute, the summary `workbench --help` lists, which
# tests/cli/test_cli_help.py holds equal to the command's own).
LAZY_COMMANDS = {
    "calibrate": ("workbench.cli.measure:calibrate",
                  "Run microbenchmarks only (NCCL collectives, HBM, launch gap, GEMM, the fused "
                  "peer load/store kernel) on P GPUs and write a hardware profile for "
                  "`simulate --hardware`."),
    "compile": ("workbench.cli.compile:compile_program",
                "Write each schedule's CUDA sources and plan, and compile them with nvcc (no "
                "GPU needed)."),
    "compile-and-measure": ("workbench.cli.measure:compile_and_measure",
                            "Compile every schedule of the programs to CUDA, run it on P GPUs, "
                            "check it against the reference interpreter, time it, and print a "
                            "table with the baselines."),
    "report": ("workbench.cli.report:report",
               "Regenerate report.md and figures from a results directory (no GPU needed)."),
    "schedules": ("workbench.cli.schedules:schedules",
                  "List the schedules of a program: the named ones, and with --autotune every "
                  "candidate."),
    "simulate": ("workbench.cli.simulate:simulate",
                 "Predict each schedule's time on a modelled cluster (no GPU needed)."),
    "simulate-step": ("workbench.cli.simulate_step:simulate_step_command",
                      "Predict a training step of the example GPT per phase, for torch (DDP + "
                      "fused AdamW) and the workbench's optimizer (no GPU needed)."),
    "sweep": ("workbench.cli.sweep:main",
              "Run the CoCoNet study sweeps: predict, fold measured results, compare per step."),
}


class LazyGroup(click.Group):
    """A click group whose LAZY_COMMANDS are imported only when one is run or asked for
    (`workbench simulate --help`); `workbench --help` lists them from their summaries."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS and name not in self.commands:
            module, _, attr = LAZY_COMMANDS[name][0].partition(":")
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = [(n, make_default_short_help(LAZY_COMMANDS[n][1], limit)
                 if n in LAZY_COMMANDS and n not in self.commands
                 else self.commands[n].get_short_help_str(limit)) for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


PROGRAM_ARG = click.argument("program_file", metavar="PROGRAM.py[:NAME]")


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
    from workbench.loader import load

    loaded = load(program_file)
    program = loaded.program
    if schedule_name is not None:
        program = _schedule(loaded, schedule_name).apply()
    click.echo(str(program))


@cli.command()
@PROGRAM_ARG
@click.option("--hardware", default="h200x4", show_default=True,
              help="The cluster whose GPU count P the default sizes must divide by.")
@click.option("--nodes", type=int, default=1, show_default=True,
              help="Nodes of the --hardware preset, linked by its NIC; the schedules are "
              "checked against the whole cluster.")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE",
              help="Bind a size over the file's `sizes`, as simulate does (with "
                   "--equivalence: the sizes the interpreter runs at).")
@click.option("--equivalence", is_flag=True,
              help="Also run every named schedule and every autotuner candidate against the "
                   "unscheduled program in the reference interpreter, at small sizes on "
                   "--ranks virtual ranks; a mismatch is reported by statement (exit 2).")
@click.option("--ranks", type=int, default=4, show_default=True,
              help="Virtual ranks (the group size P) of --equivalence.")
@click.option("--force", is_flag=True,
              help="--equivalence past its work limits (1024 ranks, 2^28 elements held in "
              "the interpreter), which bound only its time and memory.")
@click.option("--quiet", is_flag=True,
              help="No progress bar on stderr (there is none where stderr is no terminal).")
def check(program_file: str, hardware: str, nodes: int, sets: tuple[str, ...],
          equivalence: bool, ranks: int, force: bool, quiet: bool) -> None:
    """Verify the program, every schedule it names, and its default sizes on the cluster;
    exit 0 when all are well formed."""
    from cost_model.hardware import load_hardware
    from workbench.cli.simulate import resolve_sizes
    from workbench.loader import check_size_names, load, parse_sets
    from workbench.verify import verify

    size_values = parse_sets(sets)
    cluster = load_hardware(hardware, nodes)
    loaded = load(program_file)
    verify(loaded.program)
    check_size_names(loaded.program, size_values)  # the file's own: checked by load
    programs = {name: sched.apply() for name, sched in loaded.schedules.items()}
    _lowers([("unscheduled", loaded.program), *programs.items()],
            resolve_sizes(loaded.program, loaded.sizes, size_values, cluster))
    verdict = _sizes_verdict(loaded, size_values, cluster, programs)
    elsewhere = _not_on_cluster(loaded, programs, size_values, cluster)
    n = len(programs) - len(elsewhere)
    click.echo(f"{loaded.path}: program {loaded.program.name} ok"
               + (f", {n} schedule{'s' * (n != 1)} ok" if programs else "")
               + (f", {len(elsewhere)} not runnable on {cluster.name} (simulate leaves "
                  f"{'them' if len(elsewhere) > 1 else 'it'} out)" if elsewhere else "")
               + verdict)
    for name, why in elsewhere.items():
        click.echo(f"schedule {name} is not runnable on {cluster.name}: {why}", err=True)
    if equivalence:
        from workbench.cli.outputs import progress, status
        from workbench.equivalence import check_equivalence

        def each(items):
            return progress(items, "equivalence:", lambda item: item[0], plain=False,
                            quiet=quiet)

        def searching():
            return status("equivalence: the autotuner searches", quiet)

        from workbench.cli.simulate import generated_candidates

        def generated(found):
            return generated_candidates(found, ranks, None, "check --equivalence")

        click.echo(check_equivalence(loaded, ranks, size_values, each, searching, generated,
                                     force=force))


def _lowers(programs, sizes: dict) -> None:
    """Lower every program as compile-and-measure would (P ranks per group): what `check`
    approves, lowering accepts (two Updates of one tensor, say, are refused here)."""
    from codegen.lower import SIMULATED_ONLY, lower

    for name, program in programs:
        try:
            lower(program, sizes["P"])
        except WorkbenchError as e:
            if SIMULATED_ONLY in str(e):
                continue  # priced and simulated by design, not generated (design note 72)
            raise type(e)(f"schedule {name} must lower to kernels, got: {e}") from None


def _sizes_verdict(loaded, size_values: dict, cluster, programs: dict) -> str:
    """Bind the default sizes (and --set) as simulate would on `cluster`: a size that must
    divide by P and does not is an error here, not minutes into a sweep; so are sizes at
    which no schedule fits in a GPU's memory (check said `N=2^80 ok` where simulate left
    every schedule out), and the schedules that do not fit are named; so are sizes a
    schedule's chunks cannot take (codegen.compiled.refuse_sizes)."""
    from codegen.compiled import refuse_sizes
    from cost_model.plan_memory import plan_memory
    from workbench.cli.simulate import lowered, resolve_sizes
    from workbench.interpreter import bind_sizes

    sizes = resolve_sizes(loaded.program, loaded.sizes, size_values, cluster)
    missing = [s.name for s in loaded.program.symbols() if s.name not in sizes]
    if missing:
        return (f"; sizes {', '.join(missing)} have no default (pass --set "
                f"{missing[0]}=... to simulate)")
    bound = bind_sizes(loaded.program, sizes)
    shown = ", ".join(f"{k}={v}" for k, v in sorted(sizes.items()))
    too_big = {}
    for name, program in [("unscheduled", loaded.program), *programs.items()]:
        plan, _ = lowered(program, sizes.get("P", cluster.world_size))  # as simulate reads it
        if plan is None:
            continue  # lowering refuses it: _lowers says why
        # chunks the sizes leave undivided: refused here, as compile-and-measure would
        refuse_sizes([(name, plan)], {**sizes, "P": sizes.get("P", cluster.world_size)})
        memory = plan_memory(plan, cluster, bound)
        if not memory.fits:
            too_big[name] = memory.why_not()
    if len(too_big) == 1 + len(programs):
        raise WorkbenchError(f"sizes {shown} must fit a GPU of {cluster.name} with at least one "
                             f"schedule, got none that fits (unscheduled: "
                             f"{too_big['unscheduled']}); simulate would leave every schedule "
                             "out")
    if too_big:
        return (f"; sizes {shown} ok on {cluster.name}, where {', '.join(too_big)} "
                "do not fit in a GPU's memory (simulate leaves them out)")
    return f"; sizes {shown} ok on {cluster.name}"


def _not_on_cluster(loaded, programs: dict, size_values: dict, cluster) -> dict[str, str]:
    """Schedules the cluster cannot run at the resolved sizes (a fused collective kernel
    across NVLink domains), as simulate refuses them: name -> why."""
    from workbench.cli.simulate import resolve_sizes
    from workbench.errors import NotOnThisCluster
    from workbench.verify import verify

    sizes = resolve_sizes(loaded.program, loaded.sizes, size_values, cluster)
    if any(s.name not in sizes for s in loaded.program.symbols()):
        return {}
    placement = cluster.placement(sizes)
    out = {}
    for name, program in programs.items():
        try:
            verify(program, placement)
        except NotOnThisCluster as e:
            out[name] = str(e).split("\n\nin program:")[0]
    return out


def _schedule(loaded, name: str):
    if name not in loaded.schedules:
        known = ", ".join(sorted(loaded.schedules)) or "none"
        raise WorkbenchError(f"--schedule must name a schedule of {loaded.path}, got {name!r}; "
                             f"known: {known}")
    return loaded.schedules[name]


def main(argv: list[str] | None = None) -> int:
    """The `workbench` command line on `argv` (default sys.argv[1:]): its exit code. Ctrl-C
    propagates as KeyboardInterrupt, which the entry point answers (workbench.cli.entry)."""
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
        # Ctrl-C (click turns it into Abort): the entry point answers it, as it does one that
        # lands while this module loads (workbench.cli.entry).
        raise KeyboardInterrupt from None
    return 0
