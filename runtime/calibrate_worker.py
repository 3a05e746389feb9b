"""One rank of `workbench calibrate`: microbenchmarks through PyTorch, no study programs.

    python -m runtime.calibrate_worker OUT.json [--passes K]   (P copies, by the launcher)
    python -m runtime.calibrate_worker --fused-blocks OUT.json

Every rank runs the NCCL collectives (all_reduce, reduce_scatter, all_gather, 64 KiB to 1 GiB)
in f32, f16 and bf16 (`collectives_by_dtype`), interleaved, and NCCL send/recv from each rank of
the first half of the GPUs to the same rank of the second half (`p2p`: a pipeline's Send
between two stages), and the host cost of one NCCL call through torch.distributed and through
nccl4py (`host_issue`), and the copy engines' peer-to-peer bandwidth: every rank pushing a
buffer into every other rank's CUDA-IPC-mapped buffer by cuMemcpyDtoDAsync at once
(`copy_engines`, any P > 1); rank 0 alone also measures its GPU: HBM copy and triad
bandwidth, the gap between back-to-back tiny kernels, GEMM throughput, the HBM bandwidth of an
elementwise kernel streaming k arrays (`streams`: a kernel shaped like the generated ones,
nvcc + pycuda), the same for kernels mixing f16 and f32 arrays as the mixed optimizers do
(`streams_f16`), and torch's fused Adam beside them as a 7-stream cross-check.

`--fused-blocks` is a second job (calibrate.py starts it after the fused-kernel sizes): the
workbench's fused AllReduce kernel (benchmarks/gpu/allreduce.py, schedule fused, f32) at
256 MiB, launched with grids of sm_count / 32 .. 2 x sm_count blocks, each checked exactly,
for its bandwidth against blocks (`fused_blocks`). NCCL's own SM sensitivity is not measured:
its CTA count is a per-communicator setting (NCCL_MIN/MAX_CTAS, read once per process), and
the cost model gives NCCL its channels' SMs whatever runs beside it.

Times are CUDA-event medians after warm-up; a collective's time is the slowest rank's median
(the step waits for it). Rank 0 writes OUT.json. torch is imported inside the functions: this
module imports on a machine without GPUs.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

from codegen.lower import lower
from codegen.render import include_dir
from cost_model.calibration import (
    COPY_ENGINE_NBYTES,
    F16_STREAM_SHAPES,
    FUSED_BLOCKS_NBYTES,
    STREAM_SHAPES,
)
from cost_model.hardware import NCCL_DTYPES
from runtime.baselines import event_times
from runtime.comm import Nccl4py, TorchHost
from runtime.compiler import compile_cubin
from runtime.executor import PlanRun
from runtime.gpu import Gpu, import_pycuda, torch_view
from workbench.errors import RuntimeFault
from workbench.loader import load

COLLECTIVE_NBYTES = [2**k for k in range(16, 31)]  # 64 KiB .. 1 GiB, the NCCL table's range
HBM_NBYTES = 2**30  # far beyond the 50 MiB L2: streams from HBM
GEMM_N = 8192
# STREAM_SHAPES: (inputs, outputs) of the k-array streaming kernels, ~1 GiB in all: k = 2, 3,
# 5, 7, 9 with one output, and k = 7, 9 with several (Adam reads 4 and writes 3 arrays).
# F16_STREAM_SHAPES: (f32 in, f16 in, f32 out, f16 out) of the mixed ones (cost_model.calibration).
STREAM_THREADS = 512  # as codegen.spec.THREADS; grid as the runtime's: min(work, 16 per SM)
# Elements per thread per iteration of a kernel with 2-byte arrays: 16 // 2, as codegen's vec.
F16_VEC = 8
ALLREDUCE_SPEC = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "allreduce.py"
_TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def log(rank: int, msg: str) -> None:
    """A progress line (the launcher ends a rank that stays silent too long)."""
    print(f"[calibrate rank {rank}] {msg}", flush=True)


def collectives(torch, dist, rank: int, P: int, warmup: int, reps: int,
                dtypes=("f32", *NCCL_DTYPES), passes: int = 1) -> tuple[dict, dict]:
    """({dtype: rows}, {dtype: error}): one row per size with nbytes and each collective's
    slowest-rank median time (ms), on buffers of each dtype (the same byte sizes in every
    dtype); a dtype whose buffers cannot be made is left out with its error. With `passes`
    > 1 the whole sweep runs that many times and each point is the median of its passes:
    single sweeps on 2x H200 (calibration runs 4 and 5) moved latency-bound points by 20-25 %.

    The dtypes are interleaved, size by size, in an order that rotates from one size to the
    next: in the second 2x H200 calibration, where each dtype had its own sweep, the f16 and
    bf16 sweeps (run after the f32 one) took half the time at 64 KiB even for all_gather,
    which does no arithmetic; interleaved, such drift cannot pass for a dtype effect."""
    dev = torch.device("cuda", rank)
    bufs, errors = {}, {}
    for dtype in dtypes:
        try:
            tdtype = getattr(torch, _TORCH_DTYPES[dtype])
            item = torch.empty(0, dtype=tdtype).element_size()
            bufs[dtype] = (item, torch.randn(COLLECTIVE_NBYTES[-1] // item, device=dev,
                                             dtype=tdtype),
                           torch.empty(COLLECTIVE_NBYTES[-1] // item // P, device=dev,
                                       dtype=tdtype))
        except Exception as e:  # noqa: BLE001 - recorded in the raw file and logged
            errors[dtype] = f"{type(e).__name__}: {e}"
            log(rank, f"collectives {dtype} left out: {errors[dtype]}")
    order = list(bufs)
    samples = {dtype: {n: {} for n in COLLECTIVE_NBYTES} for dtype in order}
    for i, nbytes in enumerate(COLLECTIVE_NBYTES * passes):
        for dtype in order[i % len(order):] + order[:i % len(order)]:
            item, big, part = bufs[dtype]
            n = nbytes // item
            full, piece = big[:n], part[:n // P]
            ops = {"allreduce": lambda f=full: dist.all_reduce(f),
                   "reducescatter": lambda f=full, p=piece: dist.reduce_scatter_tensor(p, f),
                   "allgather": lambda f=full, p=piece: dist.all_gather_into_tensor(f, p)}
            times = samples[dtype][nbytes]
            for kind, fn in ops.items():
                times.setdefault(f"{kind}_ms", []).append(_slowest_median(
                    torch, dist, dev, fn, warmup, reps))
            log(rank, f"collectives {dtype} {nbytes} B (pass {i // len(COLLECTIVE_NBYTES) + 1}"
                f"): " + ", ".join(f"{k} {v[-1]:.4f} ms" for k, v in times.items()))
    del bufs
    torch.cuda.empty_cache()
    return {dtype: _median_rows(by_size) for dtype, by_size in samples.items()}, errors


def _slowest_median(torch, dist, dev, fn, warmup: int, reps: int) -> float:
    """The slowest rank's median time (ms) of fn() between CUDA events (every rank calls)."""
    dist.barrier()
    med = torch.tensor([statistics.median(event_times(torch, fn, warmup, reps))], device=dev)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    return float(med.item())


def _median_rows(by_size: dict) -> list[dict]:
    """{nbytes: {key: [ms per pass]}} -> rows of nbytes and each key's median over passes."""
    return [{"nbytes": n, **{k: statistics.median(v) for k, v in times.items()}}
            for n, times in by_size.items()]


def p2p(torch, dist, rank: int, P: int, warmup: int, reps: int, nccl=None,
        passes: int = 1) -> list[dict]:
    """One row per size (64 KiB .. 1 GiB) with the time (ms) of an NCCL send/recv from each
    rank of the first half of the GPUs to the same rank of the second half, all pairs at
    once: the pipeline's Send between stages (stage k's rank r is GPU k * P + r). Through
    torch.distributed (`sendrecv_ms`) and, where `nccl` (the runtime's nccl4py communicator)
    is given, through it as the runtime sends (`nccl4py_sendrecv_ms`), the two interleaved
    size by size. A time is the slowest rank's median, senders and receivers both (the
    transfer ends when both do); with `passes` > 1, the median of that many sweeps."""
    dev = torch.device("cuda", rank)
    peer, sender = halves_peer(rank, P)
    buf = torch.empty(COLLECTIVE_NBYTES[-1], device=dev, dtype=torch.uint8)
    stream, ptr = torch.cuda.current_stream().cuda_stream, buf.data_ptr()
    samples = {n: {} for n in COLLECTIVE_NBYTES}
    for nbytes in COLLECTIVE_NBYTES * passes:
        piece = buf[:nbytes]
        paths = {"sendrecv_ms": (lambda t=piece: dist.send(t, peer)) if sender
                 else (lambda t=piece: dist.recv(t, peer))}
        if nccl is not None:
            paths["nccl4py_sendrecv_ms"] = lambda n=nbytes: nccl.p2p(
                "send" if sender else "recv", ptr, n // 4, "f32", peer, stream)
        times = samples[nbytes]
        for key, fn in paths.items():
            times.setdefault(key, []).append(_slowest_median(torch, dist, dev, fn, warmup,
                                                             reps))
        log(rank, f"p2p {nbytes} B: " + ", ".join(f"{k} {v[-1]:.4f} ms"
                                                 for k, v in times.items()))
    del buf
    torch.cuda.empty_cache()
    return _median_rows(samples)


def runtime_nccl(torch, dist, rank: int, P: int):
    """The runtime's NCCL communicator (nccl4py, runtime.comm) beside
    torch.distributed's, or None where nccl4py does not import (logged)."""

    try:
        return Nccl4py(TorchHost(dist, rank, rank), rank, P,
                       lambda ptr, n, dt: torch_view(ptr, (n,), dt, rank))
    except Exception as e:  # noqa: BLE001 - the torch paths are still measured
        log(rank, f"nccl4py left out: {type(e).__name__}: {e}")
        return None


def halves_peer(rank: int, P: int) -> tuple[int, bool]:
    """(peer, sender) of a send/recv between the halves of P GPUs: rank r < P/2 sends to
    r + P/2 (stage k's rank r is GPU k * P/2 + r in a two-stage pipeline)."""
    half = P // 2
    return (rank + half, True) if rank < half else (rank - half, False)


def nccl_calls(torch, dist, rank: int, P: int, buf, n: int, nccl=None) -> dict:
    """The NCCL calls whose host cost calibration measures, on the first n f32 elements of
    `buf`: an all_reduce and a send/recv between the halves, through torch.distributed and,
    where `nccl` (the runtime's nccl4py communicator) is given, through it."""
    peer, sender = halves_peer(rank, P)
    piece = buf[:n]
    calls = {"torch_allreduce": lambda: dist.all_reduce(piece),
             "torch_sendrecv": (lambda: dist.send(piece, peer)) if sender
             else (lambda: dist.recv(piece, peer))}
    if nccl is not None:
        stream, ptr = torch.cuda.current_stream().cuda_stream, buf.data_ptr()
        calls["nccl4py_allreduce"] = lambda: nccl.collective(
            "all_reduce", "add", ptr, ptr, n, "f32", stream=stream)
        calls["nccl4py_sendrecv"] = lambda: nccl.p2p(
            "send" if sender else "recv", ptr, n, "f32", peer, stream)
    return calls


def host_issue_s(torch, dist, fn, calls: int = 200) -> float:
    """This rank's host seconds per call of fn(), issued back to back without waiting for
    the GPU (after 10 warm-up calls and a barrier)."""
    import time

    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    per_call = (time.perf_counter() - t0) / calls
    torch.cuda.synchronize()
    return per_call


def host_issue(torch, dist, rank: int, P: int, nccl=None, calls: int = 200) -> dict:
    """Host time of one NCCL call (4-byte all_reduce; send/recv between the halves), issued
    back to back without waiting for the GPU, through torch.distributed and through `nccl`
    (the runtime's nccl4py communicator; left out where None): seconds per call, the slowest
    rank's. The NCCL fit's host overhead is torch's (its tables are timed through
    torch.distributed); the workbench's own programs pay nccl4py's."""
    dev = torch.device("cuda", rank)
    buf = torch.zeros(1, device=dev)
    out = {}
    for name, fn in nccl_calls(torch, dist, rank, P, buf, 1, nccl).items():
        per_call = torch.tensor([host_issue_s(torch, dist, fn, calls)], device=dev,
                                dtype=torch.float64)
        dist.all_reduce(per_call, op=dist.ReduceOp.MAX)
        out[f"{name}_s"] = float(per_call.item())
        log(rank, f"host issue {name}: {out[f'{name}_s'] * 1e6:.1f} us per call")
    return out


def copy_slot(sender: int, receiver: int) -> int:
    """The slot of `receiver`'s destination buffer that `sender` pushes into: the P - 1 other
    ranks in rank order (a rank never pushes to itself, so it has no slot of its own)."""
    return sender - (sender > receiver)


def copy_engines(torch, dist, rank: int, P: int, warmup: int, reps: int) -> list[dict]:
    """The copy engines' peer-to-peer bandwidth (`copy_engine_pushes`) on the primary context
    that torch and NCCL use, through pycuda (CUDA IPC and cuMemcpyDtoDAsync, as the runtime
    maps and moves peer buffers)."""
    with _Kernels(torch, rank) as kern:
        return copy_engine_pushes(kern.drv, dist, rank, P, warmup, reps)


def copy_engine_pushes(drv, dist, rank: int, P: int, warmup: int, reps: int,
                       sizes=COPY_ENGINE_NBYTES) -> list[dict]:
    """One row per size n (bytes per peer, COPY_ENGINE_NBYTES): every rank pushes n bytes of
    its source into its slot of each other rank's destination at once, by copy engines
    (drv.memcpy_dtod_async into the peer's buffer mapped through CUDA IPC, one stream per
    peer), so every link direction is busy, as in a fused collective moved by copy engines.

    Each repetition starts after a barrier (every rank pushes at the same time) and is timed
    with CUDA events from a start on one stream, which the peer streams wait for, to an end
    after every peer's copy. A row gives nbytes, peers (P - 1), the slowest rank's median
    time (ms) and Bps = peers * nbytes / time: bytes per GPU per direction (each GPU sends
    and receives peers * nbytes). After each size every rank checks that the first and last
    word of each slot hold its sender's fill (rank + 1), so a time is of bytes that landed
    where they should (`check`); a mismatch anywhere raises on every rank alike.

    The same pattern as the link probe's copy engines both ways at once (2x H200, GPU run
    11, studies/results/gpu/h200x2-run11-link: 389-392 GB/s per direction); the section takes
    well under a second."""

    peers = [q for q in range(P) if q != rank]
    big = max(sizes)
    src, dst = drv.mem_alloc(big), drv.mem_alloc(big * len(peers))
    mapped: dict[int, object] = {}
    try:
        drv.memset_d32(src, rank + 1, big // 4)  # the fill that names the sender
        drv.Context.synchronize()
        handles: list = [None] * P
        dist.all_gather_object(handles, bytes(drv.mem_get_ipc_handle(int(dst))))
        for q in peers:
            mapped[q] = drv.IPCMemoryHandle(bytearray(handles[q]),
                                            drv.ipc_mem_flags.LAZY_ENABLE_PEER_ACCESS)
        main, streams = drv.Stream(), {q: drv.Stream() for q in peers}
        start, end = drv.Event(), drv.Event()
        done = {q: drv.Event() for q in peers}
        rows = []
        for n in sizes:
            def push(n=n) -> float:
                """One push of n bytes to every peer at once; its time (ms)."""
                start.record(main)
                for q in peers:
                    streams[q].wait_for_event(start)
                    drv.memcpy_dtod_async(int(mapped[q]) + copy_slot(rank, q) * big, src, n,
                                          streams[q])
                    done[q].record(streams[q])
                    main.wait_for_event(done[q])
                end.record(main)
                end.synchronize()
                return end.time_since(start)

            # zero the slots, so that the check below sees this size's bytes; the barrier
            # before the first push keeps every peer from pushing before this is done
            drv.memset_d32(dst, 0, big * len(peers) // 4)
            drv.Context.synchronize()
            times = []
            for i in range(warmup + reps):
                dist.barrier()
                ms = push()
                if i >= warmup:
                    times.append(ms)
            dist.barrier()  # every rank's pushes have ended: read what landed
            wrong = []
            for q in peers:
                base = int(dst) + copy_slot(q, rank) * big
                words = [_read_u32(drv, base), _read_u32(drv, base + n - 4)]
                if words != [q + 1, q + 1]:
                    wrong.append(f"rank {rank} from {q}: first and last word {words}, want "
                                 f"{q + 1}")
            medians: list = [None] * P
            dist.all_gather_object(medians, (statistics.median(times), wrong))
            bad = [w for _, ws in medians for w in ws]
            if bad:
                raise RuntimeFault(f"copy-engine pushes of {n} bytes must land in every "
                                   f"peer's slot, got {'; '.join(bad)}")
            ms = max(m for m, _ in medians)  # the slowest rank's median
            rows.append({"nbytes": n, "peers": len(peers), "ms": ms,
                         "Bps": len(peers) * n / (ms * 1e-3), "check": "ok"})
            log(rank, f"copy engines {n} B to each of {len(peers)} peer(s): {ms:.4f} ms, "
                      f"{rows[-1]['Bps'] / 1e9:.1f} GB/s per direction")
        drv.Context.synchronize()
        for h in mapped.values():
            h.close()
        mapped = {}
        dist.barrier()  # no rank frees its destination while a peer still maps it
        return rows
    finally:
        for h in mapped.values():  # after a failure: this rank's mappings, then its buffers
            h.close()
        src.free()
        dst.free()


def _read_u32(drv, ptr: int) -> int:
    """The 32-bit word at device address `ptr`."""
    import numpy as np

    word = np.zeros(1, dtype=np.uint32)
    drv.memcpy_dtoh(word, ptr)
    return int(word[0])


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


class _Kernels:
    """pycuda on torch's primary context of this rank's GPU, for the hand-written stream
    kernels: compile (nvcc, through the runtime's cache) and time one kernel launch."""

    def __init__(self, torch, rank: int):

        self.torch, self.drv = torch, import_pycuda()
        self.dev = torch.device("cuda", rank)
        torch.empty(1, device=self.dev)  # the primary context, shared with pycuda
        self.drv.init()
        self.ctx = self.drv.Device(rank).retain_primary_context()
        self.sm = torch.cuda.get_device_properties(self.dev).multi_processor_count

    def __enter__(self):
        self.ctx.push()
        return self

    def __exit__(self, *exc):
        self.ctx.pop()

    def module(self, name: str, src: str):
        """The loaded module of `src` (cache key `name`)."""

        return self.drv.module_from_file(str(compile_cubin(name, src, include_dir())))

    def time_ms(self, fn, arrays, count: int, per_thread: int, warmup: int, reps: int) -> float:
        """Median time of fn(*arrays, count) on a grid as the runtime's: enough blocks of
        STREAM_THREADS for `count` / `per_thread` iterations, at most 16 per SM."""
        import numpy as np

        args = [np.uintp(a.data_ptr()) for a in arrays] + [np.int64(count)]
        grid = max(1, min(-(-count // (per_thread * STREAM_THREADS)), self.sm * 16))
        return statistics.median(event_times(
            self.torch, lambda: fn(*args, block=(STREAM_THREADS, 1, 1), grid=(grid, 1, 1)),
            warmup, reps))


def streams(torch, rank: int, warmup: int, reps: int) -> list[dict]:
    """HBM bandwidth of one elementwise kernel streaming k = n_in + n_out arrays of ~1 GiB / k
    each (bytes moved / time), for every shape in STREAM_SHAPES."""
    rows = []
    with _Kernels(torch, rank) as kern:
        for n_in, n_out in STREAM_SHAPES:
            k = n_in + n_out
            n4 = HBM_NBYTES // k // 16  # float4 vectors per array
            name, src = _streams_source(n_in, n_out)
            fn = kern.module(name, src).get_function(name)
            arrays = [torch.randn(4 * n4, device=kern.dev) for _ in range(k)]
            ms = kern.time_ms(fn, arrays, n4, 1, warmup, reps)
            nbytes = 16 * n4 * k
            rows.append({"inputs": n_in, "outputs": n_out, "streams": k, "nbytes": nbytes,
                         "ms": ms, "Bps": nbytes / (ms * 1e-3)})
            log(rank, f"streams {n_in} in + {n_out} out: {rows[-1]['Bps'] / 1e12:.3f} TB/s")
            del arrays
            torch.cuda.empty_cache()
    return rows


def _streams_f16_source(shapes) -> tuple[str, dict]:
    """One CUDA source with a kernel per mixed shape (f32 in, f16 in, f32 out, f16 out), as
    codegen renders a kernel with 2-byte arrays: F16_VEC elements per thread per iteration
    through wb::load_vec / wb::store_vec (16-byte f16 loads, two 16-byte f32 loads), a
    weighted sum in f32 (no load is dead), every output written. Returns (source, shape ->
    kernel name)."""
    names, kernels = {}, []
    V = F16_VEC
    for shape in shapes:
        a, b, c, d = shape
        name = f"wb_cal_s16_{a}_{b}_{c}_{d}"
        names[shape] = name
        ins = [f"x{j}" for j in range(a)] + [f"h{j}" for j in range(b)]
        params = [f"const float* __restrict__ x{j}" for j in range(a)]
        params += [f"const __half* __restrict__ h{j}" for j in range(b)]
        params += [f"float* __restrict__ y{j}" for j in range(c)]
        params += [f"__half* __restrict__ k{j}" for j in range(d)]
        body = [f"    float s[{V}] = {{}};"]
        for j, arr in enumerate(ins):
            body.append(f"    {{ float t[{V}]; wb::load_vec<{V}>({arr} + i, t);")
            body.append(f"      for (int q = 0; q < {V}; ++q) s[q] += {1.0 / (j + 1):.3f}f "
                        f"* t[q]; }}")
        for j, arr in enumerate([f"y{j}" for j in range(c)] + [f"k{j}" for j in range(d)]):
            body.append(f"    {{ float o[{V}]; for (int q = 0; q < {V}; ++q) o[q] = "
                        f"{1.0 + j:.1f}f * s[q]; wb::store_vec<{V}>({arr} + i, o); }}")
        kernels.append(
            f'extern "C" __global__ void __launch_bounds__({STREAM_THREADS}) {name}(\n    '
            + ",\n    ".join(params + ["long long n"]) + ") {\n"
            f"  for (long long i = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * {V}; "
            f"i < n;\n       i += (long long)gridDim.x * blockDim.x * {V}) {{\n"
            + "\n".join(body) + "\n  }\n}\n")
    return '#include "wb_vec.cuh"\n\n' + "\n".join(kernels), names


def streams_f16(torch, rank: int, warmup: int, reps: int) -> list[dict]:
    """HBM bandwidth of kernels mixing f16 and f32 arrays (F16_STREAM_SHAPES), every array of
    the same element count, ~1 GiB moved in all: one row per shape with its array counts,
    numel (elements per array), bytes moved and median time."""
    src, names = _streams_f16_source(F16_STREAM_SHAPES)
    rows = []
    with _Kernels(torch, rank) as kern:
        module = kern.module("wb_cal_streams_f16", src)
        for shape in F16_STREAM_SHAPES:
            a, b, c, d = shape
            per = 4 * (a + c) + 2 * (b + d)  # bytes per element index
            numel = HBM_NBYTES // per // F16_VEC * F16_VEC
            arrays = [torch.randn(numel, device=kern.dev, dtype=dt)
                      for count, dt in ((a, torch.float32), (b, torch.float16),
                                        (c, torch.float32), (d, torch.float16))
                      for _ in range(count)]
            ms = kern.time_ms(module.get_function(names[shape]), arrays, numel, F16_VEC,
                              warmup, reps)
            nbytes = per * numel
            rows.append({"f32_inputs": a, "f16_inputs": b, "f32_outputs": c, "f16_outputs": d,
                         "numel": numel, "nbytes": nbytes, "ms": ms,
                         "Bps": nbytes / (ms * 1e-3)})
            log(rank, f"streams f16 {shape} (f32 in, f16 in, f32 out, f16 out): "
                      f"{rows[-1]['Bps'] / 1e12:.3f} TB/s")
            del arrays
            torch.cuda.empty_cache()
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


def main(out_path: str, warmup: int = 5, reps: int = 25, passes: int = 1) -> int:
    """Run this rank's share; rank 0 writes the raw measurements to out_path."""
    import torch
    import torch.distributed as dist

    rank, P = int(os.environ["WB_RANK"]), int(os.environ["WB_WORLD_SIZE"])
    torch.cuda.set_device(rank)
    raw: dict = {"gpus": P, "nccl_version": ".".join(map(str, torch.cuda.nccl.version())),
                 "torch_version": torch.__version__, "warmup": warmup, "reps": reps,
                 "passes": passes,
                 "timing": "CUDA events, median of reps; collectives: slowest rank's median, "
                           "median over passes"}
    if P > 1:
        dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
        log(rank, "NCCL up")
        rows, errors = collectives(torch, dist, rank, P, warmup, reps, passes=passes)
        raw["collectives"] = rows.pop("f32")
        raw["collectives_by_dtype"] = rows
        raw.update({f"collectives_{d}_error": e for d, e in errors.items()})
        if P % 2 == 0:
            nccl = runtime_nccl(torch, dist, rank, P)
            for key, run in (("p2p", lambda: p2p(torch, dist, rank, P, warmup, reps, nccl,
                                                   passes)),
                             ("host_issue", lambda: host_issue(torch, dist, rank, P, nccl))):
                try:
                    raw[key] = run()
                except Exception as e:  # noqa: BLE001 - recorded in the raw file and logged
                    raw[f"{key}_error"] = f"{type(e).__name__}: {e}"
                    log(rank, f"{key} failed: {type(e).__name__}: {e}")
        # on every GPU count above one: each rank pushes to all the others
        try:
            raw["copy_engines"] = copy_engines(torch, dist, rank, P, warmup, reps)
        except Exception as e:  # noqa: BLE001 - recorded in the raw file and logged
            raw["copy_engines_error"] = f"{type(e).__name__}: {e}"
            log(rank, f"copy_engines failed: {type(e).__name__}: {e}")
    else:
        raw["collectives"] = []
    if rank == 0:
        raw["device"] = device(torch, rank, warmup, reps)
        # Each extra benchmark on its own: a failure is recorded, the rest of the raw file kept.
        for key, fn in (("streams", streams), ("streams_f16", streams_f16),
                        ("torch_adam", torch_adam)):
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


def _with_grid(run, blocks: int | None) -> int:
    """Launch the fused collective kernels of a PlanRun with `blocks` blocks from now on
    (None: keep theirs); returns the grid they had. Reads the executor's prepared launches,
    ("kernel", step, fn, grid, args, epoch_at): the calibration's one reach into it, checked."""

    before, items = None, []
    for item in run.launches:
        if item[0] == "kernel" and item[1].spec.kind == "collective":
            if len(item) != 6:
                raise RuntimeFault(f"executor kernel launches must be (kind, step, fn, grid, "
                                   f"args, epoch_at), got {len(item)} fields; update "
                                   f"calibrate_worker._with_grid to the executor")
            before = item[3]
            item = (*item[:3], before if blocks is None else blocks, *item[4:])
        items.append(item)
    if before is None:
        raise RuntimeFault("the fused AllReduce plan must launch a collective kernel, got none")
    run.launches = items
    return before


def fused_blocks(out_path: str, warmup: int = 5, reps: int = 25) -> int:
    """The fused AllReduce kernel (f32, FUSED_BLOCKS_NBYTES) with grids of fewer blocks than
    the runtime's full grid (cost_model.calibration.fused_block_counts), each run checked
    exactly (small integers sum without rounding) and timed; rank 0 writes
    {"fused_blocks": rows, "fused_blocks_meta": ...} to out_path."""
    import numpy as np

    from cost_model.calibration import fused_block_counts

    rank, P = int(os.environ["WB_RANK"]), int(os.environ["WB_WORLD_SIZE"])
    gpu = Gpu(rank, P)
    log(rank, f"fused blocks: {gpu.name}, {gpu.sm_count} SMs")
    program = load(str(ALLREDUCE_SPEC)).schedules["fused"].apply()
    N = FUSED_BLOCKS_NBYTES // 4
    run = PlanRun(gpu, lower(program, P, collective_unroll=1, collective_mode="pull"),
                  {"N": N, "P": P})
    base = (np.arange(N) % 7).astype(np.float32)
    run.upload({program.inputs[0].name: np.stack([base + r for r in range(P)])})
    want = P * base + sum(range(P))
    out = program.outputs[0].name
    full = _with_grid(run, None)  # the runtime's grid
    rows = []
    for blocks in fused_block_counts(gpu.sm_count, full):
        _with_grid(run, blocks)
        run.poison()
        gpu.barrier()
        run.run()
        gpu.drv.Context.synchronize()
        oks = gpu.all_gather(bool(np.array_equal(run.download([out])[out], want)))
        if not all(oks):
            raise RuntimeFault(f"the fused AllReduce kernel must match the reference on "
                               f"{blocks} blocks, got a mismatch on rank(s) "
                               f"{[r for r, ok in enumerate(oks) if not ok]}")
        times = gpu.all_gather(run.time(warmup, reps).times_ms)
        ms = max(statistics.median(t) for t in times)  # the slowest rank's median
        rows.append({"nbytes": 4 * N, "blocks": blocks, "ms": ms, "check": "ok (exact)"})
        log(rank, f"fused blocks {blocks}: {ms:.3f} ms, "
                  f"{2 * (P - 1) / P * 4 * N / (ms * 1e-3) / 1e9:.0f} GB/s bus")
    run.free()
    if rank == 0:
        meta = {"program": "benchmarks/gpu/allreduce.py", "schedule": "fused", "dtype": "f32",
                "full_grid": full, "sm_count": gpu.sm_count, "warmup": warmup, "reps": reps}
        with open(out_path, "w") as f:
            json.dump({"fused_blocks": rows, "fused_blocks_meta": meta}, f, indent=1)
        log(rank, f"wrote {out_path}")
    gpu.barrier()
    gpu.close()
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--fused-blocks":
        # as the compile-and-measure worker: a failure exits non-zero with its traceback, and
        # interpreter teardown is skipped (CUDA IPC mappings and NCCL are released by process
        # exit; library destructors in arbitrary order can hang a finished rank)
        import traceback

        try:
            code = fused_blocks(sys.argv[2])
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    passes = int(sys.argv[sys.argv.index("--passes") + 1]) if "--passes" in sys.argv else 1
    sys.exit(main(sys.argv[1], passes=passes))
