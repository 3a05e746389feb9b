"""One rank of `workbench calibrate`: microbenchmarks through PyTorch, no study programs.

    python -m workbench.runtime.calibrate_worker OUT.json   (P copies, started by the launcher)

Every rank runs the NCCL collectives (all_reduce, reduce_scatter, all_gather, f32, 64 KiB to
1 GiB); rank 0 alone also measures its GPU: HBM copy and triad bandwidth, the gap between
back-to-back tiny kernels, and GEMM throughput. Times are CUDA-event medians after warm-up;
a collective's time is the slowest rank's median (the step waits for it). Rank 0 writes OUT.json.
torch is imported inside the functions: this module imports on a machine without GPUs.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

COLLECTIVE_NBYTES = [2**k for k in range(16, 31)]  # 64 KiB .. 1 GiB, the NCCL table's range
HBM_NBYTES = 2**30  # far beyond the 50 MiB L2: streams from HBM
GEMM_N = 8192


def log(rank: int, msg: str) -> None:
    """A progress line (the launcher ends a rank that stays silent too long)."""
    print(f"[calibrate rank {rank}] {msg}", flush=True)


def _event_times(torch, fn, warmup: int, reps: int) -> list[float]:
    """Per-repetition times (ms) of fn() between CUDA events, after warm-up."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return times


def collectives(torch, dist, rank: int, P: int, warmup: int, reps: int) -> list[dict]:
    """One row per size: nbytes and each collective's slowest-rank median time (ms)."""
    dev = torch.device("cuda", rank)
    big = torch.randn(COLLECTIVE_NBYTES[-1] // 4, device=dev)
    part = torch.empty(COLLECTIVE_NBYTES[-1] // 4 // P, device=dev)
    rows = []
    for nbytes in COLLECTIVE_NBYTES:
        n = nbytes // 4
        full, piece = big[:n], part[:n // P]
        ops = {"allreduce": lambda f=full: dist.all_reduce(f),
               "reducescatter": lambda f=full, p=piece: dist.reduce_scatter_tensor(p, f),
               "allgather": lambda f=full, p=piece: dist.all_gather_into_tensor(f, p)}
        row = {"nbytes": nbytes}
        for kind, fn in ops.items():
            dist.barrier()
            med = torch.tensor([statistics.median(_event_times(torch, fn, warmup, reps))],
                               device=dev)
            dist.all_reduce(med, op=dist.ReduceOp.MAX)
            row[f"{kind}_ms"] = float(med.item())
        rows.append(row)
        log(rank, f"collectives {nbytes} B: " + ", ".join(
            f"{k} {v:.4f} ms" for k, v in row.items() if k != "nbytes"))
    return rows


def device(torch, rank: int, warmup: int, reps: int) -> dict:
    """HBM copy/triad bandwidth, back-to-back launch gap and GEMM FLOP/s of this GPU."""
    dev = torch.device("cuda", rank)
    props = torch.cuda.get_device_properties(dev)
    out = {"name": props.name, "sm_count": props.multi_processor_count,
           "hbm_capacity_bytes": props.total_memory}
    n = HBM_NBYTES // 4
    src, dst, c = (torch.randn(n, device=dev) for _ in range(3))
    ms = statistics.median(_event_times(torch, lambda: dst.copy_(src), warmup, reps))
    out["copy"] = {"nbytes": HBM_NBYTES, "ms": ms, "Bps": 2 * HBM_NBYTES / (ms * 1e-3)}
    # a = b + 0.5 c: two streams in, one out, like the elementwise kernels the model prices
    ms = statistics.median(_event_times(torch, lambda: torch.add(src, c, alpha=0.5, out=dst),
                                        warmup, reps))
    out["triad"] = {"nbytes": HBM_NBYTES, "ms": ms, "Bps": 3 * HBM_NBYTES / (ms * 1e-3)}
    log(rank, f"hbm copy {out['copy']['Bps'] / 1e12:.3f} TB/s, "
              f"triad {out['triad']['Bps'] / 1e12:.3f} TB/s")

    # Back-to-back tiny kernels from Python, as the runtime launches its kernels (eager, one
    # stream): what a kernel costs beyond its work. The graph replay is the GPU-side floor.
    tiny = torch.zeros(1, device=dev)
    kernels = 2000
    def burst():
        for _ in range(kernels):
            tiny.add_(1.0)
    eager_ms = statistics.median(_event_times(torch, burst, 1, 11))
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream(device=dev)
    with torch.cuda.stream(stream):
        burst()  # warm-up on the capture stream
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            burst()
    graph_ms = statistics.median(_event_times(torch, graph.replay, 1, 11))
    out["launch"] = {"kernels": kernels, "eager_ms": eager_ms, "graph_ms": graph_ms,
                     "eager_s_per_kernel": eager_ms * 1e-3 / kernels,
                     "graph_s_per_kernel": graph_ms * 1e-3 / kernels}
    log(rank, f"launch gap eager {out['launch']['eager_s_per_kernel'] * 1e6:.2f} us, "
              f"graph {out['launch']['graph_s_per_kernel'] * 1e6:.2f} us")

    out["gemm"] = {}
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 means the CUDA cores' f32 rate
    for name, dtype in (("f16", torch.float16), ("bf16", torch.bfloat16), ("f32", torch.float32)):
        a = torch.randn(GEMM_N, GEMM_N, device=dev).to(dtype)  # random, never zeros
        b = torch.randn(GEMM_N, GEMM_N, device=dev).to(dtype)
        ms = statistics.median(_event_times(torch, lambda a=a, b=b: torch.matmul(a, b), 3,
                                            max(5, reps // 2)))
        out["gemm"][name] = {"n": GEMM_N, "ms": ms, "flops": 2 * GEMM_N**3 / (ms * 1e-3)}
        log(rank, f"gemm {name} {out['gemm'][name]['flops'] / 1e12:.1f} TFLOP/s")
    return out


def main(out_path: str, warmup: int = 5, reps: int = 25) -> int:
    """Run this rank's share; rank 0 writes the raw measurements to out_path."""
    import torch
    import torch.distributed as dist

    rank, P = int(os.environ["WB_RANK"]), int(os.environ["WB_WORLD_SIZE"])
    torch.cuda.set_device(rank)
    raw: dict = {"gpus": P, "nccl_version": ".".join(map(str, torch.cuda.nccl.version())),
                 "torch_version": torch.__version__, "warmup": warmup, "reps": reps,
                 "timing": "CUDA events, median of reps; collectives: slowest rank's median"}
    if P > 1:
        dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
        log(rank, "NCCL up")
        raw["collectives"] = collectives(torch, dist, rank, P, warmup, reps)
    else:
        raw["collectives"] = []
    if rank == 0:
        raw["device"] = device(torch, rank, warmup, reps)
        with open(out_path, "w") as f:
            json.dump(raw, f, indent=1)
        log(rank, f"wrote {out_path}")
    if P > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
