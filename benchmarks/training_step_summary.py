"""The sweep of records/training-step/sweep.sh as one markdown table per file: the
workbench's step (optimizer in backward, its fastest schedule) over DDP's, by preset and GPUs.

    python benchmarks/training_step_summary.py records/training-step
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd


def summary(folder: Path) -> str:
    lines = []
    for csv in sorted(folder.glob("*.csv")):
        if csv.stem in ("validation",) or csv.stem.startswith("schedules"):
            continue
        d = pd.read_csv(csv)
        inside = d[d.variant == "workbench in backward"]
        after = d[d.variant == "workbench after backward"]
        first = d.iloc[0]
        lines += [f"## {csv.stem}: {first['params'] / 1e6:.0f}M parameters, "
                  f"{first['tokens_per_gpu']} tokens per GPU", "",
                  "x DDP + fused AdamW (schedule), optimizer in backward; after backward at "
                  f"best {after.x_torch.max():.3f}x", ""]
        gpus = sorted(inside.P.unique())
        lines += ["| preset | " + " | ".join(f"{p} GPUs" for p in gpus) + " |",
                  "|---|" + "---:|" * len(gpus)]
        for hw, rows in inside.groupby("hardware", sort=False):
            by_p = {r.P: f"{r.x_torch:.3f} ({r.schedule})" for r in rows.itertuples()}
            lines.append(f"| {hw} | " + " | ".join(by_p.get(p, "") for p in gpus) + " |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    text = summary(folder)
    (folder / "summary.md").write_text(text)
    print(text)
