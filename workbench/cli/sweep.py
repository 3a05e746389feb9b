"""`workbench sweep`: the CoCoNet experiments (studies/sweep.py) over every study, schedule and
size, predicted and measured.

    workbench sweep predict --hardware h200x4 --out records/h200x4
    workbench sweep measured RESULT.csv [...] --out records/h200x4
    workbench sweep steps RESULT.json --hardware PROFILE   # per step (--per-step runs)
    workbench report records/h200x4

`predict` simulates every schedule of every study over the sizes of CoCoNet's figures and
writes predicted.csv. `measured` folds the CSVs written by `workbench compile-and-measure` into
measured.csv (same keys). `workbench report` then compares them and draws the figures.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import click
import numpy as np
import pandas as pd
from click.core import ParameterSource

from codegen.lower import lower
from cost_model.hardware import load_hardware
from cost_model.plan_cost import plan_cost
from studies.sweep import STUDIES_DIR, SWEEPS, size_label
from workbench.cli.outputs import (
    check_output_file,
    output_lock,
    progress,
    write_csv,
)
from workbench.cli.results_files import (
    ResultsFileError,
    checked_measure_record,
    checked_step_record,
    program_for,
)
from workbench.cli.results_table import table
from workbench.cli.simulate import predict
from workbench.errors import WorkbenchError
from workbench.files import read_bounded
from workbench.interpreter import bind_sizes
from workbench.loader import load
from workbench.schemas import RESULTS_JSON, check


def predict_rows(hardware: str, nodes: int = 1, studies: list[str] | None = None,
                 gpus: int | None = None):
    """One row per (study, schedule, size): the simulator's prediction. `gpus` is the number
    of GPUs the run uses, as `compile-and-measure --gpus` (default: the cluster's); a
    program's groups (a pipeline's stages) share them evenly, so each group has P = gpus /
    groups ranks, the `P` a measured CSV records."""

    cluster = load_hardware(hardware, nodes)
    loaded, share = {}, {}
    for study in studies or list(SWEEPS):
        loaded[study] = load(str(STUDIES_DIR / SWEEPS[study][0]))
        groups = len(loaded[study].program.groups())  # a pipeline's stages share the GPUs
        used = gpus or cluster.world_size
        if used % groups:
            raise click.UsageError(
                f"--gpus {used}: study {study!r} has {groups} stages and needs a multiple of "
                f"{groups} GPUs; pass --gpus {groups * max(1, used // groups)} or leave it out")
        share[study] = used // groups
    cases = [(study, sizes) for study in loaded for sizes in SWEEPS[study][1]]
    rows = []
    for study, sizes in progress(cases, f"sweep predict on {cluster.name}:",
                                 lambda case: f"{case[0]} {size_label(case[1])}"):
        P = share[study]
        for p in predict(loaded[study], cluster, {**sizes, "P": P}):
            if not p.ok:  # predict said why on stderr; a row needs a time
                continue
            if not (math.isfinite(p.time_s) and p.time_s > 0):
                raise WorkbenchError(
                    f"the predicted time of {study} {p.name} {size_label(sizes)} must be a "
                    f"finite time > 0, got {p.time_s!r}; check the hardware profile "
                    f"{hardware} (workbench simulate names what it prices)")
            rows.append({"study": study, "schedule": p.name, "size": size_label(sizes),
                         "gpus": P, "predicted_s": p.time_s,
                         "model_s": p.model_s, "lower_bound_s": p.lower_bound_s,
                         "bottleneck": p.bottleneck})
    return pd.DataFrame(rows)


def _study_of(spec: str) -> str:
    """'studies/adam.py:mixed' -> 'adam-mixed' (the sweep's study labels)."""
    path, _, attr = spec.partition(":")
    return Path(path).stem + (f"-{attr}" if attr and attr != "program" else "")


def _parse_sizes(text: str) -> dict:
    """'N=16777216', 'H=12288,T=8192' or 'T=8192 H=12288' -> dict of ints."""
    items = str(text).replace(",", " ").split()
    return {k: int(v) for k, v in (item.split("=") for item in items)}


def _records(path: Path) -> list[dict]:
    """The records of a compile-and-measure JSON (NAME.json, or NAME.partial.json that a run
    cut off left behind)."""
    raw = read_bounded(path, "results file", "pass the CSV or JSON compile-and-measure wrote",
                       follow=True)
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise click.UsageError(f"{path} must be compile-and-measure's JSON (an object with "
                               f"'records'), got {type(e).__name__}; pass its CSV or the "
                               f"run's NAME.json / NAME.partial.json") from None
    check(document, RESULTS_JSON, str(path), "pass its CSV or the run's NAME.json / "
          "NAME.partial.json", error=click.UsageError)
    return document["records"]


def _read_results(path: Path) -> pd.DataFrame:
    """A compile-and-measure CSV, or its JSON (see _records) as the same table."""
    if path.suffix != ".json":
        raw = read_bounded(path, "results file", "pass the CSV compile-and-measure wrote",
                           follow=True)
        return pd.read_csv(io.BytesIO(raw))  # a ValueError: measured_rows names the file
    records = _records(path)
    for i, r in enumerate(records):
        checked_measure_record(path, i, r)
    return table(records)


def measured_rows(csv_paths: list[Path]) -> pd.DataFrame:
    """Fold compile-and-measure CSVs (or their JSON, partial ones included) into (study,
    schedule, size, gpus, measured_s, check);
    only the workbench's own schedules (baselines are kept in the source CSVs). A case
    measured in several CSVs keeps the row of the last CSV given (list re-runs last)."""
    frames = []
    for path in csv_paths:
        try:
            frames.append(_measured_frame(Path(path)))
        except (KeyError, ValueError, TypeError, AttributeError, NotImplementedError) as e:
            # a field of the wrong type or a missing column, wherever pandas meets it
            raise ResultsFileError(
                f"{path} must be a results table of workbench compile-and-measure (CSV or "
                f"JSON), got {type(e).__name__}: {str(e)[:120]}; pass the files the run "
                "wrote") from None
    rows = pd.concat(frames, ignore_index=True)
    bad = rows["check"].astype(str).str.startswith("ok") & ~(
        np.isfinite(pd.to_numeric(rows["measured_s"], errors="coerce"))
        & (pd.to_numeric(rows["measured_s"], errors="coerce") > 0))
    if bad.any():
        r = rows[bad].iloc[0]
        raise ResultsFileError(f"a measured row whose check is ok must have a finite time > 0, "
                               f"got {r['study']} {r['schedule']} ({r['size'] or 'no sizes'}) "
                               f"with {r['measured_s']}; pass the files the run wrote")
    try:
        return rows.drop_duplicates(["study", "schedule", "size", "gpus"], keep="last",
                                    ignore_index=True)
    except TypeError as e:  # a list or a mapping where a name or a number goes
        raise ResultsFileError(f"every key of a measured row must be a name or a number, got "
                               f"{e}; pass the files the run wrote") from None


def _measured_frame(path: Path) -> pd.DataFrame:
    """One results file as (study, schedule, size, gpus, measured_s, check[, fastest
    baseline]) rows; only the workbench's own schedules."""
    df = _read_results(path)
    if "median_ms" in df.columns:  # a table parsed from a cut-off run's worker log
        return pd.DataFrame({
            "study": df["program"].map(_study_of),
            "schedule": df["schedule"],
            "size": df["N"].map(lambda n: size_label({"N": int(n)})),
            "gpus": df["rank_medians_ms"].str.split().str.len(),
            "measured_s": df["median_ms"] / 1e3,
            "check": df["check"],
        })
    df = df[df["kind"] == "workbench"]
    frame = pd.DataFrame({
        "study": df["spec"].map(_study_of),
        "schedule": df["schedule"],
        "size": df["sizes"].map(lambda t: size_label(_parse_sizes(t))),
        "gpus": df["P"].astype(int),
        "measured_s": df["time_ms"] / 1e3,
        "check": df["check"],
    })
    if "fastest_baseline_ms" in df.columns:  # results since design note 54
        frame["fastest_baseline"] = df["fastest_baseline"]
        frame["fastest_baseline_s"] = df["fastest_baseline_ms"] / 1e3
    return frame


def step_rows(result_paths: list[Path], hardware: str, nodes: int = 1,
              programs: list[str] = ()) -> pd.DataFrame:
    """Per-step measured times (compile-and-measure --per-step: the records' "steps") beside
    the cost model's time of the top-level statement each step runs (its plan steps' prices:
    the schedule lowered as the run lowered it), where a step runs one
    whole statement (a statement that lowers to several steps, e.g. LAMB's fused kernel
    with its norm combine, has no prediction per step; consecutive steps labelled with one
    statement, a norm's partial sums and their combine, are one row:
    merge_statement_steps). predicted_gpu_ms leaves out the host's issue cost of an NCCL
    call, which a host ahead of the GPU hides in a sequence.

    A record names its program file (`spec`) but never decides what runs: the file loaded
    is one of `programs` (the user's --program) or a study shipped with the workbench, and
    its sha256 must be the one the record carries (results_files.program_for)."""

    cluster = load_hardware(hardware, nodes)
    rows = []
    loaded_by_file: dict[str, object] = {}
    for path in result_paths:
        for i, r in enumerate(_records(path)):
            if not isinstance(r, dict) or r.get("kind") != "workbench" or not r.get("steps"):
                continue
            checked_step_record(path, i, r)
            spec = program_for(path, i, r, programs, STUDIES_DIR)
            if spec not in loaded_by_file:
                loaded_by_file[spec] = load(spec)
            loaded = loaded_by_file[spec]
            name = r["schedule"]
            if name != "unscheduled" and name not in loaded.schedules:
                raise click.UsageError(
                    f"{path}: schedule {name!r} must be one of {r['spec']}'s, got none of that "
                    f"name (known: {', '.join(sorted(loaded.schedules))}); compare with the "
                    "program file the run measured")
            program = (loaded.program if name == "unscheduled"
                       else loaded.schedules[name].apply())
            # the plan the run measured, lowered once, priced step by step (decision 104)
            bound = bind_sizes(program, r["sizes"])
            plan = lower(program, int(r["sizes"].get("P", cluster.world_size)))
            by_name = plan_cost(plan, cluster, bound).by_statement()
            for st in merge_statement_steps(r["steps"]):
                c = by_name.get(st["stmts"])
                t = c[0] * 1e3 if c is not None else None
                gpu = (c[0] - c[1]) * 1e3 if c is not None else None
                rows.append({"study": _study_of(r["spec"]), "schedule": r["schedule"],
                             "size": size_label(r["sizes"]), "stage": st["stage"],
                             "stmts": st["stmts"], "steps": st["steps"],
                             "measured_ms": st["median_ms"],
                             "predicted_ms": t, "predicted_gpu_ms": gpu,
                             # a step measured at 0 ms has no relative error (it was a
                             # ZeroDivisionError): its row stands, its error is empty
                             "error": (gpu / st["median_ms"] - 1)
                             if gpu and st["median_ms"] > 0 else None})
    return pd.DataFrame(rows)


def merge_statement_steps(steps: list[dict]) -> list[dict]:
    """Consecutive steps of one stage that run the same statements, as one row: their
    medians summed, `steps` counting them. A Norm over a Sliced tensor lowers to a kernel of
    partial sums and one that combines them, both labelled with the statement, and the cost
    model prices the two together (GPU run 15 had set each half beside the whole
    statement's price: 0.006 ms against 0.024)."""
    merged: list[dict] = []
    for st in steps:
        last = merged[-1] if merged else None
        if last is not None and (last["stage"], last["stmts"]) == (st["stage"], st["stmts"]):
            last["median_ms"] += st["median_ms"]
            last["steps"] += 1
        else:
            merged.append({"stage": st["stage"], "stmts": st["stmts"],
                           "median_ms": st["median_ms"], "steps": 1})
    return merged


def priced_with(hardware: str, nodes: int) -> str:
    """The sentence that names the hardware profile the cost model priced with, and, when it
    is the default preset, how to price with the machine that measured instead."""
    cluster = load_hardware(hardware, nodes)
    ctx = click.get_current_context(silent=True)
    default = ctx is not None and ctx.get_parameter_source("hardware") is ParameterSource.DEFAULT
    named = f"{cluster.name}, " if cluster.name != hardware else ""
    return (f"priced with {hardware} ({named}{cluster.world_size} GPUs)"
            + ("; the default --hardware, not a calibration: pass --hardware PROFILE.json "
               "(workbench calibrate) of the machine that measured" if default else ""))


@click.group("sweep")
def main() -> None:
    """Run the CoCoNet study sweeps: predict, fold measured results, compare per step."""


@main.command("predict")
@click.option("--hardware", default="h200x4", show_default=True,
              help="Preset or profile file (.json/.yaml, e.g. a calibration's profile.json) "
              "the simulator prices with, as simulate --hardware.")
@click.option("--nodes", default=1, show_default=True,
              help="Nodes of the --hardware preset, linked by its NIC.")
@click.option("--study", "studies", multiple=True, type=click.Choice(list(SWEEPS)),
              help="A study to predict (repeatable; default: every study).")
@click.option("--gpus", type=click.IntRange(1, 1_000_000), default=None,
              help="GPUs the run uses, as compile-and-measure --gpus (default: the "
                   "hardware's); each stage of a pipeline gets an equal share.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True,
              help="Folder for predicted.csv (created if missing; the file is replaced).")
def predict_cmd(hardware: str, nodes: int, studies: tuple[str, ...], gpus: int | None,
                out_dir: Path) -> None:
    """Simulate every study's schedules over its sizes; write OUT/predicted.csv."""
    # --out is held for the whole run, not only the write: a second sweep into it is refused
    # at its start instead of both exiting 0 with one's rows lost
    with output_lock(out_dir, "--out"):
        df = predict_rows(hardware, nodes, list(studies) or None, gpus)
        write_csv(df, out_dir / "predicted.csv", out_dir)
    click.echo(f"wrote {out_dir / 'predicted.csv'} ({len(df)} rows); "
               f"{priced_with(hardware, nodes)}")


@main.command("measured")
@click.argument("csv_paths", nargs=-1, type=click.Path(exists=True, path_type=Path),
                required=True)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True,
              help="Folder for measured.csv (created if missing; the file is replaced).")
def measured_cmd(csv_paths: tuple[Path, ...], out_dir: Path) -> None:
    """Fold compile-and-measure results into OUT/measured.csv."""
    with output_lock(out_dir, "--out"):  # the whole run, as predict
        df = measured_rows(list(csv_paths))
        write_csv(df, out_dir / "measured.csv", out_dir)
    click.echo(f"wrote {out_dir / 'measured.csv'} ({len(df)} rows)")


@main.command("steps")
@click.argument("json_paths", nargs=-1, type=click.Path(exists=True, path_type=Path),
                required=True)
@click.option("--hardware", default="h200x4", show_default=True,
              help="Preset or profile file (.json/.yaml, e.g. a calibration's profile.json) "
              "the simulator prices with, as simulate --hardware.")
@click.option("--nodes", default=1, show_default=True,
              help="Nodes of the --hardware preset, linked by its NIC.")
@click.option("--out", "out_csv", type=click.Path(path_type=Path), default=None,
              help="Also write the table as CSV (e.g. RESULTS_DIR/steps.csv for report).")
@click.option("--program", "programs", multiple=True, metavar="PROGRAM.py",
              help="The program file the results measured (repeatable). A program file is "
                   "Python and runs when loaded, so the results never choose it: a record's "
                   "program must be given here (or be a study shipped with the workbench) "
                   "and have the content the record's sha256 names.")
def steps_cmd(json_paths: tuple[Path, ...], hardware: str, nodes: int,
              out_csv: Path | None, programs: tuple[str, ...]) -> None:
    """Per-step measured (compile-and-measure --per-step JSON) against predicted times."""
    check_output_file(out_csv, "--out")
    df = step_rows(list(json_paths), hardware, nodes, list(programs))
    if df.empty:
        raise click.UsageError("the results must hold per-step times, got none; measure with "
                               "workbench compile-and-measure --per-step")
    click.echo(priced_with(hardware, nodes))
    click.echo(df.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if out_csv is not None:
        write_csv(df, out_csv)
        click.echo(f"wrote {out_csv} ({len(df)} rows)")


if __name__ == "__main__":
    main()
