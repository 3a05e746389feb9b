"""Markdown summary of `harness.py replay-kernel-ops`'s results: every workbench row (program,
sizes, schedule, time, check) of the compile-and-measure CSVs in RES, and the torch baselines
of the MatMul + bias + GeLU epilogue beside the workbench's unfused and fused rows.

    python3 benchmarks/gpu/kernel_ops_summary.py RES > RES/kernel-ops-summary.md
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd


def main(res: Path) -> None:
    print("# Issue 15 on one GPU (`harness.py replay-kernel-ops`)\n")
    for stem in ("kernel-ops-checks-thf", "kernel-ops-checks-n", "kernel-ops-mlp",
                 "kernel-ops-epilogue-megatron"):
        path = res / f"{stem}.csv"
        if not path.exists():
            print(f"## {stem}\n\nnot run (no {path.name})\n")
            continue
        df = pd.read_csv(path)
        cols = [c for c in ("spec", "sizes", "schedule", "time_ms", "speedup", "check")
                if c in df.columns]
        print(f"## {stem}\n")
        print(df[cols].to_markdown(index=False, floatfmt=".3f"), "\n")
    torch_csv = res / "kernel-ops-epilogue-torch.csv"
    if torch_csv.exists():
        t = pd.read_csv(torch_csv)
        print("## MatMul + bias + GeLU-tanh, T=8192 H=12288 F=49152 f16: torch\n")
        print(t[["variant", "median_ms", "min_ms", "normwise_err_vs_eager", "device",
                 "torch"]].to_markdown(index=False, floatfmt=".4g"), "\n")
        wb_csv = res / "kernel-ops-epilogue-megatron.csv"
        if wb_csv.exists():  # design note 54: the speedup against the fastest baseline
            w = pd.read_csv(wb_csv)
            fused = w[w.schedule == "fuse-mm-epilogue"].time_ms
            best = t.loc[t.median_ms.idxmin()]
            if len(fused):
                print(f"fuse-mm-epilogue {fused.iloc[0]:.3f} ms against the fastest torch "
                      f"baseline, {best.variant} {best.median_ms:.3f} ms: "
                      f"{best.median_ms / fused.iloc[0]:.2f}x\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
