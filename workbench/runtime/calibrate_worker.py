"""One rank of `workbench calibrate`: microbenchmarks through PyTorch, no study programs.

    python -m workbench.runtime.calibrate_worker OUT.json   (P copies, started by the launcher)

Every rank runs the NCCL collectives (all_reduce, reduce_scatter, all_gather, f32, 64 KiB to
1 GiB); rank 0 alone also measures its GPU: HBM copy and triad bandwidth, the gap between
back-to-back tiny kernels, GEMM throughput, and the HBM bandwidth of an elementwise kernel
streaming k arrays (`streams`: a kernel shaped like the generated ones, nvcc + pycuda), with
torch's fused Adam beside it as a 7-stream cross-check. Times are CUDA-event medians after warm-up;
a collective's time is the slowest rank's median (the step waits for it). Rank 0 writes OUT.json.
torch is imported inside the functions: this module imports on a machine without GPUs.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

from workbench.runtime.baselines import event_times

COLLECTIVE_NBYTES = [2**k for k in range(16, 31)]  # 64 KiB .. 1 GiB, the NCCL table's range
HBM_NBYTES = 2**30  # far beyond the 50 MiB L2: streams from HBM
GEMM_N = 8192
# (inputs, outputs) of the k-array streaming kernels, ~1 GiB in all: k = 2, 3, 5, 7, 9 with one
# output, and k = 7, 9 with several (Adam reads 4 and writes 3 arrays).
STREAM_SHAPES = [(1, 1), (2, 1), (4, 1), (6, 1), (8, 1), (4, 3), (5, 4)]
STREAM_THREADS = 512  # as codegen.spec.THREADS; grid as the runtime's: min(work, 16 per SM)


def log(rank: int, msg: str) -> None:
    """A progress line (the launcher ends a rank that stays silent too long)."""
    print(f"[calibrate rank {rank}] {msg}", flush=True)


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
            med = torch.tensor([statistics.median(event_times(torch, fn, warmup, reps))],
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
    ms = statistics.median(event_times(torch, lambda: dst.copy_(src), warmup, reps))
    out["copy"] = {"nbytes": HBM_NBYTES, "ms": ms, "Bps": 2 * HBM_NBYTES / (ms * 1e-3)}
    # a = b + 0.5 c: two streams in, one out, like the elementwise kernels the model prices
    ms = statistics.median(event_times(torch, lambda: torch.add(src, c, alpha=0.5, out=dst),
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
    eager_ms = statistics.median(event_times(torch, burst, 1, 11))
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream(device=dev)
    with torch.cuda.stream(stream):
        burst()  # warm-up on the capture stream
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            burst()
    graph_ms = statistics.median(event_times(torch, graph.replay, 1, 11))
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
        ms = statistics.median(event_times(torch, lambda a=a, b=b: torch.matmul(a, b), 3,
                                            max(5, reps // 2)))
        out["gemm"][name] = {"n": GEMM_N, "ms": ms, "flops": 2 * GEMM_N**3 / (ms * 1e-3)}
        log(rank, f"gemm {name} {out['gemm'][name]['flops'] / 1e12:.1f} TFLOP/s")
    return out


def _streams_source(n_in: int, n_out: int) -> tuple[str, str]:
    """A grid-stride float4 kernel like the generated elementwise ones: n_in arrays read,
    n_out written, each element once (a weighted sum, so no load is dead)."""
    name = f"wb_cal_streams_i{n_in}_o{n_out}"
    params = [f"const float4* __restrict__ in{j}" for j in range(n_in)]
    params += [f"float4* __restrict__ out{j}" for j in range(n_out)]
    body = [f"    const float4 a{j} = in{j}[i];" for j in range(n_in)]
    for c in "xyzw":
        terms = " + ".join(f"{1.0 / (j + 1):.3f}f * a{j}.{c}" for j in range(n_in))
        body.append(f"    const float s{c} = {terms};")
    for j in range(n_out):
        f = f"{1.0 + j:.1f}f"
        body.append(f"    out{j}[i] = make_float4({f} * sx, {f} * sy, {f} * sz, {f} * sw);")
    src = (f'extern "C" __global__ void __launch_bounds__({STREAM_THREADS}) {name}(\n    '
           + ",\n    ".join(params + ["long long n4"]) + ") {\n"
           "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4;\n"
           "       i += (long long)gridDim.x * blockDim.x) {\n" + "\n".join(body) + "\n  }\n}\n")
    return name, src


def streams(torch, rank: int, warmup: int, reps: int) -> list[dict]:
    """HBM bandwidth of one elementwise kernel streaming k = n_in + n_out arrays of ~1 GiB / k
    each (bytes moved / time), for every shape in STREAM_SHAPES."""
    import numpy as np

    from codegen.render import include_dir
    from workbench.runtime.compiler import compile_cubin
    from workbench.runtime.executor import import_pycuda

    drv = import_pycuda()
    dev = torch.device("cuda", rank)
    torch.empty(1, device=dev)  # the primary context, shared with pycuda
    drv.init()
    ctx = drv.Device(rank).retain_primary_context()
    ctx.push()
    sm = torch.cuda.get_device_properties(dev).multi_processor_count
    rows = []
    try:
        for n_in, n_out in STREAM_SHAPES:
            k = n_in + n_out
            n4 = HBM_NBYTES // k // 16  # float4 vectors per array
            name, src = _streams_source(n_in, n_out)
            module = drv.module_from_file(str(compile_cubin(name, src, include_dir())))
            fn = module.get_function(name)
            arrays = [torch.randn(4 * n4, device=dev) for _ in range(k)]
            args = [np.uintp(a.data_ptr()) for a in arrays] + [np.int64(n4)]
            grid = max(1, min(-(-n4 // STREAM_THREADS), sm * 16))
            ms = statistics.median(event_times(
                torch, lambda fn=fn, args=args, grid=grid: fn(
                    *args, block=(STREAM_THREADS, 1, 1), grid=(grid, 1, 1)), warmup, reps))
            nbytes = 16 * n4 * k
            rows.append({"inputs": n_in, "outputs": n_out, "streams": k, "nbytes": nbytes,
                         "ms": ms, "Bps": nbytes / (ms * 1e-3)})
            log(rank, f"streams {n_in} in + {n_out} out: {rows[-1]['Bps'] / 1e12:.3f} TB/s")
            del arrays
            torch.cuda.empty_cache()
    finally:
        ctx.pop()
    return rows


def torch_adam(torch, rank: int, warmup: int, reps: int) -> dict:
    """torch.optim.Adam(fused=True).step on 2^28 f32 parameters: 7 streams (p, g, m, v read;
    p, m, v written); a cross-check of the k-stream curve, not used by the fit."""
    dev = torch.device("cuda", rank)
    n = 2**28
    p = torch.zeros(n, device=dev, requires_grad=True)
    p.grad = torch.randn(n, device=dev)
    opt = torch.optim.Adam([p], lr=1e-3, fused=True)
    ms = statistics.median(event_times(torch, opt.step, warmup, reps))
    nbytes = 7 * 4 * n
    out = {"numel": n, "streams": 7, "nbytes": nbytes, "ms": ms, "Bps": nbytes / (ms * 1e-3)}
    log(rank, f"torch fused Adam {out['Bps'] / 1e12:.3f} TB/s (7 streams)")
    del opt, p
    torch.cuda.empty_cache()
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
        # Each extra benchmark on its own: a failure is recorded, the rest of the raw file kept.
        for key, fn in (("streams", streams), ("torch_adam", torch_adam)):
            try:
                raw["device"][key] = fn(torch, rank, warmup, reps)
            except Exception as e:  # noqa: BLE001 - recorded in the raw file and logged
                raw["device"][f"{key}_error"] = f"{type(e).__name__}: {e}"
                log(rank, f"{key} failed: {type(e).__name__}: {e}")
        with open(out_path, "w") as f:
            json.dump(raw, f, indent=1)
        log(rank, f"wrote {out_path}")
    if P > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
