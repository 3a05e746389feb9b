"""`workbench report RESULTS_DIR`: rebuild the report of a study sweep from its results alone.

Reads `predicted.csv` (from the simulator) and `measured.csv` (from compile-and-measure) in
RESULTS_DIR, either of which may be absent, and writes `report.md` (pandas tables: speedups
over the unscheduled program, predicted vs measured, the comparator's summary) and one figure
per study (`<study>.png` and `.pdf`) with predicted and measured times side by side; with a
`steps.csv` (`workbench sweep steps ... --out RESULTS_DIR/steps.csv`) also the
per-step table and the steps the cost model misses. No GPU.
"""

from __future__ import annotations

import os
from pathlib import Path

import click
import pandas as pd

from studies.sweep import size_values
from workbench.cli.compare import sort_rows
from workbench.cli.outputs import confined, output_lock, progress, save_figure, write_atomic
from workbench.cli.results_files import read_results_csv
from workbench.errors import ProgramFileError

BASELINE = "unscheduled"
AR_OPT = "ar-opt"  # CoCoNet's baseline of the optimizer studies (studies/optimizer_schedules.py)


def _read(path: Path, value: str) -> pd.DataFrame | None:
    """The results table at `path`, or None where there is none; anything at that name
    that is not a regular file (a link, a FIFO) is refused by the reader, not skipped."""
    if not os.path.lexists(path):
        return None
    from workbench.cli.compare import KEYS

    return read_results_csv(path, KEYS + [value], value)


def speedups(df: pd.DataFrame, value: str, baseline: str = BASELINE) -> pd.DataFrame:
    """Wide table: one row per (study, size, gpus) in the order of the sizes' numbers, the
    size and GPU count as columns, then one column per schedule (the baseline first), values
    are the speedup over the `baseline` schedule (the unscheduled program by default; `ar-opt`,
    CoCoNet's baseline, for the optimizer studies): time_baseline / time."""
    base = df[df["schedule"] == baseline].set_index(["study", "size", "gpus"])[value]
    out = df.join(base.rename("base"), on=["study", "size", "gpus"])
    out["speedup"] = out["base"] / out[value]
    wide = out.pivot_table(index=["study", "size", "gpus"], columns="schedule",
                           values="speedup").round(2)
    wide = wide[sorted(wide.columns, key=lambda c: (c != baseline, c))]
    wide.columns.name = None
    return sort_rows(wide.reset_index(), ["study", "size", "gpus"])


def _speedup_table(table: pd.DataFrame, baseline: str) -> str:
    """The speedup table as markdown, or the sentence saying why there is none: a speedup
    needs the baseline's time at the same size (an empty table was written without a word)."""
    speeds = table.drop(columns=["size", "gpus"])
    if speeds.empty or speeds.isna().all().all():
        return (f"No speedups: no row of the {baseline} schedule with a time at the sizes "
                "measured; its time is what a speedup divides.")
    return table.to_markdown(index=False)


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
    return sort_rows(pd.DataFrame(rows), ["study", "size", "gpus"]) if rows else pd.DataFrame()


# How a series says where its times come from, beyond its colour (the schedule's): the
# measured ones are solid lines through filled circles, the predicted ones dashed lines through
# hollow squares, and the legend names both.
KIND_STYLE = {"measured": {"linestyle": "-", "marker": "o"},
              "predicted": {"linestyle": "--", "marker": "s", "markerfacecolor": "none"}}


def figure_layout(labels) -> tuple[str, list[dict]]:
    """For a study's size labels: the size on the x axis (the one with the most values) and
    one panel per combination of the other sizes that vary, in the order of their numbers
    ('H=4096,T=...' -> x 'T', a panel for each H)."""
    values = [size_values(label) for label in labels]
    names = sorted({k for v in values for k in v})
    distinct = {k: sorted({v[k] for v in values if k in v}) for k in names}
    x = max(names, key=lambda k: (len(distinct[k]), k == "T" or k == "N"))
    others = [k for k in names if k != x and len(distinct[k]) > 1]
    panels = sorted({tuple((k, v[k]) for k in others) for v in values})
    return x, [dict(p) for p in panels]


def _plain_log_formatter(matplotlib):
    """matplotlib's LogFormatter (it picks which minor ticks to label) writing 0.4, not 4e-01."""
    class Plain(matplotlib.ticker.LogFormatter):
        def _num_to_string(self, x, vmin, vmax):
            return f"{x:g}"

    return Plain


def _tick(v: int) -> str:
    return f"$2^{{{v.bit_length() - 1}}}$" if v >= 2**16 and v & (v - 1) == 0 else str(v)


def figure(study: str, predicted, measured):
    """The study's matplotlib Figure: time per step against the size on a log axis, one panel
    per value of the other sizes, one colour per schedule, predicted and measured told apart
    by line, marker and legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    frames = [sub.assign(kind=kind, time_s=sub[value])
              for df, value, kind in ((predicted, "predicted_s", "predicted"),
                                      (measured, "measured_s", "measured")) if df is not None
              for sub in [df[df["study"] == study]] if len(sub)]
    data = pd.concat(frames, ignore_index=True)
    data = data[data["time_s"].notna()]
    x, panels = figure_layout(data["size"].unique())
    sizes = pd.DataFrame(list(data["size"].map(size_values)), index=data.index)
    schedules = sorted(data["schedule"].unique(), key=lambda s: (s != BASELINE, s))
    colour = {s: f"C{i % 10}" for i, s in enumerate(schedules)}
    fig, axes = plt.subplots(1, len(panels), figsize=(max(6.4, 4.2 * len(panels)), 4.6),
                             squeeze=False, sharey=True, layout="constrained")
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    for ax, panel in zip(axes[0], panels):
        here = data[(sizes[list(panel)] == pd.Series(panel)).all(axis=1)] if panel else data
        for (kind, schedule), g in here.groupby(["kind", "schedule"], sort=True):
            xs = sizes.loc[g.index, x]
            order = xs.sort_values().index
            ax.plot(xs[order], g.loc[order, "time_s"] * 1e3, color=colour[schedule],
                    **KIND_STYLE[kind])
        ticks = sorted(sizes.loc[here.index, x].unique())
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ticks, [_tick(int(t)) for t in ticks])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        # plain numbers (0.1, 2), not 10^-1; the minor ticks labelled (as plainly) only where
        # the range spans about a decade or less
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(_plain_log_formatter(matplotlib)(minor_thresholds=(1, 0.4)))
        ax.set_xlabel(x)
        ax.set_title(", ".join(f"{k}={v}" for k, v in panel.items()) if panel else study)
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("time per step (ms)")
    handles = [Line2D([], [], color=colour[s], linewidth=2.5, label=s) for s in schedules]
    handles += [Line2D([], [], color="0.3", label=kind, **KIND_STYLE[kind])
                for kind in KIND_STYLE if kind in set(data["kind"])]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(4, len(handles)),
               fontsize=8, frameon=False)
    if panels and panels[0]:
        fig.suptitle(study)
    return fig


def _figure(study: str, predicted, measured, out_dir: Path) -> list[Path]:
    """Draw the study's figure (see `figure`) into `<study>.png` and `.pdf`."""
    import matplotlib.pyplot as plt

    fig = figure(study, predicted, measured)
    # The study's name comes from the CSV: confined to out_dir, never ../x or /abs/x.
    paths = [confined(out_dir, study, ".png"), confined(out_dir, study, ".pdf")]
    for p in paths:
        # No creation date in the PDF: regenerating a report from the same CSVs gives the same
        # files, so git shows only real changes.
        save_figure(fig, p, out_dir, dpi=120,
                    metadata={"CreationDate": None} if p.suffix == ".pdf" else None)
    plt.close(fig)
    return paths


def _has_times(study, predicted, measured) -> bool:
    """Whether `study` has a row with a time to plot (measured rows may all be empty: a run
    whose every schedule failed its check)."""
    return any(df is not None and df.loc[df["study"] == study, value].notna().any()
               for df, value in ((predicted, "predicted_s"), (measured, "measured_s")))


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
            table = speedups(g, value).drop(columns="study")
            parts += [f"### {study}", "", _speedup_table(table, BASELINE), ""]
        with_ar_opt = df[df["study"].isin(df.loc[df["schedule"] == AR_OPT, "study"])]
        if len(with_ar_opt):
            parts += [f"## {title} speedup over ar-opt (NCCL AllReduce + one fused update "
                      "kernel, CoCoNet's baseline)", ""]
            for study, g in with_ar_opt.groupby("study", sort=True):
                table = speedups(g, value, AR_OPT).drop(columns="study")
                parts += [f"### {study}", "", _speedup_table(table, AR_OPT), ""]
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
    if os.path.lexists(steps_csv):
        parts += _steps_section(read_results_csv(steps_csv, []))
    studies = sorted(set().union(*[set(df["study"]) for df in (predicted, measured)
                                   if df is not None]))
    plotted = [s for s in studies if _has_times(s, predicted, measured)]
    for study in sorted(set(studies) - set(plotted), key=str):  # nothing to draw: said so
        parts += [f"No figure for {' '.join(str(study).split())}: no row with a time.", ""]
    for study in progress(plotted, "report: drawing", str):
        for p in _figure(study, predicted, measured, results_dir):
            if p.suffix == ".png":
                # the name is data: one line, no markdown of its own
                alt = " ".join(str(study).split()).replace("[", "(").replace("]", ")")
                parts += [f"![{alt}]({p.name})", ""]
    text = "\n".join(parts)
    write_atomic(results_dir / "report.md", text, results_dir)
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
    with output_lock(results_dir, "RESULTS_DIR"):  # a sweep writing there meanwhile: refused
        text = build_report(results_dir)
    figures = [line[line.index("(") + 1:-1] for line in text.splitlines()
               if line.startswith("![")]
    click.echo(f"wrote {results_dir / 'report.md'} ({len(text.splitlines())} lines) and "
               f"{len(figures)} figure{'s' * (len(figures) != 1)} (.png and .pdf): "
               f"{', '.join(figures) or 'none'}")
