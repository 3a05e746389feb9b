"""How much host time one NCCL call costs, through torch.distributed and through nccl4py (the
runtime's path since GPU run 8), and what the call takes between CUDA events as calibration
times it, at 4 B and 1 MiB. Answers whether the cost model's per-call host overhead, fitted
on torch.distributed timings, also prices the runtime's nccl4py calls. The calls and the host
timing are calibration's (`workbench.runtime.calibrate_worker`), which now measures the 4-byte
host costs itself (`host_issue`); this probe adds the event times and a second size.

    python3 benchmarks/gpu/host_issue.py OUT.json     (on a machine with >= 2 GPUs)
"""

import json
import os
import statistics
import sys


def rank_main(rank: int, P: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from workbench.runtime.baselines import event_times
    from workbench.runtime.calibrate_worker import host_issue_s, nccl_calls, runtime_nccl

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=P, device_id=dev)
    nccl = runtime_nccl(torch, dist, rank, P)
    buf = torch.zeros(2**20, device=dev)
    res = {}
    for n in (1, 2**18):
        for name, fn in nccl_calls(torch, dist, rank, P, buf, n, nccl).items():
            h = host_issue_s(torch, dist, fn)
            dist.barrier()
            ev = statistics.median(event_times(torch, fn, 5, 50)) * 1e-3
            row = torch.tensor([h, ev], device=dev, dtype=torch.float64)
            dist.all_reduce(row, op=dist.ReduceOp.MAX)
            res[f"{name}_{4 * n}B"] = {"host_issue_s": row[0].item(), "event_s": row[1].item()}
            if rank == 0:
                print(f"{name} {4 * n} B: host issue {row[0].item() * 1e6:.1f} us, "
                      f"between events {row[1].item() * 1e6:.1f} us", flush=True)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(res, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    import torch
    import torch.multiprocessing as mp

    P = torch.cuda.device_count()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    mp.spawn(_entry, args=(P, sys.argv[1]), nprocs=P)


def _entry(rank, P, out):
    rank_main(rank, P, out)


if __name__ == "__main__":
    main()
