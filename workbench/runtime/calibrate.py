"""The GPU half of `workbench calibrate`: run the microbenchmarks on P GPUs, write the raw file.

Two jobs, each one process per GPU through the launcher (so a dead or hung rank ends the run):
the PyTorch microbenchmarks (workbench/runtime/calibrate_worker.py: NCCL collectives, HBM,
launch gap, GEMM), then the workbench's own fused AllReduce kernel with no computation
(benchmarks/gpu/allreduce.py, schedule `fused`) across sizes, for the peer load/store bandwidth.
No study program runs: calibration never sees the study measurements.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from workbench.errors import RuntimeFault

ALLREDUCE_SPEC = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "allreduce.py"
FUSED_N = [2**k for k in (20, 22, 24, 26, 28)]  # f32 elements: 4 MiB .. 1 GiB buffers


def measure(P: int, raw_path: Path, echo=None, hang_s: float = 120.0) -> dict:
    """Measure on P GPUs of this machine and write the raw JSON to raw_path."""
    import importlib.util

    from workbench.runtime.cli import _gpu_count, run_job
    from workbench.runtime.launcher import launch, python_argv

    present = _gpu_count()
    if present < P:
        raise RuntimeFault(f"--gpus must not exceed the GPUs present, got --gpus {P} on a "
                           f"machine with {present}")
    with tempfile.TemporaryDirectory(prefix="wb-cal-") as tmp:
        out = Path(tmp) / "raw.json"
        launch(P, python_argv("workbench.runtime.calibrate_worker", str(out)), hang_s=hang_s,
               echo=echo)
        raw = json.loads(out.read_text())
    raw["fused"] = []
    if P > 1:
        if importlib.util.find_spec("pycuda") is None:
            raise RuntimeFault("pycuda must be installed for calibrate's fused-kernel benchmark, "
                               "got none; install the pycuda wheel (see benchmarks/gpu/run_all.sh)")
        results = run_job([str(ALLREDUCE_SPEC)], P, [{"N": n} for n in FUSED_N], "fused", 30, 5,
                          False, hang_s, echo)
        for r in results["records"]:
            if r["schedule"] == "fused" and r.get("median_ms"):
                if str(r.get("check", "")).startswith("MISMATCH"):
                    raise RuntimeFault(f"the fused AllReduce kernel must match the reference, "
                                       f"got {r['check']} at N={r['sizes']['N']}")
                raw["fused"].append({"nbytes": 4 * int(r["sizes"]["N"]),
                                     "ms": float(r["median_ms"]), "check": r.get("check")})
        raw["fused_meta"] = {"program": "benchmarks/gpu/allreduce.py", "schedule": "fused",
                             "dtype": "f32", **results.get("meta", {})}
    raw_path = Path(raw_path)
    raw_path.parent.mkdir(parents=True, exist_ok=True)
    raw_path.write_text(json.dumps(raw, indent=1, default=str) + "\n")
    return raw


def write_csvs(raw: dict, stem: Path) -> list[Path]:
    """The raw collective and fused tables as CSVs beside the profile (for people and for
    `python -m cost_model.fit`-style tables)."""
    paths = []
    if raw.get("collectives"):
        p = stem.with_name(stem.name + ".nccl.csv")
        lines = [f"# workbench calibrate on {raw['gpus']} GPUs, NCCL {raw.get('nccl_version')}, "
                 "f32, CUDA-event median (slowest rank)",
                 "nbytes,allreduce_ms,reducescatter_ms,allgather_ms"]
        lines += [f"{r['nbytes']},{r['allreduce_ms']:.5f},{r['reducescatter_ms']:.5f},"
                  f"{r['allgather_ms']:.5f}" for r in raw["collectives"]]
        p.write_text("\n".join(lines) + "\n")
        paths.append(p)
    if raw.get("fused"):
        p = stem.with_name(stem.name + ".fused.csv")
        lines = ["nbytes,fused_allreduce_ms"]
        lines += [f"{r['nbytes']},{r['ms']:.5f}" for r in raw["fused"]]
        p.write_text("\n".join(lines) + "\n")
        paths.append(p)
    return paths
