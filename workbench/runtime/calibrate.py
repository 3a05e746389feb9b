"""The GPU half of `workbench calibrate`: run the microbenchmarks on P GPUs, write the raw file.

Three jobs, each one process per GPU through the launcher (so a dead or hung rank ends the
run): the PyTorch microbenchmarks (workbench/runtime/calibrate_worker.py: NCCL collectives in
f32, f16 and bf16, HBM streams in f32 and mixed f16/f32, launch gap, GEMM), then the
workbench's own fused AllReduce kernel with no computation (studies/allreduce.py,
schedule `fused`) across sizes, for the peer load/store bandwidth, then the same kernel at
256 MiB on fewer blocks (calibrate_worker --fused-blocks), for its bandwidth against blocks,
then generated at unroll 1, 2 and 4 (--fused-unroll), for its bandwidth against unroll, then
the generated f16 bias + residual kernel with and without a dropout (studies/elementwise_ops.py,
8192 x 12288; GPU run 17's call of the same two kernels took 34 s, mostly compiling and the
reference check), for the dropout hashing cost. No study program runs: calibration never sees
the study measurements. (Only with P > 1, where pycuda is required; a P = 1 profile keeps the
preset's dropout cost.)

GPU machine time on 2x H200: 85 s for the whole `workbench calibrate` before the f16/bf16
collectives, the mixed streams and the block sweep were added. They add an estimated 30 s of
measuring (two more NCCL sweeps of ~0.5 s of collectives each plus barriers, one nvcc compile
and six ~0.3 ms kernels, one more launch with its NCCL set-up and seven grids of a 256 MiB
kernel; the unroll sweep, design note 95, one more launch and NCCL set-up, three nvcc
compiles and four 256 MiB kernels: an estimated 15 s) and a few seconds of fitting on the host
(`cost_model.calibration.nccl.fit_nccl_bandwidth`, 2-4 s per dtype; the f32 NCCL fit before
them takes ~60 s, as it did).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from workbench.errors import RuntimeFault, WorkbenchError
from workbench.files import temporary_folder, write_atomic
from workbench.runtime import launcher
from workbench.runtime.calibrate_worker import ALLREDUCE_SPEC
from workbench.runtime.job import gpu_count, run_job

FUSED_N = [2**k for k in (20, 22, 24, 26, 28)]  # f32 elements: 4 MiB .. 1 GiB buffers


def measure(P: int, raw_path: Path, echo=None, hang_s: float = 120.0, passes: int = 1) -> dict:
    """Measure on P GPUs of this machine and write the raw JSON to raw_path; `passes` sweeps
    of the NCCL collectives and send/recv, each point the median over them."""
    launcher.require_gpus(P, gpu_count("calibrate"))
    with temporary_folder("wb-cal-") as tmp:
        out = Path(tmp) / "raw.json"
        argv = launcher.python_argv("workbench.runtime.calibrate_worker", str(out), "--passes",
                                    str(passes))
        launcher.launch(P, argv, hang_s=hang_s, echo=echo)
        raw = json.loads(out.read_text())
    raw["fused"] = []
    if P > 1:
        if importlib.util.find_spec("pycuda") is None:
            raise RuntimeFault("pycuda must be installed for calibrate's fused-kernel benchmark, "
                               "got none; install the pycuda wheel (see `harness.py replay-all`)")
        results = run_job([str(ALLREDUCE_SPEC)], P, [{"N": n} for n in FUSED_N], "fused", 30, 5,
                          False, hang_s, echo)
        for r in results["records"]:
            if r["schedule"] == "fused" and r.get("median_ms"):
                if str(r.get("check", "")).startswith("MISMATCH"):
                    raise RuntimeFault(f"the fused AllReduce kernel must match the reference, "
                                       f"got {r['check']} at N={r['sizes']['N']}")
                raw["fused"].append({"nbytes": 4 * int(r["sizes"]["N"]),
                                     "ms": float(r["median_ms"]), "check": r.get("check")})
        raw["fused_meta"] = {"program": "studies/allreduce.py", "schedule": "fused",
                             "dtype": "f32", **results.get("meta", {})}
        raw.update(_job("--fused-blocks", "fused_blocks", P, hang_s, echo))
        raw.update(_job("--fused-unroll", "fused_unroll", P, hang_s, echo))
        raw.update(_dropout(P, hang_s, echo))
    raw_path = Path(raw_path)
    raw_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(raw_path, json.dumps(raw, indent=1, default=str) + "\n")
    return raw


def _job(flag: str, section: str, P: int, hang_s: float, echo) -> dict:
    """One of the fused kernel's sweeps (calibrate_worker `flag`: --fused-blocks, the block
    sweep; --fused-unroll, the unroll sweep) as raw-file sections; a failure is recorded
    (`section`_error) and the rest of the calibration kept: the profile then has no block
    curve (or unroll curve), as before the sweep existed. Each is a job of its own, so that
    one's failure or hang loses only its own section."""
    with temporary_folder("wb-cal-sweep-") as tmp:
        out = Path(tmp) / f"{section}.json"
        try:
            argv = launcher.python_argv("workbench.runtime.calibrate_worker", flag, str(out))
            launcher.launch(P, argv, hang_s=hang_s, echo=echo)
            return json.loads(out.read_text())
        except (RuntimeFault, OSError, ValueError) as e:
            return {f"{section}_error": f"{type(e).__name__}: {e}"}


DROPOUT_SPEC = ALLREDUCE_SPEC.with_name("elementwise_ops.py")
DROPOUT_SIZES = {"T": 8192, "H": 12288}


def _dropout(P: int, hang_s: float, echo) -> dict:
    """The generated f16 epilogue with and without a dropout (GPU run 17's kernels), through
    compile-and-measure's own path, as the raw `dropout` section (numel, plain_ms,
    dropout_ms: the slowest rank's medians); a failure or a mismatch is recorded as
    `dropout_error` and the rest of the calibration kept."""
    specs = [f"{DROPOUT_SPEC}:{name}" for name in ("bias_residual", "bias_dropout_residual")]
    try:
        results = run_job(specs, P, [dict(DROPOUT_SIZES)], "unscheduled", 30, 5, False, hang_s,
                          echo)
        ms = {}
        for r in results["records"]:
            if not r.get("ok") or not r.get("median_ms"):
                raise RuntimeFault(f"{r['spec']} must run and match the reference, got "
                                   f"{r.get('check')}")
            ms[r["spec"].rsplit(":", 1)[1]] = float(r["median_ms"])
        return {"dropout": {"numel": DROPOUT_SIZES["T"] * DROPOUT_SIZES["H"],
                            "plain_ms": ms["bias_residual"],
                            "dropout_ms": ms["bias_dropout_residual"]}}
    except (WorkbenchError, OSError, ValueError, KeyError) as e:  # RuntimeFault among them
        return {"dropout_error": f"{type(e).__name__}: {e}"}


def write_csvs(raw: dict, stem: Path) -> list[Path]:
    """The raw collective and fused tables as CSVs beside the profile (for people and for
    `python -m cost_model.calibration.nccl`-style tables): .nccl.csv (f32), .nccl-f16.csv and
    .nccl-bf16.csv where measured, .fused.csv, .fused-blocks.csv and .fused-unroll.csv."""
    paths = []
    tables = [("nccl", "f32", raw.get("collectives"))]
    by_dtype = raw.get("collectives_by_dtype") or {}
    tables += [(f"nccl-{d}", d, rows) for d, rows in by_dtype.items()]
    for suffix, dtype, rows in tables:
        if not rows:
            continue
        lines = [f"# workbench calibrate on {raw['gpus']} GPUs, NCCL {raw.get('nccl_version')}, "
                 f"{dtype}, CUDA-event median (slowest rank)",
                 "nbytes,allreduce_ms,reducescatter_ms,allgather_ms"]
        lines += [f"{r['nbytes']},{r['allreduce_ms']:.5f},{r['reducescatter_ms']:.5f},"
                  f"{r['allgather_ms']:.5f}" for r in rows]
        paths.append(_write_lines(stem, suffix, lines))
    if raw.get("fused"):
        lines = ["nbytes,fused_allreduce_ms"]
        lines += [f"{r['nbytes']},{r['ms']:.5f}" for r in raw["fused"]]
        paths.append(_write_lines(stem, "fused", lines))
    if raw.get("fused_blocks"):
        lines = ["nbytes,blocks,fused_allreduce_ms"]
        lines += [f"{r['nbytes']},{r['blocks']},{r['ms']:.5f}" for r in raw["fused_blocks"]]
        paths.append(_write_lines(stem, "fused-blocks", lines))
    if raw.get("fused_unroll"):
        lines = ["nbytes,unroll,fused_allreduce_ms"]
        lines += [f"{r['nbytes']},{r['unroll']},{r['ms']:.5f}" for r in raw["fused_unroll"]]
        paths.append(_write_lines(stem, "fused-unroll", lines))
    return paths


def _write_lines(stem: Path, suffix: str, lines: list[str]) -> Path:
    p = stem.with_name(f"{stem.name}.{suffix}.csv")
    write_atomic(p, "\n".join(lines) + "\n")
    return p
