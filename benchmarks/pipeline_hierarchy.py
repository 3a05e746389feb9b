"""The pipelined hierarchical schedule against the flat best on dgx-h100, 2 to 2048 nodes, from
2^24 parameters (issue 23 item 5): runs

    workbench simulate studies/adam.py --hardware dgx-h100 --nodes K --set N=2**E --autotune \
        --csv OUT/adam_K_E.csv

for every K and E (skipping a CSV that exists), then prints one markdown row per point: the
best runnable flat schedule (no hierarchical split), the best pipelined hierarchy, the best
unpipelined hierarchical split, and the pipeline's time against the flat best.

    python benchmarks/pipeline_hierarchy.py [--out DIR] [--nodes 2 8 ...] [--exponents 24 ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

NODES = (2, 8, 32, 128, 512, 2048)
EXPONENTS = (24, 26, 28, 30)
NOT_GENERATED = "not generated"  # simulate's note of a row codegen refuses (never best)


def run(out: Path, k: int, e: int) -> pd.DataFrame:
    """The simulate table of one point (run once, then read from its CSV)."""
    csv = out / f"adam_{k}_{e}.csv"
    if not csv.exists():
        subprocess.run(["workbench", "simulate", "studies/adam.py", "--hardware", "dgx-h100",
                        "--nodes", str(k), "--set", f"N=2**{e}", "--autotune", "--csv",
                        str(csv)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return pd.read_csv(csv)


def best(df: pd.DataFrame, mask) -> tuple[str, float]:
    rows = df[mask & df["time_ms"].notna()]
    if rows.empty:
        return "-", float("nan")
    row = rows.loc[rows["time_ms"].idxmin()]
    return row["schedule"], float(row["time_ms"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/pipeline_hierarchy"))
    ap.add_argument("--nodes", type=int, nargs="*", default=NODES)
    ap.add_argument("--exponents", type=int, nargs="*", default=EXPONENTS)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print("| nodes | N | best flat, ms | pipelined hierarchy, ms | hierarchical split, ms "
          "| pipelined vs flat |")
    print("|---:|---|---|---|---:|---:|")
    for k in args.nodes:
        for e in args.exponents:
            df = run(args.out, k, e)
            note = df["note"].fillna("") if "note" in df else pd.Series([""] * len(df))
            ok = ~note.str.startswith(NOT_GENERATED)
            hier = df["schedule"].str.contains("hierarchical-split")
            piped = df["schedule"].str.contains("pipeline-hierarchy")
            fname, flat = best(df, ok & ~hier)
            pname, pipe = best(df, ok & piped)
            _, split = best(df, ok & hier & ~piped)
            chunks = pname.split("pipeline-hierarchy")[-1].split("#")[0] if pipe == pipe else ""
            print(f"| {k} | 2^{e} | {fname} {flat:.4g} | {pipe:.4g} (chunks {chunks}) | "
                  f"{split:.4g} | {100 * (pipe / flat - 1):+.1f} % |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
