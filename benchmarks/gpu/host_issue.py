"""How much host time one NCCL call costs, through torch.distributed and through nccl4py (the
runtime's path since GPU run 8), and what a tiny collective and send/recv take between CUDA
events as calibration times them. Answers whether the cost model's per-call host overhead,
fitted on torch.distributed timings, also prices the runtime's nccl4py calls.

    python3 benchmarks/gpu/host_issue.py OUT.json     (on a machine with >= 2 GPUs)
"""

import json
import os
import statistics
import sys
import time


def rank_main(rank: int, P: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from workbench.runtime.baselines import event_times
    from workbench.runtime.comm import Nccl4py, TorchHost
    from workbench.runtime.executor import torch_view

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=P, device_id=dev)
    nccl = Nccl4py(TorchHost(dist, rank, rank), rank, P,
                   lambda ptr, n, dt: torch_view(ptr, (n,), dt, rank))
    stream = torch.cuda.current_stream().cuda_stream
    buf = torch.zeros(2**20, device=dev)
    peer = (rank + P // 2) % P
    sender = rank < P // 2

    def torch_ar(n):
        return lambda: dist.all_reduce(buf[:n])

    def nccl_ar(n):
        return lambda: nccl.collective("all_reduce", "add", buf.data_ptr(), buf.data_ptr(),
                                       n, "f32", stream=stream)

    def torch_p2p(n):
        return (lambda: dist.send(buf[:n], peer)) if sender else (
            lambda: dist.recv(buf[:n], peer))

    def nccl_p2p(n):
        return lambda: nccl.p2p("send" if sender else "recv", buf.data_ptr(), n, "f32", peer,
                                stream)

    def host_s(fn, calls=200):
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        return (t1 - t0) / calls

    res = {}
    for name, make in (("torch_allreduce", torch_ar), ("nccl4py_allreduce", nccl_ar),
                       ("torch_sendrecv", torch_p2p), ("nccl4py_sendrecv", nccl_p2p)):
        for n in (1, 2**18):
            fn = make(n)
            h = host_s(fn)
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
