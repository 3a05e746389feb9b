"""`workbench report RESULTS_DIR`: rebuild the report of a study sweep from its results alone.

Reads `predicted.csv` (from the simulator) and `measured.csv` (from compile-and-measure) in
RESULTS_DIR, either of which may be absent, and writes `report.md` (pandas tables: speedups
over the unscheduled program, predicted vs measured, the comparator's summary) and one figure
per study (`<study>.png` and `.pdf`) with predicted and measured times side by side; with a
`steps.csv` (`workbench sweep steps ... --out RESULTS_DIR/steps.csv`) also the
per-step table and the steps the cost model misses. No GPU.
"""

from __future__ import annotations

from pathlib import Path

import click
import pandas as pd

from workbench.errors import ProgramFileError

BASELINE = "unscheduled"
AR_OPT = "ar-opt"  # CoCoNet's baseline of the optimizer studies (studies/optimizer_schedules.py)


def _read(path: Path, value: str) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise ProgramFileError(f"results file {path} must be a CSV table, got {e}") from None
    from workbench.cli.compare import KEYS, _require

    _require(df, KEYS + [value], str(path))
    return df


def speedups(df: pd.DataFrame, value: str, baseline: str = BASELINE) -> pd.DataFrame:
    """Wide table: one row per (study, size, gpus), one column per schedule, values are the
    speedup over the `baseline` schedule (the unscheduled program by default; `ar-opt`,
    CoCoNet's baseline, for the optimizer studies): time_baseline / time."""
    base = df[df["schedule"] == baseline].set_index(["study", "size", "gpus"])[value]
    out = df.join(base.rename("base"), on=["study", "size", "gpus"])
    out["speedup"] = out["base"] / out[value]
    return out.pivot_table(index=["study", "size", "gpus"], columns="schedule",
                           values="speedup").round(2)


def against_fastest_baseline(measured: pd.DataFrame) -> pd.DataFrame:
    """The headline of each measured case (design note 54): the fastest schedule, the
    fastest baseline measured beside it (NCCL + torch fused kernels, a torch.compile'd step,
    PyTorch's fused communication ops) and the speedup over that baseline."""
    ok = measured[measured["measured_s"].notna() & measured["fastest_baseline_s"].notna()]
    rows = []
    for (study, size, gpus), g in ok.groupby(["study", "size", "gpus"], sort=True):
        best = g.loc[g["measured_s"].idxmin()]
        rows.append({"study": study, "size": size, "gpus": gpus, "schedule": best["schedule"],
                     "ms": round(best["measured_s"] * 1e3, 3),
                     "fastest baseline": best["fastest_baseline"],
                     "baseline ms": round(best["fastest_baseline_s"] * 1e3, 3),
                     "speedup": round(best["fastest_baseline_s"] / best["measured_s"], 2)})
    return pd.DataFrame(rows)


def _figure(study: str, predicted, measured, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for df, value, style, label in ((predicted, "predicted_s", "--", "predicted"),
                                    (measured, "measured_s", "-", "measured")):
        if df is None:
            continue
        sub = df[df["study"] == study]
        for k, (schedule, g) in enumerate(sub.groupby("schedule", sort=True)):
            g = g.sort_values("size")
            ax.plot(g["size"], g[value] * 1e3, style, marker="o", color=f"C{k}",
                    label=f"{schedule} ({label})")
    ax.set_yscale("log")
    ax.set_xlabel("size")
    ax.set_ylabel("time per step (ms)")
    ax.set_title(study)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths = [out_dir / f"{study}.png", out_dir / f"{study}.pdf"]
    for p in paths:
        # No creation date in the PDF: regenerating a report from the same CSVs gives the same
        # files, so git shows only real changes.
        fig.savefig(p, metadata={"CreationDate": None} if p.suffix == ".pdf" else None)
    plt.close(fig)
    return paths


def build_report(results_dir: Path) -> str:
    """Write report.md and the figures into results_dir; return the markdown."""
    from workbench.cli.compare import compare, per_case, summarize

    predicted = _read(results_dir / "predicted.csv", "predicted_s")
    measured = _read(results_dir / "measured.csv", "measured_s")
    if predicted is None and measured is None:
        raise ProgramFileError(f"results directory must hold predicted.csv or measured.csv, got "
                               f"neither in {results_dir}; run a study sweep first")
    parts = [f"# Report for {results_dir.name}", ""]
    for df, value, title in ((predicted, "predicted_s", "Predicted"),
                             (measured, "measured_s", "Measured")):
        if df is None:
            continue
        parts += [f"## {title} speedup over the unscheduled program", ""]
        for study, g in df.groupby("study", sort=True):
            table = speedups(g, value).droplevel("study")
            parts += [f"### {study}", "", table.to_markdown(), ""]
        with_ar_opt = df[df["study"].isin(df.loc[df["schedule"] == AR_OPT, "study"])]
        if len(with_ar_opt):
            parts += [f"## {title} speedup over ar-opt (NCCL AllReduce + one fused update "
                      "kernel, CoCoNet's baseline)", ""]
            for study, g in with_ar_opt.groupby("study", sort=True):
                table = speedups(g, value, AR_OPT).droplevel("study")
                parts += [f"### {study}", "", table.to_markdown(), ""]
    if measured is not None and "fastest_baseline_s" in measured.columns:
        parts += ["## Measured speedup over the fastest baseline", "",
                  against_fastest_baseline(measured).to_markdown(index=False), ""]
    if predicted is not None and measured is not None:
        joined = compare(predicted, measured)
        parts += ["## Predicted vs measured", "",
                  joined.assign(predicted_ms=joined["predicted_s"] * 1e3,
                                measured_ms=joined["measured_s"] * 1e3)[
                      ["study", "schedule", "size", "gpus", "predicted_ms", "measured_ms",
                       "signed_error"]].round(4).to_markdown(index=False), "",
                  "## Does the simulator pick the measured-best schedule?", "",
                  per_case(joined).to_markdown(index=False), "",
                  "## Summary", "", summarize(joined).round(3).to_markdown(index=False), ""]
    steps_csv = results_dir / "steps.csv"
    if steps_csv.is_file():
        parts += _steps_section(pd.read_csv(steps_csv))
    studies = sorted(set().union(*[set(df["study"]) for df in (predicted, measured)
                                   if df is not None]))
    for study in studies:
        for p in _figure(study, predicted, measured, results_dir):
            if p.suffix == ".png":
                parts += [f"![{study}]({p.name})", ""]
    text = "\n".join(parts)
    (results_dir / "report.md").write_text(text)
    return text


# A step whose predicted time is off by more than this is listed under the per-step table.
STEP_MISS = 0.15


def _steps_section(steps: pd.DataFrame) -> list[str]:
    """Markdown of steps.csv (`workbench sweep steps ... --out DIR/steps.csv`): each
    measured step beside the cost model's time of its statement, and the steps it misses."""
    cols = ["study", "schedule", "size", "stage", "stmts", "measured_ms", "predicted_gpu_ms",
            "error"]
    missing = [c for c in cols if c not in steps.columns]
    if missing:
        raise ProgramFileError(f"steps.csv must have the columns of workbench sweep "
                               f"steps, got one without {', '.join(missing)}; write it with "
                               f"workbench sweep steps RESULT.json --out DIR/steps.csv")
    misses = steps[steps["error"].abs() > STEP_MISS]
    lines = ["## Per step: measured vs the cost model", "",
             steps[cols].round(4).to_markdown(index=False), "",
             f"Steps off by more than {STEP_MISS:.0%}: {len(misses)} of {len(steps)}"]
    lines += [f"- {r.study} {r.schedule} {r.size} `{r.stmts}`: {r.error:+.1%}"
              for r in misses.itertuples()]
    return lines + [""]


@click.command()
@click.argument("results_dir", type=click.Path(path_type=Path))
def report(results_dir: Path) -> None:
    """Regenerate report.md and figures from a results directory (no GPU needed)."""
    if not results_dir.is_dir():
        raise ProgramFileError(f"results directory must exist, got no directory at "
                               f"{results_dir}")
    click.echo(build_report(results_dir))
    click.echo(f"\nwrote {results_dir / 'report.md'} and figures")
