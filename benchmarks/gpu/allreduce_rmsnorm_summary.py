"""Summary of the allreduce-rmsnorm timing CSVs (compile-and-measure tables): one row per
(dtype, sizes, P) with every schedule's median eager and CUDA-graphed, the fastest baseline and
the fastest generated schedule's ratio to it (both sides' fastest, graphed or not).

    usage: python benchmarks/gpu/allreduce_rmsnorm_summary.py RESULTS.csv|RESULTS.json...

A .json (compile-and-measure's results, or the .partial.json a run cut off by its time limit
leaves) is tabulated as compile-and-measure would have (workbench.cli.results_table.table).
"""

from __future__ import annotations

import sys

import pandas as pd

GRAPH = " (cuda graph)"


def summary(df: pd.DataFrame) -> str:
    """The markdown table of one or more compile-and-measure CSVs of the study."""
    lines = []
    mine = df[df.kind == "workbench"]
    names = list(dict.fromkeys(s.removesuffix(GRAPH) for s in mine.schedule))
    head = ["program", "sizes", "P", *names, "fastest baseline (ms)", "fastest schedule",
            "x fastest baseline"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (spec, sizes, P), g in df.groupby(["spec", "sizes", "P"], sort=False):
        t = dict(zip(g.schedule, g.time_ms))
        cells = []
        for n in names:
            eager, graphed = t.get(n), t.get(n + GRAPH)
            cells.append(f"{_ms(eager)} / {_ms(graphed)}")
        w = g[(g.kind == "workbench") & g.time_ms.notna()]
        best = w.loc[w.time_ms.idxmin()] if len(w) else None
        fb = g.fastest_baseline.iloc[0] if "fastest_baseline" in g else None
        fb_ms = g.fastest_baseline_ms.iloc[0] if "fastest_baseline_ms" in g else None
        base = f"{fb} {_ms(fb_ms)}" if isinstance(fb, str) else "-"
        ratio = (f"{fb_ms / best.time_ms:.2f}x" if best is not None and isinstance(fb, str)
                 else "-")
        lines.append("| " + " | ".join([spec, sizes, str(P), *cells, base,
                                        f"{best.schedule} {_ms(best.time_ms)}"
                                        if best is not None else "-", ratio]) + " |")
    return ("Schedule cells: eager / CUDA-graphed median (ms).\n\n" + "\n".join(lines))


def _ms(x) -> str:
    return "-" if x is None or x != x else f"{x:.4f}"


def _read(path: str) -> pd.DataFrame:
    if path.endswith(".json"):
        import json

        from workbench.cli.results_table import table

        return table(json.loads(open(path).read())["records"])
    return pd.read_csv(path)


if __name__ == "__main__":
    frames = [_read(p) for p in sys.argv[1:]]
    print(summary(pd.concat(frames, ignore_index=True)) if frames else "(no results)")
