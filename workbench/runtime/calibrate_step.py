"""`workbench calibrate --step-table`: the GEMM and attention efficiency table of one GPU
(cost_model.efficiency, decision 105), timed with torch on this machine's first GPU.

Every shape of the grids below: torch.matmul and causal scaled_dot_product_attention (forward
and backward), each the median of `reps` timings between CUDA events after `warmup` untimed
calls, each timing over as many back-to-back calls as fill about a millisecond, after the
clocks are brought up. GPU libraries are imported inside the functions: importing this
module needs none.

Why back to back and warmed: GPU run 39 call 7 timed one call between two events from an idle
GPU, so a small kernel's time held the host's launch (9.55 us measured apart:
GPU.host_launch_s, which the step model adds on its own) and the first shapes ran while the
clocks rose from idle (345 MHz): 1024^3 measured 48 TFLOP/s.
"""

from __future__ import annotations

import math
import statistics
from itertools import product

from cost_model.efficiency import entry_key

# The GEMM grid (M, N, K each) and the attention grid (batch, heads, seq, head_dim): the
# shapes of the GPT layers simulate-step prices lie inside or on their edges.
GEMM_DIMS = (256, 1024, 4096, 16384)
ATTENTION_GRID = ((1, 8), (8, 32), (512, 2048), (64, 128))
TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}


def attention_flops(batch: int, heads: int, seq: int, head_dim: int) -> float:
    """Causal attention's forward + backward flops as FlashAttention's benchmark counts them:
    4 B H S^2 D halved by the mask, times 3.5 (backward 2.5 x forward)."""
    return 3.5 * 4 * batch * heads * seq * seq * head_dim / 2


# Device time each timing spans at least: back-to-back calls hide the host's launches.
TIMED_SPAN_MS = 1.0
# Seconds of large GEMMs before the first timing, so that the clocks are up.
CLOCK_WARMUP_S = 0.5


def _median_s(torch, fn, warmup: int, reps: int) -> float:
    """Device seconds of one fn(): the median over `reps` timings of back-to-back calls."""
    from workbench.runtime.baselines import event_times

    once_ms = statistics.median(event_times(torch, fn, warmup, 3))
    calls = max(1, math.ceil(TIMED_SPAN_MS / max(once_ms, 1e-6)))

    def many():
        for _ in range(calls):
            fn()

    return statistics.median(event_times(torch, many, 1, reps)) / calls * 1e-3


def _warm_clocks(torch, dt) -> None:
    """Large GEMMs for CLOCK_WARMUP_S, so that no timing starts from idle clocks."""
    import time

    a = torch.randn(8192, 8192, device="cuda:0", dtype=dt)
    start = time.perf_counter()
    while time.perf_counter() - start < CLOCK_WARMUP_S:
        torch.matmul(a, a)
        torch.cuda.synchronize()


def _gemm_rate(torch, dt, m: int, n: int, k: int, warmup: int, reps: int) -> float:
    """Achieved FLOP/s of one m x k @ k x n torch.matmul on GPU 0."""
    a = torch.randn(m, k, device="cuda:0", dtype=dt)
    b = torch.randn(k, n, device="cuda:0", dtype=dt)
    return 2 * m * n * k / _median_s(torch, lambda: torch.matmul(a, b), warmup, reps)


def _attention_rate(torch, dt, shape, warmup: int, reps: int) -> float:
    """Achieved FLOP/s of causal scaled_dot_product_attention forward + backward on GPU 0."""
    import torch.nn.functional as F

    q, k, v = (torch.randn(*shape, device="cuda:0", dtype=dt, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(*shape, device="cuda:0", dtype=dt)

    def step():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)

    return attention_flops(*shape) / _median_s(torch, step, warmup, reps)


def measure_rates(dtype: str = "bf16", gemm_dims=GEMM_DIMS, attention_grid=ATTENTION_GRID,
                  warmup: int = 3, reps: int = 10, echo=None) -> dict:
    """{table key: achieved FLOP/s} of every GEMM and attention shape of the grids on GPU 0."""
    import torch

    dt = getattr(torch, TORCH_DTYPES[dtype])
    _warm_clocks(torch, dt)
    rates = {}
    for dims in product(gemm_dims, repeat=3):
        rates[entry_key("gemm", dtype, dims)] = _gemm_rate(torch, dt, *dims, warmup, reps)
    for shape in product(*attention_grid):
        rates[entry_key("attention", dtype, shape)] = _attention_rate(torch, dt, shape, warmup,
                                                                      reps)
    if echo:
        for key, rate in rates.items():
            echo(f"{key}: {rate / 1e12:.1f} TFLOP/s")
    return rates
