"""Per-shape efficiency of GEMMs and attention (issue 37 item 4, design decision 105).

A GPU may carry a calibration table (`GPU.efficiency_table`): entries keyed
"KIND:DTYPE:D1xD2x..." with the fraction of the GPU's peak_flops for that dtype that the kernel
of that shape reached, measured (`workbench calibrate --step-table`) or cited (presets).

- KIND "gemm": dims M x N x K of C[M, N] = A[M, K] @ B[K, N]; flops 2 M N K.
- KIND "attention": dims batch x heads x seq x head_dim of causal scaled-dot-product attention;
  flops counted as the causal half (as FlashAttention's benchmarks count them), forward and
  backward at the one efficiency calibrate measures over both.

Each (kind, dtype) is a full grid: every combination of the values each axis takes is present,
so the efficiency at any shape is interpolated multilinearly in log space (log of the
efficiency over log2 of each dim) between the grid's points. Above the largest measured dim
the last segment's trend goes on (a GEMM's K of 65536 tokens in a weight gradient amortizes its
tiles' prologue better than K = 4096 does), never below the edge's efficiency nor above the
best the grid measured; below the smallest the time stays the edge's (a smaller kernel is no
faster than the smallest measured: launch and tile fill bound it).
"""

from __future__ import annotations

import functools
import math
from itertools import product

from workbench.errors import HardwareError

# Each kind's axes and each axis's power in the kind's flops (attention's flops grow with the
# square of the sequence).
KIND_AXES = {"gemm": (("M", 1), ("N", 1), ("K", 1)),
             "attention": (("batch", 1), ("heads", 1), ("seq", 2), ("head_dim", 1))}
DTYPES = ("f32", "f16", "bf16")


def entry_key(kind: str, dtype: str, dims) -> str:
    """The table key of one measured shape: "gemm:bf16:4096x4096x4096"."""
    return f"{kind}:{dtype}:" + "x".join(str(int(d)) for d in dims)


def parse_key(key: str) -> tuple[str, str, tuple[int, ...]]:
    """(kind, dtype, dims) of a table key, or HardwareError naming what a key must be."""
    parts = str(key).split(":")
    fix = ('; write keys as KIND:DTYPE:DIMS, e.g. "gemm:bf16:4096x4096x4096" or '
           '"attention:bf16:8x16x2048x128"')
    if len(parts) != 3 or parts[0] not in KIND_AXES:
        raise HardwareError(f"gpu.efficiency_table key must be KIND:DTYPE:DIMS with KIND one of "
                            f"{', '.join(KIND_AXES)}, got {key!r}{fix}")
    kind, dtype, text = parts
    if dtype not in DTYPES:
        raise HardwareError(f"gpu.efficiency_table key {key!r} must name a dtype of "
                            f"{', '.join(DTYPES)}, got {dtype!r}{fix}")
    axes = KIND_AXES[kind]
    try:
        dims = tuple(int(d) for d in text.split("x"))
    except ValueError:
        dims = ()
    if len(dims) != len(axes) or min(dims) < 1:
        names = " x ".join(a for a, _ in axes)
        raise HardwareError(f"gpu.efficiency_table key {key!r} must give {len(axes)} positive "
                            f"integer dims ({names}), got {text!r}{fix}")
    return kind, dtype, dims


@functools.lru_cache(maxsize=64)
def _grids(table) -> dict:
    """(kind, dtype) -> (per-axis sorted values, {dims: efficiency})."""
    points: dict = {}
    for key, value in table:
        kind, dtype, dims = parse_key(key)
        points.setdefault((kind, dtype), {})[dims] = float(value)
    out = {}
    for group, pts in points.items():
        axes = tuple(sorted({d[i] for d in pts}) for i in range(len(next(iter(pts)))))
        out[group] = (axes, pts)
    return out


def check_table(table) -> None:
    """Every key parses, every efficiency is in (0, 1], and every (kind, dtype) is a full
    grid; else HardwareError naming the field and the fix."""
    for key, value in table:
        parse_key(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not (0 < value <= 1) or not math.isfinite(value):
            raise HardwareError(f"gpu.efficiency_table[{key!r}] must be an efficiency in (0, 1] "
                                f"(achieved / peak_flops for its dtype), got {value!r}; divide "
                                "the measured FLOP/s by the GPU's peak_flops")
    for (kind, dtype), (axes, pts) in _grids(table).items():
        missing = [dims for dims in product(*axes) if dims not in pts]
        if missing:
            raise HardwareError(
                f"gpu.efficiency_table's {kind}:{dtype} entries must form a full grid (every "
                f"combination of {' x '.join(str(list(a)) for a in axes)}), got "
                f"{len(missing)} missing, first {entry_key(kind, dtype, missing[0])}; measure "
                "the whole grid (workbench calibrate --step-table) or drop that axis value")


def _interp(axes, pts, dims) -> float:
    """Multilinear interpolation of log(efficiency) over log2(dims); a dim above the grid
    continues its last segment (extrapolation)."""
    corners = []  # per axis: [(value, weight), ...]
    for values, d in zip(axes, dims):
        if len(values) == 1:
            corners.append([(values[0], 1.0)])
            continue
        hi = next((i for i, v in enumerate(values) if v >= d), len(values) - 1)
        hi = max(hi, 1)
        a, b = values[hi - 1], values[hi]
        t = (math.log2(d) - math.log2(a)) / (math.log2(b) - math.log2(a))
        corners.append([(a, 1.0 - t), (b, t)])
    log_eff = 0.0
    for combo in product(*corners):
        weight = math.prod(w for _, w in combo)
        if weight:
            log_eff += weight * math.log(pts[tuple(v for v, _ in combo)])
    return math.exp(log_eff)


def seconds(table, kind: str, dtype: str, dims, flops: float, peak_flops: float
            ) -> float | None:
    """Time of a `kind` kernel of shape `dims` doing `flops` at the table's efficiency for its
    shape (`efficiency_at`; below the grid the smallest measured shape's time), or None where
    the table has no entries for (kind, dtype)."""
    eff = efficiency_at(table, kind, dtype, dims)
    if eff is None:
        return None
    axes, _ = _grids(table)[(kind, dtype)]
    # below the grid the time of the smallest measured dim: flops scaled up to it
    floor = math.prod((v[0] / d) ** p for (_, p), v, d in zip(KIND_AXES[kind], axes, dims)
                      if v[0] > d)
    return flops * floor / (eff * peak_flops)


def efficiency_at(table, kind: str, dtype: str, dims) -> float | None:
    """The table's efficiency at `dims`, None without entries for (kind, dtype). A dim below
    the grid is raised to its smallest value; above the grid the last segment's trend goes
    on, never below the grid edge's efficiency (a larger kernel is no less efficient than
    the largest measured) nor above the best efficiency measured anywhere in the grid."""
    grid = _grids(table).get((kind, dtype))
    if grid is None:
        return None
    axes, pts = grid
    lifted = tuple(max(d, v[0]) for d, v in zip(dims, axes))
    edge = _interp(axes, pts, tuple(min(d, v[-1]) for d, v in zip(lifted, axes)))
    if all(d <= v[-1] for d, v in zip(lifted, axes)):
        return edge
    return min(max(_interp(axes, pts, lifted), edge), max(pts.values()))


def table_from_rates(rates: dict, peak_flops_by_dtype: dict) -> dict:
    """{key: efficiency} from measured {key: achieved FLOP/s} (keys as `entry_key`): each rate
    over its dtype's peak. A rate above the peak says the peak is wrong: HardwareError naming
    the shape and the fix; the result is checked as a profile's table would be."""
    out = {}
    for key, rate in rates.items():
        _, dtype, _ = parse_key(key)
        eff = float(rate) / peak_flops_by_dtype[dtype]
        if not (0 < eff <= 1):
            raise HardwareError(f"the measured rate of {key} must be within the GPU's "
                                f"peak_flops[{dtype}] = {peak_flops_by_dtype[dtype]:.4g}, got "
                                f"{float(rate):.4g} FLOP/s; calibrate against a --base whose "
                                "peak_flops is this GPU's")
        out[key] = eff
    check_table(tuple(out.items()))
    return out
