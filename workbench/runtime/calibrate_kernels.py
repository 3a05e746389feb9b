"""Calibration's one-GPU measurements: HBM streams of k arrays (f32, and mixed f16/f32 kernels),
the launch gap, GEMM rates, and torch's fused Adam, each on this rank's device.
"""

from __future__ import annotations

import statistics

from codegen.render import include_dir
from cost_model.calibration import (
    F16_STREAM_SHAPES,
    STREAM_SHAPES,
)
from workbench.runtime.baselines import event_times
from workbench.runtime.calibrate_progress import log
from workbench.runtime.compiler import compile_cubin
from workbench.runtime.gpu import import_pycuda, push_primary_context

HBM_NBYTES = 2**30  # far beyond the 50 MiB L2: streams from HBM


GEMM_N = 8192


# STREAM_SHAPES: (inputs, outputs) of the k-array streaming kernels, ~1 GiB in all: k = 2, 3,
# 5, 7, 9 with one output, and k = 7, 9 with several (Adam reads 4 and writes 3 arrays).
# F16_STREAM_SHAPES: (f32 in, f16 in, f32 out, f16 out) of the mixed ones (cost_model.calibration).
STREAM_THREADS = 512  # as codegen.spec.THREADS; grid as the runtime's: min(work, 16 per SM)


# Elements per thread per iteration of a kernel with 2-byte arrays: 16 // 2, as codegen's vec.
F16_VEC = 8


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


def streams_source(n_in: int, n_out: int) -> tuple[str, str]:
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


class Kernels:
    """pycuda on torch's primary context of this rank's GPU, for the hand-written stream
    kernels: compile (nvcc, through the runtime's cache) and time one kernel launch."""

    def __init__(self, torch, rank: int):

        self.torch, self.drv = torch, import_pycuda()
        self.dev = torch.device("cuda", rank)
        torch.empty(1, device=self.dev)  # the primary context, shared with pycuda
        self.drv.init()
        self.rank = rank
        self.sm = torch.cuda.get_device_properties(self.dev).multi_processor_count

    def __enter__(self):
        self.ctx = push_primary_context(self.drv, self.rank)
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
    with Kernels(torch, rank) as kern:
        for n_in, n_out in STREAM_SHAPES:
            k = n_in + n_out
            n4 = HBM_NBYTES // k // 16  # float4 vectors per array
            name, src = streams_source(n_in, n_out)
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


def streams_f16_source(shapes) -> tuple[str, dict]:
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
    src, names = streams_f16_source(F16_STREAM_SHAPES)
    rows = []
    with Kernels(torch, rank) as kern:
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

