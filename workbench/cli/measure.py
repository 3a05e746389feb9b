"""`workbench compile-and-measure` and `workbench calibrate`: run generated kernels on real
GPUs, one process per GPU, and tabulate measured times, checks and baselines."""

from __future__ import annotations

import datetime
import itertools
import json
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import click

from cost_model import calibration
from workbench.cli.outputs import (
    check_output_dir,
    check_output_file,
    output_lock,
    write_atomic,
    write_csv,
)
from workbench.cli.params import Finite
from workbench.cli.results_table import format_table, link_rate, steps_table, table
from workbench.errors import RuntimeFault, WorkbenchError
from workbench.files import check_name
from workbench.loader import check_size_names, load, parse_sets
from workbench.options import CodegenOptions
from workbench.runtime.calibrate import measure, write_csvs
from workbench.runtime.job import job_stem, run_job

# Seconds without progress before a run is ended: NaN or inf would disable hang detection,
# 0 or less would end a healthy run; a day is longer than any measurement.
HANG_S = Finite(0.0, 86_400.0, low_open=True, example="e.g. --hang-timeout 60")


def _size_sweep(items: tuple[str, ...]) -> list[dict[str, int]]:
    """--set N=2**24 --set N=2**26 --set T=8 -> every combination, in the order given."""
    values: dict[str, list[int]] = {}
    for item in items:
        for name, value in parse_sets((item,)).items():
            values.setdefault(name, []).append(value)
    if not values:
        return [{}]
    names = list(values)
    return [dict(zip(names, combo)) for combo in itertools.product(*(values[n] for n in names))]


def job_sizes(program_files, sets: tuple[str, ...], plans=()) -> list[dict[str, int]]:
    """The size sets a compile-and-measure job runs (every combination of the --set values),
    after checking that every --set names a size of every program: a misspelt or foreign size
    fails here, before any GPU work. One job's programs must share their sizes; programs of
    different sizes are measured by separate commands (`harness.py replay-kernel-ops`'s groups).
    Also called by the CPU-only dry runs, so they validate what the GPU run will."""
    from codegen.compiled import read_compiled

    sweep = _size_sweep(sets)
    for spec in program_files:
        check_size_names(load(spec).program, sweep[0])
    for folder in plans:
        check_size_names(read_compiled(folder).program, sweep[0])
    return sweep


def _plan_spec(folder: str) -> str:
    """The program file a compiled folder was compiled from (what names the results)."""
    from codegen.compiled import read_compiled

    return read_compiled(folder).spec


def _versions() -> dict:
    out = {"python": platform.python_version(), "host": platform.node()}
    for tool in (["nvcc", "--version"], ["nvidia-smi", "--query-gpu=name,driver_version",
                                         "--format=csv,noheader"]):
        try:
            text = subprocess.run(tool, capture_output=True, text=True).stdout.strip()
            out[tool[0]] = text.splitlines()[-1] if tool[0] == "nvcc" else text
        except (OSError, IndexError):
            out[tool[0]] = "absent"
    return out


def options_text(options: CodegenOptions) -> str:
    """The knobs that differ from the defaults, as NAME=VALUE (or "default")."""
    changed = options.changed()
    return " ".join(f"{k}={v}" for k, v in changed.items()) or "default"


@click.command("compile-and-measure")
@click.argument("program_files", nargs=-1, metavar="PROGRAM.py[:NAME]...")
@click.option("--plan", "plans", multiple=True, metavar="DIR",
              help="A folder written by `workbench compile --out DIR` to run as compiled (its "
              "plans, not the program file); repeatable, with or without program files.")
@click.option("--gpus", "P", type=int, required=True,
              help="Ranks, one per GPU (all stages of a pipeline together).")
@click.option("--set", "sets", multiple=True,
              help="Size NAME=VALUE; repeat a name to sweep (e.g. --set N=2**24 --set N=2**26).")
@click.option("--schedule", multiple=True, default=("all",), show_default=True,
              callback=lambda ctx, param, v: ",".join(v),
              help="Schedules to measure besides the unscheduled program (comma-separated, or "
                   "the option repeated), all, or unscheduled (that program alone).")
@click.option("--reps", type=click.IntRange(1, 1_000_000), default=30, show_default=True,
              help="Timed repetitions (>= 20).")
@click.option("--warmup", type=click.IntRange(0, 100_000), default=5, show_default=True,
              help="Untimed runs of each schedule and baseline before the timed ones (CUDA "
              "context, NCCL communicators, torch.compile, caches).")
@click.option("--no-baselines", is_flag=True, help="Skip the PyTorch/NCCL baselines.")
@click.option("--out", "out_dir", default="workbench-out/measured", show_default=True,
              help="Folder for the CSV and JSON results (relative to the current folder; "
              "never inside the package).")
@click.option("--hang-timeout", "hang_s", default=60.0, show_default=True, type=HANG_S,
              help="Seconds without progress from a rank before the run is ended.")
@click.option("--time-limit", "limit_s", type=Finite(0.0, 1e6, low_open=True), default=None,
              help="Seconds the whole run may take before it is ended (default: no limit).")
@click.option("--quiet", is_flag=True, help="Do not echo the ranks' progress lines.")
@click.option("--name", default=None, help="Stem of the result files (default: from programs).")
@click.option("--unroll", default=1, show_default=True,
              help="Vectors per thread per iteration in fused collectives (1, 2 or 4).")
@click.option("--collective-mode", "mode", type=click.Choice(["pull", "push"]), default="pull",
              show_default=True, help="Reduce-scatter of fused collectives: NVLink peer loads "
              "(pull) or peer stores into the owners' staging buffers (push).")
@click.option("--codegen", "codegen", multiple=True, metavar="NAME=VALUE",
              help="A codegen option (workbench.options.CodegenOptions: row_min_blocks, "
                   "row_prefetch, overlap_blocks, collective_blocks_per_sm, vec_bytes, cache, "
                   "...), over the environment's WB_* knobs; repeatable.")
@click.option("--per-step", is_flag=True,
              help="Also time each step (kernel, NCCL call, GEMM, overlap) of every schedule, "
                   "with CUDA events between steps; written to NAME.steps.csv.")
@click.option("--link-rate", "link_rate_arg", default=None, metavar="GBPS|FILE",
              help="The link rate x_floor divides by: GB/s per GPU per direction, or the JSON "
                   "of benchmarks/gpu/link_probe_peers.py at the same P (default: NV18's "
                   "nominal 478 GB/s).")
@click.option("--graph", is_flag=True,
              help="Also time every schedule captured once in a CUDA graph and replayed (what "
                   "an engine runs at small sizes): rows 'SCHEDULE (cuda graph)', checked.")
def compile_and_measure(program_files, plans, P, sets, schedule, reps, warmup, no_baselines,
                        out_dir, hang_s, quiet, name, unroll, mode, codegen, per_step, graph,
                        limit_s, link_rate_arg):
    """Compile every schedule of the programs to CUDA, run it on P GPUs, check it against the
    reference interpreter, time it, and print a table with the baselines.

    Each schedule is lowered once, here or by `workbench compile` (--plan DIR runs its
    folder); the ranks run its plan as written."""
    if P < 1:
        raise WorkbenchError(f"--gpus must be at least 1, got {P}")
    if not program_files and not plans:
        raise WorkbenchError("compile-and-measure must be given a program file or a --plan "
                             "folder, got neither; e.g. compile-and-measure studies/adam.py "
                             "--gpus 2, or --plan build/adam after workbench compile")
    check_output_dir(out_dir, "--out")
    link = link_rate(link_rate_arg, P)
    sweep = job_sizes(program_files, sets, plans)
    echo = None if quiet else (lambda r, line: click.echo(line, err=True))
    if unroll not in (1, 2, 4):
        raise WorkbenchError(f"--unroll must be 1, 2 or 4, got {unroll}")
    # The environment's knobs are read here, once; the workers get the options in the job.
    options = CodegenOptions.from_env(unroll=unroll, collective_mode=mode).with_settings(codegen)
    if name is not None:  # the stem of files written into --out: never a path of its own
        check_name(name, "--name", "pass a plain stem, e.g. --name adam-h200")
    stem = name or job_stem([*program_files, *(_plan_spec(f) for f in plans)], P)
    out = Path(out_dir)
    # Rank 0 rewrites its records as it goes beside the final results, so a run cut off from
    # outside leaves them where the user looks.
    partial = out / f"{stem}.partial.json"
    with output_lock(out, "--out"):  # a second run into --out would delete this one's partial
        try:
            results = run_job(list(program_files), P, sweep, schedule, reps, warmup,
                              not no_baselines, hang_s, echo, options,
                              partial=partial, per_step=per_step, graph=graph,
                              limit_s=limit_s, plans=plans)
        except KeyboardInterrupt:
            click.echo(f"interrupted: the records measured so far are in {partial} (workbench "
                       f"sweep measured {partial} reads them)", err=True)
            raise
        command = ("workbench compile-and-measure "
                   + " ".join(shlex.quote(a) for a in sys.argv[2:]))
        results["meta"].update(_versions(), command=command,
                               date=datetime.datetime.now(datetime.UTC).isoformat(),
                               link={"GBps": link.Bps / 1e9, "source": link.source})
        df = table(results["records"], link)
        if not df.empty:  # the CSV names how its rows were made too (the JSON's meta has all)
            df["commit"] = results["meta"].get("commit", "unknown")
            df["codegen"] = options_text(options)
        write_csv(df, out / f"{stem}.csv", out)
        write_atomic(out / f"{stem}.json", json.dumps(results, indent=1, default=str), out)
        write_atomic(out / f"{stem}.command.txt", command + "\n", out)
        if per_step:
            steps = steps_table(results["records"])
            write_csv(steps, out / f"{stem}.steps.csv", out)
    click.echo(format_table(df))
    click.echo(f"x_floor: the communicated bytes at the link rate, {link.source}")
    written = ".csv, .json, .command.txt"
    if per_step:
        click.echo(steps.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        written += ", .steps.csv"
    click.echo(f"wrote {out / stem}{written}")
    unchecked = df[(df.kind == "workbench") & df.check.str.startswith("REFERENCE NOT FINITE")]
    if len(unchecked):  # no oracle: the kernels were not checked (interpreter.first_nonfinite)
        first = unchecked.iloc[0]
        raise RuntimeFault(f"the reference interpreter must stay finite to check the kernels, "
                           f"got {first.spec} {first.sizes}: {first.check[22:]}")
    bad = df[(df.kind == "workbench") & df.check.str.startswith("MISMATCH")]
    if len(bad):
        worst = bad.iloc[0]
        raise RuntimeFault(f"every schedule must match the reference interpreter, got "
                           f"{len(bad)} mismatch(es), first: {worst.spec} {worst.sizes} "
                           f"{worst.schedule}: {worst.check}")


@click.command("calibrate")
@click.option("--gpus", "P", type=int, required=True, help="Ranks, one per GPU.")
@click.option("--out", "out_path", default="profile.json", show_default=True,
              help="The hardware profile to write; raw measurements go beside it "
                   "(PROFILE.raw.json, .nccl.csv, .fused.csv) with the fit errors (.fit.txt).")
@click.option("--base", default="h200x4", show_default=True,
              help="Preset whose unmeasured fields (NVLink, NIC, channels) the profile keeps.")
@click.option("--from-raw", "raw_in", default=None,
              help="Fit a raw file measured earlier instead of measuring (no GPU needed).")
@click.option("--hang-timeout", "hang_s", default=120.0, show_default=True, type=HANG_S,
              help="Seconds without progress from a rank before the run is ended.")
@click.option("--passes", default=3, show_default=True,
              help="Whole sweeps of the NCCL collectives and send/recv, one after another; "
                   "each point is the median over them (one sweep's latency-bound points "
                   "moved 20-25 % between runs on 2x H200).")
@click.option("--step-table", "step_dtype", type=click.Choice(["bf16", "f16", "f32"]),
              default=None, help="Measure only the GEMM and attention efficiency table of "
              "GPU 0 in this dtype (torch.matmul, scaled_dot_product_attention) and write a "
              "profile of --base carrying it, for simulate-step (decision 105).")
def calibrate(P, out_path, base, raw_in, hang_s, passes, step_dtype):
    """Run microbenchmarks only (NCCL collectives, HBM, launch gap, GEMM, the fused peer
    load/store kernel) on P GPUs and write a hardware profile for `simulate --hardware`."""
    if P < 1:
        raise WorkbenchError(f"--gpus must be at least 1, got {P}")
    if step_dtype is not None:
        step_table_profile(out_path, base, step_dtype)
        return
    if passes < 1:
        raise WorkbenchError(f"--passes must be at least 1, got {passes}")
    out = Path(out_path)
    check_output_file(out, "--out")
    if out.suffix.lower() != ".json":
        raise WorkbenchError(f"--out must name a .json profile, got {out_path}; e.g. "
                             "--out profile.json")
    stem = out.with_suffix("")
    raw_path = stem.with_name(stem.name + ".raw.json")
    if raw_in is None:
        measure(P, raw_path, echo=lambda r, line: click.echo(line, err=True), hang_s=hang_s,
                passes=passes)
    else:
        raw_path = Path(raw_in)
    raw = calibration.read_raw(raw_path, P)
    written = write_csvs(raw, stem) if raw_in is None else []
    cal = calibration.fit(raw, base)
    written += calibration.write(cal, out)
    click.echo(calibration.fit_report(cal), nl=False)
    click.echo(json.dumps(cal.profile, indent=1))
    click.echo("wrote " + ", ".join(str(p) for p in [*written, raw_path]))


def step_table_profile(out_path: str, base: str, dtype: str) -> None:
    """`calibrate --step-table`: time the efficiency table's grids on GPU 0 and write
    {"base": BASE, "gpu": {"efficiency_table": {...}}}, checked by loading it back."""
    from cost_model.efficiency import table_from_rates
    from cost_model.profiles import load_hardware, load_profile
    from workbench.runtime.calibrate_step import measure_rates

    out = Path(out_path)
    check_output_file(out, "--out")
    if out.suffix.lower() != ".json":
        raise WorkbenchError(f"--out must name a .json profile, got {out_path}; e.g. "
                             "--out profile.json")
    gpu = load_hardware(base).gpu
    rates = measure_rates(dtype, echo=lambda line: click.echo(line, err=True))
    table = table_from_rates(rates, dict(gpu.peak_flops))
    write_atomic(out, json.dumps({"base": base, "gpu": {"efficiency_table": table}}, indent=1)
                 + "\n")
    load_profile(out)
    click.echo(f"wrote {out} ({len(table)} shapes)")
