"""The simulated training step (`workbench simulate-step`, design note 84) against the steps
GPU runs measured at P = 1 (examples/train_gpt.py's per-phase CUDA events): one row per
measured variant, each phase predicted and measured, and the error.

    python benchmarks/training_step_validation.py \
        --measured studies/results/gpu/h100x1-run30-training:add \
        --measured studies/results/gpu/h100x1-run33-training-p1/call1-806m:lend ... \
        --out studies/results/training-step

Writes validation.md and validation.csv in --out. Each --measured folder names how that run's
wbtorch moved gradients into buckets (run 30: add into zeroed views; run 33: large ones lent
in place, `lend`). Which prediction stands for which measured variant is VARIANTS below; the
measured runs' workbench choice was fuse-rs-c-ag for every bucket. Mixed-precision, --tp and
noise runs are not compared (not modelled, or a second sample of a compared one).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cost_model import training as ct  # noqa: E402
from workbench.cli.simulate_step import candidate_programs, simulate_config  # noqa: E402

MODELS = {"101m": ct.GptShape(1024, 8, 8, batch=16), "806m": ct.GptShape(2048, 16, 16, batch=1)}
# measured file suffix -> (torch mode or workbench mode, what the simulator does not model)
BLOCKS = "each block compiled alone: the host's issue time (not modelled)"
VARIANTS = {
    "plain": ("plain", None, ""),
    "plain-b": ("plain", None, BLOCKS),
    "nosplit": ("ddp", None, ""),
    "ref": ("ddp", None, "Dynamo's DDPOptimizer splits the compiled graph per bucket (not "
            "modelled)"),
    "wb": ("after", None, ""),
    "wb-copy": ("after", "copy", ""),
    "wb-b": ("after", None, BLOCKS),
    "wb-ovl": ("in", None, BLOCKS),
    "wb-ovl1": ("in", None, BLOCKS + "; fused kernels on 1 block per SM"),
}
PHASES = (("forward", "forward_ms"), ("backward", "backward_phase_ms"),
          ("optimizer", "optimizer_phase_ms"), ("step", "step_ms"))


def predictions(shape: ct.GptShape, hardware: str, accumulate: str) -> dict:
    """mode -> the predicted row (P = 1)."""
    _, cands = candidate_programs("studies/adam.py", "fuse-rs-c-ag")
    out = {}
    for torch_mode in ("plain", "ddp"):
        rows, _ = simulate_config(shape, hardware, 1, 1, torch_mode, cands, ct.DDP_BUCKET_BYTES,
                                  accumulate, None)
        out[torch_mode] = rows[0]
        out["after"], out["in"] = rows[1], rows[2]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measured", action="append", required=True,
                    help="FOLDER:ACCUMULATE, a results folder of run_training.sh "
                    "(1_<model>_<variant>.json) and how its wbtorch moved gradients")
    ap.add_argument("--hardware", default="h100x8")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    rows = []
    for spec in args.measured:
        folder, _, accumulate = spec.rpartition(":")
        for model, shape in MODELS.items():
            preds = {}
            for suffix, (mode, acc, note) in VARIANTS.items():
                path = Path(folder) / f"1_{model}_{suffix}.json"
                if not path.is_file():
                    continue
                acc = acc or accumulate
                if acc not in preds:
                    preds[acc] = predictions(shape, args.hardware, acc)
                m = json.loads(path.read_text())
                row = {"measured": str(path), "model": model, "variant": m["variant"],
                       "predicted_as": f"{mode} ({acc})", "not_modelled": note}
                for phase, key in PHASES:
                    got, want = preds[acc][mode][key], m["phases_ms"][phase]
                    row[f"{phase}_pred_ms"] = round(got, 3)
                    row[f"{phase}_meas_ms"] = round(want, 3)
                    row[f"{phase}_err_pct"] = round(100 * (got - want) / want, 1) if want > 0.5 \
                        else None
                rows.append(row)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import pandas as pd

    pd.DataFrame(rows).to_csv(out / "validation.csv", index=False)
    lines = [f"Predicted (`workbench simulate-step --hardware {args.hardware} --gpus 1 "
             f"--schedule fuse-rs-c-ag --accumulate A`, commit {commit}) against measured (CUDA "
             "events, medians), ms; error = (predicted - measured) / measured (phases under "
             "0.5 ms: no %).", "",
             "| measured | model | variant | predicted as | forward | backward | optimizer | "
             "step | step error | not modelled |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        cells = []
        for phase, _ in PHASES:
            err = r[f"{phase}_err_pct"]
            cells.append(f"{r[f'{phase}_pred_ms']:.2f} / {r[f'{phase}_meas_ms']:.2f}"
                         + (f" ({err:+.1f} %)" if err is not None else ""))
        where = Path(r["measured"]).parent.name
        lines.append(f"| {where} | {r['model']} | {r['variant']} | {r['predicted_as']} | "
                     + " | ".join(cells)
                     + f" | **{r['step_err_pct']:+.1f} %** | {r['not_modelled']} |")
    (out / "validation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
