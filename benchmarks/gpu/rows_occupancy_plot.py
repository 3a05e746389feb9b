"""The graph of `harness.py replay-rows-bandwidth` (design note 86): CUDA-graphed medians of the
row kernels with the row cache in registers (`regs`) and in shared memory (`shared4`,
`shared3`), read from the driver's printed lines (big-f16.txt, small.txt, big-bf16.txt of a
results folder), beside torch.compile's epilogue at T = 8192, and the speed-up over `regs`
at T = 128.

    python benchmarks/gpu/rows_occupancy_plot.py records/gpu/h100x1-rows-occupancy-p1
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

LINE = re.compile(r"(\w+)\s+T=\s*(\d+) H=\s*(\d+) (\S+) (\S+)\s+eager\s+\S+ graph\s+(\S+) ms")
SHORT = {"fuse-ar-c-lamport": "lamport", "fuse-ar-c-oneshot": "one-shot", "fuse-ar-c": "two-shot"}
COLORS = {"regs": "tab:gray", "shared4": "tab:orange", "shared3": "tab:blue",
          "torch.compile": "tab:green"}


def graphed(folder: Path) -> dict:
    """(dtype, T, H, variant, schedule) -> graphed ms; torch's rows are ('torch.compile',
    'epilogue')."""
    out = {}
    for name in ("big-f16.txt", "small.txt", "big-bf16.txt"):
        path = folder / name
        for line in path.read_text().splitlines() if path.exists() else []:
            m = LINE.match(line)
            if m and m[6] != "-":
                out[(m[1], int(m[2]), int(m[3]), m[4], m[5])] = float(m[6])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = graphed(args.folder)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(14, 5), gridspec_kw={"width_ratios": [1, 2.4]})
    # the sizes timed with every variant (a part cut by its time limit leaves some out)
    big = sorted({(k[0], k[2], k[4]) for k in d if k[1] == 8192 and k[3] == "shared3"})
    for gi, (dt, H, s) in enumerate(big):
        for vi, v in enumerate(COLORS):
            key = (dt, 8192, H, v, "epilogue" if v == "torch.compile" else s)
            if key in d:
                a1.bar(gi + vi * 0.2 - 0.3, d[key], 0.2, color=COLORS[v],
                       label=v if gi == 0 else None)
    a1.set_xticks(range(len(big)), [f"{dt} H={H}\n{s}" for dt, H, s in big], fontsize=8)
    a1.set_ylabel("CUDA-graphed median, ms")
    a1.set_title("T = 8192 (the sizes timed with every variant)")
    a1.legend(fontsize=8, loc="lower right")
    small = sorted({(k[0], k[2], k[4]) for k in d if k[1] == 128 and k[3] == "regs"},
                   key=lambda k: (k[0] != "f16", k[1], list(SHORT).index(k[2])))
    for x, (dt, H, s) in enumerate(small):
        for vi, v in enumerate(("shared4", "shared3")):
            if (dt, 128, H, v, s) in d:
                a2.bar(x + vi * 0.4 - 0.2, d[(dt, 128, H, "regs", s)] / d[(dt, 128, H, v, s)],
                       0.4, color=COLORS[v], label=v if x == 0 else None)
    a2.axhline(1.0, color="k", lw=0.8)
    a2.set_xticks(range(len(small)), [f"{dt} {H} {SHORT.get(s, s)}" for dt, H, s in small],
                  rotation=90, fontsize=7)
    a2.set_ylabel("speed-up over the register cache (regs / variant)")
    a2.set_title("T = 128 (graphed; > 1: the shared cache is faster)")
    a2.legend(fontsize=8)
    fig.suptitle("Row kernels at P = 1: the row cache in registers (64 registers, 2 blocks a SM) "
                 "or in shared memory (bound 4 / 3)", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.folder / "rows-occupancy.png", dpi=110)


if __name__ == "__main__":
    main()
