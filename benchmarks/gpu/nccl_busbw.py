"""nccl-tests' bus bandwidth of AllReduce, AllGather and ReduceScatter on this machine's GPUs,
beside the cost model's prediction for the matching preset (design note 38).

Each rank times back-to-back NCCL calls (torch.distributed, NCCL backend) with CUDA events
(5 warm-up, 20 timed, as nccl-tests does), for buffers of 16 MiB .. 4 GiB; busbw is nccl-tests'
(algbw x 2(n-1)/n for AllReduce, x (n-1)/n for the others). The model's figure is
`benchmarks/validation_nccl.py`'s: the preset's plan time without the host cost, NCCL_ALGO
honoured. Rank 0 prints one row per (collective, size) and writes them as JSON.

    python benchmarks/gpu/nccl_busbw.py --gpus 8 --preset dgx-h200 --out results.json

Device machines keep NVLink multicast off (NCCL_NVLS_ENABLE=0, benchmarks/gpu/env.sh), so
this measures the ring (and tree) figures of an NVSwitch node, not NVLS.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SIZES = [2**k for k in range(24, 33)]  # 16 MiB .. 4 GiB
KINDS = ("allreduce", "allgather", "reducescatter")


def _call(dist, kind: str, full, part) -> None:
    """One NCCL call: the whole buffer is AllReduce's, AllGather's output, ReduceScatter's
    input (nccl-tests' size)."""
    if kind == "allreduce":
        dist.all_reduce(full)
    elif kind == "allgather":
        dist.all_gather_into_tensor(full, part)
    else:
        dist.reduce_scatter_tensor(part, full)


def _rank(rank: int, P: int, port: int, queue) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=P)
    rows = []
    for kind in KINDS:
        for nbytes in SIZES:
            n = nbytes // 4
            full = torch.ones(n, device="cuda")
            part = torch.ones(n // P, device="cuda")

            for _ in range(5):
                _call(dist, kind, full, part)
            start, end = torch.cuda.Event(True), torch.cuda.Event(True)
            torch.cuda.synchronize()
            dist.barrier()
            start.record()
            for _ in range(20):
                _call(dist, kind, full, part)
            end.record()
            end.synchronize()
            t = start.elapsed_time(end) / 20 * 1e-3
            factor = 2 * (P - 1) / P if kind == "allreduce" else (P - 1) / P
            rows.append({"kind": kind, "nbytes": nbytes, "time_s": t,
                         "busbw_GBps": nbytes / t * factor / 1e9})
            del full, part
            torch.cuda.empty_cache()
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def _model(kind: str, nbytes: int, preset_name: str, gpus: int) -> tuple[float, str]:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "validation_nccl", ROOT / "benchmarks" / "validation_nccl.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["validation_nccl"] = mod
    spec.loader.exec_module(mod)
    from cost_model.hardware import preset

    cluster = preset(preset_name)
    if cluster.world_size != gpus:
        raise SystemExit(f"--gpus must match the preset's {cluster.world_size} GPUs, got {gpus}")
    algo = os.environ.get("NCCL_ALGO", "").lower() or None
    if algo is None and os.environ.get("NCCL_NVLS_ENABLE") == "0":
        # NVLS off: NCCL's choice among what is left (ring inside one node)
        import dataclasses
        cluster = dataclasses.replace(cluster, nvls=False)
    return mod.model_busbw_GBps(kind, nbytes, cluster, algo)


if __name__ == "__main__":
    import torch.multiprocessing as mp

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--preset", default="dgx-h200")
    parser.add_argument("--out", type=Path)
    a = parser.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, a.gpus, 29517, q)) for r in range(a.gpus)]
    for p in procs:
        p.start()
    measured = q.get(timeout=1800)
    for p in procs:
        p.join(timeout=120)
    for row in measured:
        model, plan = _model(row["kind"], row["nbytes"], a.preset, a.gpus)
        row.update(model_GBps=model, plan=plan,
                   error_pct=100 * (model - row["busbw_GBps"]) / row["busbw_GBps"])
        print(f"{row['kind']:>13} {row['nbytes'] / 2**20:>6.0f} MiB  measured "
              f"{row['busbw_GBps']:7.1f}  model {model:7.1f} ({plan})  "
              f"{row['error_pct']:+6.1f} %")
    if a.out:
        a.out.write_text(json.dumps(measured, indent=2))
    sys.exit(0)
