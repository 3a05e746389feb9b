"""One markdown table of train_gpt.py runs (their --out JSON files): per model, every
variant's median phase times (CUDA events on torch's stream), host time per step and per phase,
and the step
ratio against the fastest torch variant of the same model, P and precision (fp32, or bf16 of
either recipe: autocast over fp32 parameters, or bf16 parameters with fp32 master weights;
>1: faster than torch).

    python benchmarks/gpu/training_summary.py RESULTS_DIR [--out table.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PHASES = ("forward", "backward", "optimizer", "step")


def table(runs: list[dict]) -> str:
    """The markdown table of `runs` (train_gpt.py results), grouped by model and P."""
    lines = ["| model | P | variant | " + " | ".join(f"{p} ms" for p in PHASES)
             + " | host ms/step | host fwd / bwd / opt ms | x fastest torch |",
             "|---|---|---|" + "---:|" * 7]
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        # bf16 runs (either recipe) are compared with the fastest torch run in bf16
        prec = "fp32" if r.get("precision", "fp32") == "fp32" else "bf16"
        groups.setdefault((r["params"], r.get("model_dim"), r.get("layers"), r.get("batch"),
                           r.get("block"), r["P"], prec), []).append(r)
    for (params, d, layers, b, t, P, prec), rs in sorted(groups.items()):
        torch_runs = [r for r in rs if r["optimizer"] == "torch"]
        fastest = min((r["phases_ms"]["step"] for r in torch_runs), default=None)
        model = f"{params / 1e6:.0f}M (d {d}, {layers} layers, {b} x {t} tokens, {prec})"
        for r in sorted(rs, key=lambda r: (r["optimizer"] != "torch", r["phases_ms"]["step"])):
            ph = r["phases_ms"]
            ratio = f"{fastest / ph['step']:.2f}x" if fastest else "-"
            lines.append(f"| {model} | {P} | {r.get('variant', r['optimizer'])} | "
                         + " | ".join(f"{ph[p]:.2f}" for p in PHASES)
                         + f" | {r['host_step_ms']:.2f} | {host_phases(r)} | {ratio} |")
    return "\n".join(lines)


def host_phases(r: dict) -> str:
    """The host's time issuing forward, backward (with its hooks) and the optimizer step
    (medians; runs before design note 93 did not record them: '-')."""
    h = r.get("host_phases_ms")
    if not h:
        return "-"
    return " / ".join(f"{h[k]:.2f}" for k in ("forward", "backward", "optimizer"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    runs = []
    for path in sorted(args.results.glob("*.json")):
        r = json.loads(path.read_text())
        if "phases_ms" in r:
            runs.append(r)
    if not runs:
        print(f"results must hold train_gpt.py JSON files with phases, got none in "
              f"{args.results}; run examples/train_gpt.py --out there", file=sys.stderr)
        return 2
    text = table(runs)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
