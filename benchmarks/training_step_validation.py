"""The simulated training step (`workbench simulate-step`, design note 84) against the steps
GPU runs measured (examples/train_gpt.py's per-phase CUDA events, at the P each run's JSON
names: 1 for runs 30 and 33, 2 for run 35): one row per measured variant, each phase
predicted and measured, and the error.

    python benchmarks/training_step_validation.py \
        --measured records/gpu/h100x1-run30-training:add \
        --measured records/gpu/h100x1-run33-training-p1/call1-806m:lend ... \
        --measured records/gpu/h100x4-run35-p2/call3/A/train-806m:copy \
        --out records/training-step

Writes validation.md and validation.csv in --out. Each --measured folder names how that run's
wbtorch moved gradients into buckets (run 30: add into zeroed views; run 33: large ones lent
in place, `lend`; run 35 at P = 2: copied, `copy`). Which prediction stands for which measured
variant is VARIANTS below; the measured runs' workbench choice was fuse-rs-c-ag for every
bucket. A measured file is P_<model>_<variant>.json; P is read from the JSON. Mixed-precision,
--tp and noise runs are not compared (not modelled, or a second sample of a compared one). A
P = 1 row whose measured forward exceeds its folder's torch plain forward by more than 10 % is
named host-bound (GPU run 36's capped grids, design note 99).
"""

from __future__ import annotations

import argparse
import functools
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
# measured file suffix -> (torch mode or workbench mode, accumulate (None: the folder's),
# the fused kernels' grid cap (wbtorch's collective_grid; 0: the full grid), what the
# simulator does not model)
BLOCKS = "each block compiled alone: the host's issue time (not modelled)"
# a capped grid's note, by P: at P > 1 its link rate (no block curve on the preset), at P = 1
# nothing (its computation on its SMs is modelled, note 99)
GRID = ("the h100x8 preset has no calibrated block curve: the {}-block kernel is priced at "
        "the full grid's link rate (design note 98)")
CUT = "the graph cut every {} blocks (gradients ready per piece: not modelled)"
# CUDA graphs (--cudagraphs, GPU run 37) take the host's launches away: such a run is
# predicted with simulate-step's --cudagraphs (no host time per launch, decision 105)
GRAPHS = "CUDA graphs over the compiled graphs (predicted with --cudagraphs)"
# a P = 1 run whose measured forward exceeds its folder's torch plain forward by more than
# this is host-bound (the forward has no optimizer work: only the host can slow it)
HOST_BOUND = 1.10
VARIANTS = {
    "plain": ("plain", None, 0, ""),
    "plain-b": ("plain", None, 0, BLOCKS),
    "nosplit": ("ddp", None, 0, ""),
    "ref": ("ddp", None, 0, "Dynamo's DDPOptimizer splits the compiled graph per bucket (not "
            "modelled)"),
    "wb": ("after", None, 0, ""),
    "wb-copy": ("after", "copy", 0, ""),
    "wb-b": ("after", None, 0, BLOCKS),
    "wb-ovl": ("in", None, 0, BLOCKS),
    "wb-ovl1": ("in", None, 0, BLOCKS + "; fused kernels on 1 block per SM"),
    "wb-ovls": ("in", None, 0, ""),  # split compile: the model in one graph, no per-block host
    "wb-ovlsg": ("in", None, 32, GRID.format(32)),
    "wb-ovlsg16": ("in", None, 16, GRID.format(16)),
    "wb-ovlsg48": ("in", None, 48, GRID.format(48)),
    "wb-ovlsg64": ("in", None, 64, GRID.format(64)),
    "wb-ovlsgp4": ("in", None, 32, GRID.format(32) + "; " + CUT.format(4)),
    "wb-ovlsg48p2": ("in", None, 48, GRID.format(48) + "; " + CUT.format(2)),
    "plain-cg": ("plain", None, 0, GRAPHS),
    "ref-cg": ("ddp", None, 0, GRAPHS + "; Dynamo's graph split per bucket (not modelled)"),
    "wb-cg": ("after", None, 0, GRAPHS),
    "wb-ovlsg-cg": ("in", None, 32, GRID.format(32) + "; " + GRAPHS),
    "wb-ovlsg48-cg": ("in", None, 48, GRID.format(48) + "; " + GRAPHS),
}


def variant_note(note: str, P: int, forward_ms: float, plain_forward_ms: float | None) -> str:
    """What the simulator does not model for this row: the variant's note (its block-curve
    part only at P > 1, where the capped kernel crosses the link), and whether the host
    fell behind (forward above HOST_BOUND x the folder's torch plain forward, at P = 1)."""
    parts = [p for p in note.split("; ") if p and not (P == 1 and p.startswith("the h100x8"))]
    if P == 1 and plain_forward_ms and forward_ms > HOST_BOUND * plain_forward_ms:
        parts.append(f"host-bound: forward {forward_ms:.2f} ms against torch's "
                     f"{plain_forward_ms:.2f} (the host is not modelled)")
    return "; ".join(parts)


@functools.cache
def plain_forward(path: Path) -> float | None:
    """The forward ms of a folder's torch plain run (read once), None where it has none."""
    return json.loads(path.read_text())["phases_ms"]["forward"] if path.exists() else None


PHASES = (("forward", "forward_ms"), ("backward", "backward_phase_ms"),
          ("optimizer", "optimizer_phase_ms"), ("step", "step_ms"))


def predictions(shape: ct.GptShape, hardware: str, accumulate: str, P: int = 1,
                grid: int = 0, gemm_efficiency: float | None = None,
                cudagraphs: bool = False) -> dict:
    """mode -> the predicted row on P GPUs (torch plain only at P = 1), the workbench's fused
    kernels' grid capped at `grid` blocks (0: the full grid), as CUDA graphs or not."""
    _, cands = candidate_programs("studies/adam.py", "fuse-rs-c-ag")
    out = {}
    for torch_mode in ("plain", "ddp") if P == 1 else ("ddp",):
        rows, _ = simulate_config(shape, hardware, 1, P, torch_mode, cands, ct.DDP_BUCKET_BYTES,
                                  accumulate, gemm_efficiency, collective_grid=grid,
                                  cudagraphs=cudagraphs)
        out[torch_mode] = rows[0]
        out["after"], out["in"] = rows[1], rows[2]
    return out


def compare(path: Path, m: dict, model: str, mode: str, key, note: str, pred: dict) -> dict:
    """One row: the measured JSON `m`'s phases beside the prediction `pred`, and the errors
    (None for a phase under 0.5 ms, where a percentage means nothing)."""
    acc, P, grid, _ = key
    row = {"measured": str(path), "P": P, "model": model, "variant": m["variant"],
           "predicted_as": f"{mode} ({acc}" + (f", grid {grid}" if grid else "") + ")",
           "not_modelled": note}
    for phase, k in PHASES:
        got, want = pred[k], m["phases_ms"][phase]
        row[f"{phase}_pred_ms"] = round(got, 3)
        row[f"{phase}_meas_ms"] = round(want, 3)
        row[f"{phase}_err_pct"] = round(100 * (got - want) / want, 1) if want > 0.5 else None
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measured", action="append", required=True,
                    help="FOLDER:ACCUMULATE, a results folder of `harness.py replay-training` "
                    "(<P>_<model>_<variant>.json) and how its wbtorch moved gradients")
    ap.add_argument("--hardware", default="h100x8")
    ap.add_argument("--out", required=True)
    ap.add_argument("--grid-rates", default="",
                    help="diagnosis, not a calibration: comma-separated rates of a capped "
                    "grid's fused kernel relative to the full grid's, each tried as the "
                    "preset's block curve on the capped variants (grid-rates.md)")
    args = ap.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    rows = []
    for spec in args.measured:
        folder, _, accumulate = spec.rpartition(":")
        for model, shape in MODELS.items():
            preds = {}
            for suffix, (mode, acc, grid, note) in VARIANTS.items():
                for path in sorted(Path(folder).glob(f"*_{model}_{suffix}.json")):
                    m = json.loads(path.read_text())
                    key = (acc or accumulate, int(m["P"]), grid, GRAPHS in note)
                    if key not in preds:
                        preds[key] = predictions(shape, args.hardware, key[0], key[1],
                                                 key[2], cudagraphs=key[3])
                    ref = plain_forward(path.with_name(f"{m['P']}_{model}_plain.json"))
                    why = variant_note(note, int(m["P"]), m["phases_ms"]["forward"], ref)
                    rows.append(compare(path, m, model, mode, key, why, preds[key][mode]))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import pandas as pd

    pd.DataFrame(rows).to_csv(out / "validation.csv", index=False)
    lines = [f"Predicted (`workbench simulate-step --hardware {args.hardware} --gpus P "
             f"--schedule fuse-rs-c-ag --accumulate A [--collective-grid G]`, commit {commit}) "
             "against measured (CUDA "
             "events, medians), ms; error = (predicted - measured) / measured (phases under "
             "0.5 ms: no %).", "",
             "| measured | P | model | variant | predicted as | forward | backward | optimizer | "
             "step | step error | not modelled |",
             "|---|---:|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        cells = []
        for phase, _ in PHASES:
            err = r[f"{phase}_err_pct"]
            cells.append(f"{r[f'{phase}_pred_ms']:.2f} / {r[f'{phase}_meas_ms']:.2f}"
                         + (f" ({err:+.1f} %)" if err is not None else ""))
        where = str(Path(r["measured"]).parent).split("results/gpu/", 1)[-1]
        lines.append(f"| {where} | {r['P']} | {r['model']} | {r['variant']} | "
                     f"{r['predicted_as']} | " + " | ".join(cells)
                     + f" | **{r['step_err_pct']:+.1f} %** | {r['not_modelled']} |")
    (out / "validation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if args.grid_rates:
        rates = [float(f) for f in args.grid_rates.split(",")]
        text = grid_rates(rows, args.hardware, rates, out, commit)
        (out / "grid-rates.md").write_text(text)
        print(text)
    return 0


def grid_rates(rows: list[dict], hardware: str, rates: list[float], tmp: Path,
               commit: str) -> str:
    """The capped-grid rows predicted with a block curve {grid: rate, full grid: 1} put on
    the preset (a profile of it; the GEMM rate stays the preset's calibrated ratio): which
    rate of the capped kernel the measured phases imply. A diagnosis, not a calibration."""
    from cost_model.profiles import load_hardware

    sms = load_hardware(hardware).gpu.sm_count
    lines = [f"Capped-grid rows predicted with a block curve on `{hardware}` (commit {commit};"
             " diagnosis, not a calibration): rate = the capped kernel's link rate / the full "
             "grid's. Backward phase and step, predicted / measured ms.", "",
             "| measured | model | rate | backward | step | step error |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        if "grid" not in r["predicted_as"] or r["P"] == 1:  # at P = 1 nothing on the link
            continue
        acc = r["predicted_as"].split("(")[1].split(",")[0]
        grid = int(r["predicted_as"].split("grid ")[1].rstrip(")"))
        shape = MODELS[r["model"]]
        for rate in rates:
            profile = tmp / "grid-rate-profile.json"
            profile.write_text(json.dumps({"base": hardware, "fused_block_bandwidth": {
                str(grid): rate, str(2 * sms): 1.0}}))
            pred = predictions(shape, str(profile), acc, r["P"], grid,
                               ct.PRESET_GEMM_EFFICIENCY[shape.dtype])["in"]
            profile.unlink()
            b, st = pred["backward_phase_ms"], pred["step_ms"]
            err = 100 * (st - r["step_meas_ms"]) / r["step_meas_ms"]
            where = str(Path(r["measured"]).parent).split("results/gpu/", 1)[-1]
            lines.append(f"| {where} | {r['model']} | {rate:g} | {b:.2f} / "
                         f"{r['backward_meas_ms']:.2f} | {st:.2f} / {r['step_meas_ms']:.2f} | "
                         f"{err:+.1f} % |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
