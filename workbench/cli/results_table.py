"""Tables of measured results: one row per (program, sizes, schedule or baseline), with speedup
over the unscheduled program, the headline speedup over the *fastest* baseline measured for
the same program and sizes (design note 54: NCCL + torch's fused kernels, NCCL + a
torch.compile'd step, PyTorch's fused communication ops, whichever was fastest), and time
against the NVLink floor. pandas only; no GPU."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.files import read_bounded
from workbench.runtime.baselines import REFERENCES
from workbench.schemas import LINK_PROBE, check

# NVLink per GPU per direction on H200 (NV18: 18 links x 26.562 GB/s): the nominal rate, the
# floor's bandwidth only when no measured rate is given (../shared/device/baselines-h200x4.md).
NVLINK_BPS = 478e9
MAX_PROBE_BYTES = 1 << 20  # a link probe's JSON is a few KiB


@dataclass(frozen=True)
class LinkRate:
    """The link rate a schedule's floor divides by (bytes/s per GPU per direction) and where
    it comes from (`nominal`, a number given, or a P-peer probe of the same call)."""

    Bps: float
    source: str


NOMINAL_LINK = LinkRate(NVLINK_BPS, "nominal NV18, 478 GB/s")


def link_rate(value: str | None, P: int) -> LinkRate:
    """--link-rate: a rate in GB/s, or the JSON of benchmarks/gpu/link_probe_peers.py measured
    at the same P (its `practical_GBps`: the fastest mechanism to all P - 1 peers at once)."""
    if value is None:
        return NOMINAL_LINK
    try:
        gbps = float(value)
    except ValueError:
        gbps = None
    if gbps is not None:
        if not (math.isfinite(gbps) and 0 < gbps < 1e5):
            raise WorkbenchError(f"--link-rate must be a rate in GB/s in (0, 1e5), got {value}; "
                                 "give the measured rate per GPU per direction")
        return LinkRate(gbps * 1e9, f"given, {gbps:g} GB/s")
    fix = ("run `python3 benchmarks/gpu/link_probe_peers.py FILE P` on this machine and pass "
           "FILE")
    if not Path(value).exists():
        raise WorkbenchError(f"--link-rate must be a number (GB/s) or a link probe JSON, got "
                             f"{value!r}; {fix}")
    raw = read_bounded(value, "--link-rate's link probe JSON", fix, MAX_PROBE_BYTES, follow=True)
    try:
        probe = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise WorkbenchError(f"--link-rate {value} must be a link probe's JSON, got "
                             f"{type(e).__name__}; {fix}") from None
    check(probe, LINK_PROBE, f"--link-rate {value}", fix)
    probe_P, gbps, how = probe["P"], float(probe["practical_GBps"]), probe["practical_by"]
    if probe_P != P:
        raise WorkbenchError(f"--link-rate {value} was measured at P = {probe_P}, this run has "
                             f"--gpus {P}; {fix.replace(' P`', f' {P}`')}")
    return LinkRate(gbps * 1e9, f"probe at P = {P}: {gbps:.1f} GB/s by {how}")


def table(records: list[dict], link: LinkRate = NOMINAL_LINK):
    """A DataFrame of the records (see workbench.runtime.worker) with derived columns; the
    floor is the record's bytes at `link`'s rate."""
    import pandas as pd

    rows = []
    for r in records:
        sizes = r.get("sizes", {})
        size_txt = " ".join(f"{k}={v}" for k, v in sizes.items() if k != "P")
        floor_ms = r.get("comm_bytes", 0) / link.Bps * 1e3
        t = r.get("median_ms")
        rows.append({
            "spec": r["spec"], "program": r["program"], "sizes": size_txt, "P": r["P"],
            "schedule": r["schedule"], "kind": r["kind"], "time_ms": t,
            "spread_ms": (r["p90_ms"] - r["p10_ms"]) if t is not None else None,
            "min_ms": r.get("min_ms"), "reps": r.get("reps"),
            "check": r.get("check", ""), "max_error": r.get("max_error"),
            "floor_ms": floor_ms, "link_GBps": link.Bps / 1e9,
            "x_floor": (t / floor_ms) if t and floor_ms else None,
            # bytes * 1e3 / ms, not bytes / (ms * 1e-3): a subnormal time would underflow to 0
            "nvlink_GBps": (r["comm_bytes"] * 1e3 / t / 1e9) if t and floor_ms else None,
        })
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    key = ["spec", "sizes", "P"]
    unsched = (df[df.schedule == "unscheduled"].set_index(key)["time_ms"]
               .rename("unscheduled_ms"))
    df = df.join(unsched, on=key)
    df["speedup"] = df["unscheduled_ms"] / df["time_ms"]
    # A baseline computes what the program computes; a reference row (a floor such as the
    # MatMul alone) does not and is never the fastest baseline. Results written before the
    # worker tagged them say "baseline": their names tell.
    base = df[(df.kind == "baseline") & ~df.schedule.isin(REFERENCES) & df.time_ms.notna()]
    if base.empty:
        df["fastest_baseline"], df["fastest_baseline_ms"], df["x_fastest_baseline"] = (
            None, None, None)
    else:
        best = base.loc[base.groupby(key)["time_ms"].idxmin(), [*key, "schedule", "time_ms"]]
        best = best.rename(columns={"schedule": "fastest_baseline",
                                    "time_ms": "fastest_baseline_ms"}).set_index(key)
        df = df.join(best, on=key)
        df["x_fastest_baseline"] = df["fastest_baseline_ms"] / df["time_ms"]
    return df.drop(columns=["unscheduled_ms"])


def steps_table(records: list[dict]):
    """A DataFrame of the per-step times of the records measured with `--per-step` (see
    workbench.runtime.worker.step_summary): one row per step of each stage, in order."""
    import pandas as pd

    rows = []
    for r in records:
        size_txt = " ".join(f"{k}={v}" for k, v in r.get("sizes", {}).items() if k != "P")
        for i, st in enumerate(r.get("steps") or []):
            rows.append({"spec": r["spec"], "sizes": size_txt, "P": r["P"],
                         "schedule": r["schedule"], "stage": st["stage"], "step": i,
                         "stmts": st["stmts"], "time_ms": st["median_ms"],
                         "spread_ms": st["spread_ms"]})
    return pd.DataFrame(rows)


def format_table(df) -> str:
    """A fixed-width text table of the main columns."""
    if df.empty:
        return "(no results)"
    cols = ["spec", "sizes", "schedule", "time_ms", "spread_ms", "x_fastest_baseline",
            "speedup", "x_floor", "nvlink_GBps", "check"]
    view = df[cols].copy()
    text = view.to_string(index=False, float_format=lambda x: f"{x:.3f}", max_colwidth=48)
    heads = headline(df)
    return text + ("\n" + "\n".join(heads) if heads else "")


def headline(df) -> list[str]:
    """One line per (program, sizes): the fastest generated schedule's speedup over the
    fastest baseline, naming both (the number a report leads with)."""
    if df.empty or "fastest_baseline" not in df or df["fastest_baseline"].isna().all():
        return []
    lines = []
    mine = df[(df.kind == "workbench") & df.time_ms.notna()]
    for (spec, sizes, P), g in mine.groupby(["spec", "sizes", "P"], sort=False):
        best = g.loc[g.time_ms.idxmin()]
        if best.fastest_baseline is None or best.fastest_baseline != best.fastest_baseline:
            continue
        lines.append(f"{spec} {sizes} P={P}: {best.schedule} {best.time_ms:.3f} ms, "
                     f"{best.x_fastest_baseline:.2f}x the fastest baseline "
                     f"({best.fastest_baseline}, {best.fastest_baseline_ms:.3f} ms)")
    return lines
