"""The comparator: reconcile predicted (simulator) and measured (GPU) times.

Both sides are tables with one row per (study, schedule, size, gpus):

    predicted: study, schedule, size, gpus, predicted_s   [, bottleneck]
    measured:  study, schedule, size, gpus, measured_s    [, check]

`size` is a label of the sizes (e.g. "N=2^28"); `gpus` the group size. `compare` joins them and
adds the error columns; `summarize` gives, per study: median and max |error|, whether the
simulator picks the measured-best schedule at each size, Kendall's tau between the predicted
and measured orders of the schedules, and where the measured rows carry their run's fastest
baseline, the simulator's pick against it (the choice must never lose to the baseline).
"""

from __future__ import annotations

import pandas as pd

from studies.sweep import size_order
from workbench.errors import WorkbenchError

KEYS = ["study", "schedule", "size", "gpus"]


def _require(df: pd.DataFrame, columns: list[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise WorkbenchError(f"{what} table must have columns {columns}, got {list(df.columns)} "
                             f"(missing {missing})")


def compare(predicted: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Join predicted and measured rows; error = (predicted - measured) / measured."""
    _require(predicted, KEYS + ["predicted_s"], "predicted")
    _require(measured, KEYS + ["measured_s"], "measured")
    measured = valid_measurements(measured)
    joined = predicted.merge(measured, on=KEYS, how="inner", validate="one_to_one")
    joined["signed_error"] = (joined["predicted_s"] - joined["measured_s"]) / joined["measured_s"]
    joined["abs_error"] = joined["signed_error"].abs()
    return sort_rows(joined)


def sort_rows(df: pd.DataFrame, by: list[str] = KEYS) -> pd.DataFrame:
    """Rows in the order of the columns `by`, a size by its numbers (T=128 before T=2^10,
    H=4096 before H=16384), not as text."""
    return df.sort_values(by, key=lambda c: c.map(size_order) if c.name == "size" else c,
                          kind="stable").reset_index(drop=True)


def valid_measurements(measured: pd.DataFrame) -> pd.DataFrame:
    """Rows that hold a time whose output checked ok; a schedule that was not generated (no
    time) or whose output was wrong (check != ok...) has no time worth comparing."""
    ok = measured["measured_s"].notna() & (measured["measured_s"] > 0)
    if "check" in measured.columns:
        ok &= measured["check"].astype(str).str.startswith("ok")
    return measured[ok]


def _kendall_tau(group: pd.DataFrame) -> float:
    from scipy.stats import kendalltau

    if len(group) < 2:
        return float("nan")
    return float(kendalltau(group["predicted_s"], group["measured_s"]).statistic)


def per_case(joined: pd.DataFrame) -> pd.DataFrame:
    """One row per (study, size, gpus): does the simulator pick the measured-best schedule,
    how well does it order the schedules (Kendall tau), and, where the measured rows carry the
    fastest baseline of their run (`fastest_baseline_s`), how the pick's measured time
    compares with it (`pick_vs_baseline`: the baseline's time over the pick's, >= 1 where the
    choice does not lose)."""
    rows = []
    for (study, size, gpus), g in joined.groupby(["study", "size", "gpus"], sort=True):
        pick = g.loc[g["predicted_s"].idxmin()]
        measured_best = g.loc[g["measured_s"].idxmin(), "schedule"]
        row = {"study": study, "size": size, "gpus": gpus, "schedules": len(g),
               "predicted_best": pick["schedule"], "measured_best": measured_best,
               "picks_best": pick["schedule"] == measured_best,
               "kendall_tau": _kendall_tau(g)}
        if "fastest_baseline_s" in g.columns and pd.notna(pick["fastest_baseline_s"]):
            row["pick_vs_baseline"] = pick["fastest_baseline_s"] / pick["measured_s"]
        rows.append(row)
    return sort_rows(pd.DataFrame(rows), ["study", "size", "gpus"]) if rows else pd.DataFrame()


def summarize(joined: pd.DataFrame) -> pd.DataFrame:
    """Per study and overall: median/max |error|, share of cases where the measured-best
    schedule is picked, and median Kendall tau."""
    cases = per_case(joined)
    rows = []
    for study, g in list(joined.groupby("study", sort=True)) + [("ALL", joined)]:
        c = cases if study == "ALL" else cases[cases["study"] == study]
        rows.append({
            "study": study,
            "rows": len(g),
            "median_abs_error": g["abs_error"].median(),
            "max_abs_error": g["abs_error"].max(),
            "median_signed_error": g["signed_error"].median(),
            "picks_best_share": c["picks_best"].mean() if len(c) else float("nan"),
            "median_kendall_tau": c["kendall_tau"].median() if len(c) else float("nan"),
            # the worst case of the choice against the fastest baseline (NaN: no baselines)
            "min_pick_vs_baseline": (c["pick_vs_baseline"].min()
                                     if "pick_vs_baseline" in c.columns else float("nan")),
        })
    return pd.DataFrame(rows)
