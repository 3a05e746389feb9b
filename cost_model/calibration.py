"""Measured microbenchmarks -> a hardware profile (the CPU half of `workbench calibrate`).

`workbench calibrate --gpus P` measures on the GPUs (workbench/runtime/calibrate.py) and writes
a raw file; this module reads it, fits the model's constants and writes a profile that
`load_hardware` (and so `workbench simulate --hardware profile.json`) reads. Field by field:

| profile field | from |
|---|---|
| gpu.hbm_bandwidth_Bps | triad a = b + 0.5 c over 1 GiB (3 streams, like elementwise kernels) |
| gpu.hbm_read/write_bandwidth_Bps | one kernel streaming k arrays (n_in read, n_out written, |
| | k = 2..9, 1 GiB): least squares of time = read / R + written / W (`fit_hbm_read_write`) |
| gpu.launch_latency_s | back-to-back tiny kernels launched eagerly from Python, per kernel |
| gpu.peak_flops | 8192^3 torch.matmul per dtype (f32 with TF32 off) |
| gpu.sm_count, hbm_capacity_bytes, name | the device's properties |
| gpu.hbm_f16_kernel_Bps | mixed f16/f32 stream kernels (`device.streams_f16`): the byte |
| | classes of kernels with 2-byte arrays that stream at rates of their own, only those the |
| | data needs (`fit_hbm_f16_kernels`) |
| nccl.* | `cost_model.fit.fit_nccl` on the measured all_reduce/reduce_scatter/all_gather table |
| | (f32) |
| nccl_dtypes.f16, .bf16 | the same collectives in f16 and bf16 (`collectives_by_dtype`): their |
| | bandwidth constants (`cost_model.fit.fit_nccl_bandwidth`), the latencies f32's; only |
| | when measured |
| peer_load/store_bandwidth_Bps | the fused AllReduce kernel (benchmarks/gpu/allreduce.py, no |
| | computation) across sizes, inverted through the model of its time |
| fused_fixed_s | the same rows: the fixed cost beyond launch gap and barrier hops (`fit_fused`) |
| nccl.host_overhead_s | the fit's (torch.distributed timed the tables), moved by the measured |
| | host cost per call of nccl4py (the runtime's) less torch's (`host_issue`; `_runtime_host`) |
| p2p_latency_s, p2p_bandwidth_Bps | NCCL send/recv from each GPU of the first half to the same |
| | one of the second half, 64 KiB .. 1 GiB (`p2p`): least squares of the relative error of |
| | host + latency + nbytes / bandwidth (`fit_p2p`), disturbed sizes left out (`p2p_kept`) |
| fused_block_bandwidth | the same kernel at 256 MiB with grids of 4 .. 2 x SMs blocks |
| | (`fused_blocks`): its bandwidth as a fraction of the full grid's (`fit_fused_blocks`) |
| copy_engine_bandwidth_Bps | every GPU pushing 256 MiB and 1 GiB into each other GPU's |
| | CUDA-IPC-mapped buffer by copy engines (cuMemcpyDtoDAsync), all at once (`copy_engines`): |
| | least squares of the relative error of time = bytes per GPU per direction / bandwidth |
| | (`fit_copy_engines`) |
| gpu.dropout_element_s | the generated f16 bias + residual kernel on 8192 x 12288 with and |
| | without a dropout (benchmarks/gpu/elementwise_ops.py, `dropout`): the difference per |
| | element (`fit_dropout`) |

What is not measured stays the base preset's (NVLink datasheet bandwidth, NIC, channels). Raw
files written before a section existed (e.g. studies/results/calibration/h200x2) still fit:
each section is optional, and a missing one leaves its fields as the base preset has them.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from cost_model.collectives import fused_comm_time, fused_latency_s
from cost_model.fit import (
    KINDS,
    Table,
    bandwidth_bound,
    fit_nccl,
    fit_nccl_bandwidth,
    table_errors,
)
from cost_model.hardware import NCCL_DTYPES, Cluster, NcclTuning, load_profile, preset
from workbench.errors import HardwareError

FIX = "run `workbench calibrate --gpus P` on the GPU machine to measure it again"


@dataclass(frozen=True, slots=True)
class Calibration:
    """A fitted profile: the profile mapping, the cluster it describes, and fit errors."""

    profile: dict
    cluster: Cluster
    nccl_worst_error: float | None
    fused_worst_error: float | None
    nccl_errors: list  # (nbytes, {kind: predicted / measured - 1})
    fused_errors: list  # (nbytes, predicted / measured - 1)
    nccl_outliers: list = ()  # (nbytes, kind) left out of the NCCL fit
    hbm_errors: list = ()  # (inputs, outputs, predicted / measured - 1) of the k-stream kernel
    # per dtype (f16, bf16) of `collectives_by_dtype`: the same as nccl_* for f32
    nccl_dtype_errors: dict = field(default_factory=dict)
    nccl_dtype_worst_error: dict = field(default_factory=dict)
    nccl_dtype_outliers: dict = field(default_factory=dict)
    hbm_f16: HbmF16Fit | None = None  # the mixed f16/f32 stream fit, when measured
    # (nbytes, blocks, predicted / measured - 1) of the fused kernel on fewer blocks
    fused_block_errors: list = ()
    p2p_errors: list = ()  # (nbytes, predicted / measured - 1) of NCCL send/recv
    p2p_kept: list = ()  # the (nbytes, seconds) send/recv rows the fit used
    host_note: str = ""  # how the NCCL host overhead was moved to the runtime's path
    p2p_path: str = ""  # the path the fitted send/recv rows were timed on
    # (nbytes per peer, peers, predicted / measured - 1) of the copy-engine pushes
    copy_engine_errors: list = ()
    copy_engine_note: str = ""  # why the copy engines' bandwidth stayed the base preset's
    dropout_note: str = ""  # what the dropout hashing fit found, or why it kept the preset's


@dataclass(frozen=True, slots=True)
class HbmF16Fit:
    """What `fit_hbm_f16_kernels` found: the byte classes of mixed kernels with rates of
    their own (empty: none written), the f32 kernels' read and write rates, and the errors of
    the mixed stream rows at the f32 rates and under the profile."""

    rates: dict  # byte class -> Bps, as written to gpu.hbm_f16_kernel_Bps
    f32_read_Bps: float
    f32_write_Bps: float
    errors_f32_rates: list  # (shape, predicted / measured - 1), every byte at the f32 rates
    errors: list  # (shape, predicted / measured - 1) under the fitted profile


# ---------------------------------------------------------------- reading the raw file


def read_raw(path: Path, gpus: int) -> dict:
    """Read and check a raw calibration file (JSON, as written by `workbench calibrate`)."""
    path = Path(path)
    if not path.is_file():
        raise HardwareError(f"calibration raw file must be an existing file, got {path}; {FIX}")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise HardwareError(f"calibration raw file {path} must be valid JSON, got "
                            f"JSONDecodeError: {e}; {FIX}") from None
    if not isinstance(raw, dict):
        raise HardwareError(f"calibration raw file {path} must hold a JSON object, got "
                            f"{type(raw).__name__}; {FIX}")
    if raw.get("gpus") != gpus:
        raise HardwareError(f"calibration raw file's gpus must equal --gpus, got "
                            f"{raw.get('gpus')!r} in {path} with --gpus {gpus}; pass --gpus "
                            f"{raw.get('gpus')} or measure again with --gpus {gpus}")
    dev = raw.get("device")
    need = {"copy": "Bps", "triad": "Bps", "launch": "eager_s_per_kernel", "gemm": "f16"}
    if not isinstance(dev, dict) or any(not isinstance(dev.get(k), dict) or v not in dev[k]
                                        for k, v in need.items()):
        raise HardwareError(f"calibration raw file {path} must hold device measurements "
                            f"({', '.join(f'{k}.{v}' for k, v in need.items())}), got "
                            f"{sorted(dev) if isinstance(dev, dict) else dev!r}; {FIX}")
    rows = raw.get("collectives")
    if gpus > 1:
        if not isinstance(rows, list) or not rows:
            raise HardwareError(f"calibration raw file {path} must hold collective rows for "
                                f"{gpus} GPUs, got {rows!r}; {FIX}")
        _check_collective_rows(rows, path, "collective rows")
    by_dtype = raw.get("collectives_by_dtype")
    if by_dtype is not None:
        if not isinstance(by_dtype, dict) or any(d not in NCCL_DTYPES for d in by_dtype):
            raise HardwareError(f"calibration raw file {path} collectives_by_dtype must map a "
                                f"dtype ({', '.join(NCCL_DTYPES)}) to collective rows, got "
                                f"{sorted(by_dtype) if isinstance(by_dtype, dict) else by_dtype!r}"
                                f"; {FIX}")
        for dtype, drows in by_dtype.items():
            if not isinstance(drows, list) or not drows:
                raise HardwareError(f"calibration raw file {path} collectives_by_dtype.{dtype} "
                                    f"must be a non-empty list of rows, got {drows!r}; {FIX}")
            _check_collective_rows(drows, path, f"collectives_by_dtype.{dtype} rows")
    _check_rows(dev.get("streams"), path, "device.streams",
                lambda r: all(_count(r.get(k), 1) for k in ("inputs", "outputs"))
                and all(_positive(r.get(k)) for k in ("nbytes", "ms")),
                "inputs and outputs as positive integers and nbytes and ms as positive numbers")
    _check_rows(dev.get("streams_f16"), path, "device.streams_f16", _stream_f16_ok,
                f"{', '.join(F16_STREAM_KEYS)} as non-negative integers (at least one input, "
                f"one output and one f16 array) and numel and ms as positive numbers")
    if dev.get("streams_f16") and not dev.get("streams"):
        raise HardwareError(f"calibration raw file {path} device.streams_f16 needs the f32 "
                            f"k-stream rows device.streams to compare with, got none; {FIX}")
    issue = raw.get("host_issue")
    if issue is not None and (not isinstance(issue, dict)
                              or not all(_positive(v) for v in issue.values())):
        raise HardwareError(f"calibration raw file {path} host_issue must map each NCCL path's "
                            f"call (e.g. torch_allreduce_s, nccl4py_allreduce_s) to its host "
                            f"seconds, positive numbers, got {issue!r}; {FIX}")
    _check_rows(raw.get("p2p"), path, "p2p",
                lambda r: _positive(r.get("nbytes")) and _positive(r.get("sendrecv_ms")),
                "nbytes and sendrecv_ms as positive numbers")
    _check_rows(raw.get("fused"), path, "fused",
                lambda r: _positive(r.get("nbytes")) and _positive(r.get("ms")),
                "nbytes and ms as positive numbers")
    _check_rows(raw.get("copy_engines"), path, "copy_engines",
                lambda r: _count(r.get("peers"), 1) and r["peers"] == gpus - 1
                and _positive(r.get("nbytes")) and _positive(r.get("ms")),
                f"nbytes (bytes per peer) and ms as positive numbers and peers as the other "
                f"GPUs' count ({gpus - 1}), to fit copy_engine_bandwidth_Bps")
    _check_rows(raw.get("fused_blocks"), path, "fused_blocks",
                lambda r: _count(r.get("blocks"), 1) and _positive(r.get("nbytes"))
                and _positive(r.get("ms")),
                "blocks as a positive integer and nbytes and ms as positive numbers")
    return raw


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 and math.isfinite(x)


def _count(x, least: int = 0) -> bool:
    """An integer (not a bool) of at least `least`."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= least


def _check_collective_rows(rows: list, path: Path, where: str) -> None:
    """Each row must give nbytes and every kind's time as positive numbers."""
    for row in rows:
        if not isinstance(row, dict) or any(not _positive(row.get(f"{k}_ms"))
                                            for k in KINDS) or not _positive(row.get("nbytes")):
            raise HardwareError(f"calibration raw file {path} {where} must give nbytes and "
                                f"{', '.join(f'{k}_ms' for k in KINDS)} as positive numbers, "
                                f"got {row!r}; {FIX}")


# The array counts of a mixed f16/f32 stream row (device.streams_f16).
F16_STREAM_KEYS = ("f32_inputs", "f16_inputs", "f32_outputs", "f16_outputs")


def _stream_f16_ok(row: dict) -> bool:
    """A device.streams_f16 row: non-negative array counts with at least one input, one
    output and one f16 array; positive numel and ms."""
    return all(_count(row.get(k)) for k in F16_STREAM_KEYS) \
        and all(_positive(row.get(k)) for k in ("numel", "ms")) \
        and row["f32_inputs"] + row["f16_inputs"] >= 1 \
        and row["f32_outputs"] + row["f16_outputs"] >= 1 \
        and row["f16_inputs"] + row["f16_outputs"] >= 1


def _check_rows(rows, path: Path, where: str, row_ok, what: str) -> None:
    """An optional section of rows (None: absent, as in raw files older than it): a list of
    mappings that `row_ok` accepts, else an error naming the section and what a row gives."""
    if rows is None:
        return
    if not isinstance(rows, list):
        raise HardwareError(f"calibration raw file {path} {where} must be a list of rows, got "
                            f"{rows!r}; {FIX}")
    for row in rows:
        if not isinstance(row, dict) or not row_ok(row):
            raise HardwareError(f"calibration raw file {path} {where} rows must give {what}, "
                                f"got {row!r}; {FIX}")


# A collective's time cannot fall as its buffer grows: a point slower than this factor times a
# larger size's time of the same kind is a disturbed measurement (calibration h200x2: a
# ReduceScatter of 1 MiB took 53 us between 30 us at 512 KiB and 32 us at 2 MiB). The fit
# minimises the worst error, so one such point would set it; it is left out and reported.
OUTLIER_FACTOR = 1.2


def collective_rows(raw: dict, dtype: str = "f32") -> list[dict]:
    """The raw file's collective rows of one dtype (f32: `collectives`, f16 and bf16:
    `collectives_by_dtype`; none where that dtype was not measured)."""
    if dtype == "f32":
        return raw.get("collectives", []) or []
    return (raw.get("collectives_by_dtype") or {}).get(dtype, [])


def nccl_table(raw: dict, dtype: str = "f32") -> Table:
    """The raw file's collective rows of `dtype` as a fit Table (seconds), outliers left
    out."""
    table = [(int(r["nbytes"]), {k: float(r[f"{k}_ms"]) * 1e-3 for k in KINDS})
             for r in sorted(collective_rows(raw, dtype), key=lambda r: r["nbytes"])]
    out = []
    for i, (n, row) in enumerate(table):
        kept = {k: t for k, t in row.items()
                if all(t <= OUTLIER_FACTOR * later[k] for _, later in table[i + 1:])}
        out.append((n, kept))
    return out


def nccl_outliers(raw: dict, dtype: str = "f32") -> list[tuple[int, str]]:
    """(nbytes, kind) of the measured points of `dtype` that `nccl_table` leaves out."""
    kept = dict(nccl_table(raw, dtype))
    return [(int(r["nbytes"]), k) for r in collective_rows(raw, dtype) for k in KINDS
            if k not in kept[int(r["nbytes"])]]


# ---------------------------------------------------------------- the fused kernel


def fused_allreduce_time(nbytes: float, P: int, cluster: Cluster) -> float:
    """Modelled time of the fused AllReduce kernel with no computation: fixed cost plus the
    peer loads (reduce-scatter) and stores (all-gather) of the whole buffer. Its HBM work
    (a few passes at TB/s) hides under the link time (~10x lower bandwidth), as cost_model.ops
    overlaps the two; tests check this matches the simulator's prediction."""
    return float(fused_latency_s(cluster, P) + fused_comm_time(nbytes, nbytes, P, cluster))


# The fused kernel's bandwidth is fitted on the sizes whose measured time is at least this many
# times the model's fixed cost of the kernel: there the time is bandwidth. Below, the kernel
# pays a fixed cost (barriers, grid start) that the model's fixed term (the launch gap alone,
# inside a node) lacks, and a bandwidth fitted there would be wrong at every large size
# (calibration h200x2: 33 us measured at 4 MiB against 19 us modelled).
BANDWIDTH_BOUND_FACTOR = 20.0


def fit_peer_scale(rows: list[tuple[int, float]], P: int, cluster: Cluster) -> float:
    """The factor k on (peer_load, peer_store) bandwidth that minimises the worst relative
    error of `fused_allreduce_time` over the bandwidth-bound measured (nbytes, seconds) rows
    (all rows when none is bandwidth bound).

    One kernel runs loads and stores, so the two cannot be told apart: the base preset's
    load/store ratio (measured on 4x H200 with separate probes) is kept. The time is
    latency + a/k, so a dense geometric grid of k finds the minimax within 0.01 %."""
    import numpy as np

    lat = float(fused_latency_s(cluster, P))
    rows = [r for r in rows if r[1] >= BANDWIDTH_BOUND_FACTOR * lat] or rows
    n = np.array([r[0] for r in rows], dtype=float)
    t = np.array([r[1] for r in rows], dtype=float)
    a = np.array([fused_allreduce_time(x, P, cluster) for x in n]) - lat
    ks = np.geomspace(0.05, 20.0, 60001)
    worst = np.max(np.abs((lat + a[None, :] / ks[:, None]) / t[None, :] - 1), axis=1)
    return float(ks[int(np.argmin(worst))])


def fit_fused(rows: list[tuple[int, float]], P: int, cluster: Cluster
              ) -> tuple[float, float]:
    """(k, fixed_s): the factor k on (peer_load, peer_store) bandwidth and the fused kernel's
    fixed cost beyond launch gap and barrier hops (`Cluster.fused_fixed_s`) that minimise the
    worst relative error of `fused_allreduce_time` over all measured (nbytes, seconds) rows.

    time = L + c + a / k: for each k of a dense geometric grid, the worst error is minimised
    over c >= 0 on a grid of 0.01 us; the load/store ratio stays the base preset's (see
    `fit_peer_scale`). With fewer than two sizes the fixed cost cannot be told from the
    bandwidth: then c = 0 and k as `fit_peer_scale`."""
    import numpy as np

    if len({n for n, _ in rows}) < 2:
        return fit_peer_scale(rows, P, cluster), 0.0
    base = dataclasses.replace(cluster, fused_fixed_s=0.0)
    lat = float(fused_latency_s(base, P))
    n = np.array([r[0] for r in rows], dtype=float)
    t = np.array([r[1] for r in rows], dtype=float)
    a = np.array([fused_allreduce_time(x, P, base) for x in n]) - lat
    cs = np.arange(0.0, float(t.min()) - lat, 1e-8) if t.min() > lat else np.zeros(1)
    best = (math.inf, 1.0, 0.0)
    for k in np.geomspace(0.05, 20.0, 4001):
        worst = np.max(np.abs((lat + cs[:, None] + a[None, :] / k) / t[None, :] - 1), axis=1)
        i = int(np.argmin(worst))
        if worst[i] < best[0]:
            best = (float(worst[i]), float(k), float(cs[i]))
    return best[1], best[2]


def fit_hbm_read_write(rows: list[dict]) -> tuple[float, float]:
    """(read_Bps, write_Bps) from the k-stream kernel rows (inputs, outputs, nbytes, ms; the
    nbytes split evenly over the inputs + outputs arrays): least squares of the relative error
    of time = read bytes / R + written bytes / W (linear in 1/R and 1/W)."""
    import numpy as np

    shares = {r["outputs"] / (r["inputs"] + r["outputs"]) for r in rows}
    if len(shares) < 2:
        raise HardwareError(f"calibration raw file device.streams must hold at least two write "
                            f"shares to fit read and write bandwidth, got {sorted(shares)}; {FIX}")
    A, b = [], []
    for r in rows:
        per = float(r["nbytes"]) / (r["inputs"] + r["outputs"])
        t = float(r["ms"]) * 1e-3
        A.append([r["inputs"] * per / t, r["outputs"] * per / t])
        b.append(1.0)
    (inv_r, inv_w), *_ = np.linalg.lstsq(np.array(A), np.array(b), rcond=None)
    if inv_r <= 0 or inv_w <= 0:
        raise HardwareError(f"calibration raw file device.streams must fit positive read and "
                            f"write bandwidths, got 1/R = {inv_r:.3g}, 1/W = {inv_w:.3g} s/B; "
                            f"{FIX}")
    return 1.0 / float(inv_r), 1.0 / float(inv_w)


def p2p_kept(rows: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """The send/recv rows the fit uses: as for the collectives (`nccl_table`), a size slower
    than OUTLIER_FACTOR times a larger size's time is left out (2x H200, calibration run 3:
    64 KiB .. 4 MiB took 74-92 us, 8 MiB 55 us)."""
    rows = sorted(rows)
    return [(n, t) for i, (n, t) in enumerate(rows)
            if all(t <= OUTLIER_FACTOR * later for _, later in rows[i + 1:])]


# A send/recv row is bandwidth bound when it takes at least this many times the fastest one (the
# latency); as cost_model.fit.BANDWIDTH_BOUND_FACTOR for the collectives.
P2P_BANDWIDTH_BOUND_FACTOR = 2.0


def fit_p2p(rows: list[tuple[int, float]], host_overhead_s: float) -> tuple[float, float]:
    """(latency_s, bandwidth_Bps) of NCCL send/recv from its (nbytes, seconds) rows: least
    squares of the relative error of time = host + a + nbytes / B (linear in a and 1/B),
    every size weighing alike; `a` is what remains beyond NCCL's per-call host cost (the
    profile's nccl.host_overhead_s), at least 1 ns (profile numbers must be positive).

    Where the free fit puts `a` below the host cost (2x H200, calibration run 6: small
    send/recvs took 29 us through nccl4py, less than the 39 us host cost the NCCL fit holds),
    1/B is fitted again as the slope of time against size (ordinary least squares, its own
    intercept) over the bandwidth-bound sizes (at least P2P_BANDWIDTH_BOUND_FACTOR times the
    fastest row): with `a` clipped the small sizes are over-predicted whatever B is, and a
    relative-error fit would pull B off the large sends it prices."""
    import numpy as np

    if len(rows) < 2:
        raise HardwareError(f"calibration raw file p2p must hold at least two sizes to fit "
                            f"latency and bandwidth, got {len(rows)}; {FIX}")
    A = np.array([[1.0 / t, n / t] for n, t in rows])
    (a, inv_b), *_ = np.linalg.lstsq(A, np.ones(len(rows)), rcond=None)
    if inv_b <= 0:
        raise HardwareError(f"calibration raw file p2p must fit a positive bandwidth (time "
                            f"growing with size), got 1/B = {inv_b:.3g} s/B; {FIX}")
    if a - host_overhead_s >= 1e-9:
        return float(a) - host_overhead_s, 1.0 / float(inv_b)
    fastest = min(t for _, t in rows)
    bound = [(n, t) for n, t in rows if t >= P2P_BANDWIDTH_BOUND_FACTOR * fastest]
    if len(bound) >= 2:
        inv_b = float(np.polyfit([n for n, _ in bound], [t for _, t in bound], 1)[0])
    if inv_b <= 0:
        raise HardwareError(f"calibration raw file p2p must fit a positive bandwidth (time "
                            f"growing with size) on its bandwidth-bound sizes, got 1/B = "
                            f"{inv_b:.3g} s/B; {FIX}")
    return 1e-9, 1.0 / inv_b


# The bytes per peer of the copy-engine pushes (workbench/runtime/calibrate_worker.py
# `copy_engines`): 256 MiB and 1 GiB, both far beyond a copy's fixed cost, the sizes a fused
# collective moves (2x H200: 0.70 ms at 256 MiB, 2.75 ms at 1 GiB; the section takes 0.4 s).
COPY_ENGINE_NBYTES = [2**28, 2**30]


def copy_engine_rows(raw: dict) -> list[tuple[int, int, float]]:
    """The copy-engine rows (nbytes per peer, peers, seconds) of a raw file (none where it
    has no `copy_engines` section)."""
    return [(int(r["nbytes"]), int(r["peers"]), float(r["ms"]) * 1e-3)
            for r in raw.get("copy_engines", []) or []]


def fit_copy_engines(rows: list[tuple[int, int, float]]) -> float:
    """The copy engines' bandwidth per GPU per direction from (nbytes per peer, peers,
    seconds) rows: each GPU sent and received peers x nbytes, and the cost model prices such
    bytes at bytes / bandwidth with no fixed term of their own
    (`cost_model.collectives.copy_engine_comm_time`), so the fit is the least squares of the
    relative error of that form: with r the measured rates (bytes / time), B = sum r^2 /
    sum r (one size: its rate). Every size weighs alike. (The preset's 391 GB/s is the link
    probe's, GPU run 11. Pushes alone: a fused collective that also pulls reached ~339 GB/s
    per direction in GPU run 16, which this section does not measure yet.)"""
    if not rows:
        raise HardwareError(f"calibration raw file copy_engines must hold at least one row to "
                            f"fit copy_engine_bandwidth_Bps, got none; {FIX}")
    rates = [peers * n / t for n, peers, t in rows]
    return sum(r * r for r in rates) / sum(rates)


def fit_dropout(raw: dict) -> tuple[float | None, str]:
    """The time a dropout adds per element (`GPU.dropout_element_s`) from the raw `dropout`
    section: {"numel", "plain_ms", "dropout_ms"}, the generated kernel with and without the
    dropout; and a line saying so. None where the section is missing (its error, if any, is
    in the line) or the difference is not positive (a profile number must be)."""
    section = raw.get("dropout")
    if section is None:
        why = raw.get("dropout_error", "not in this raw file")
        return None, f"dropout hashing not measured ({why}): gpu.dropout_element_s stays the " \
                     "base preset's"
    try:
        numel, plain, dropout = (float(section[k]) for k in ("numel", "plain_ms", "dropout_ms"))
    except (KeyError, TypeError, ValueError):
        raise HardwareError(f"calibration raw file dropout must hold numel, plain_ms and "
                            f"dropout_ms, got {section!r}; {FIX}") from None
    if not (numel > 0 and plain > 0 and dropout > 0):
        raise HardwareError(f"calibration raw file dropout must hold positive numel, plain_ms "
                            f"and dropout_ms, got {section!r}; {FIX}")
    per = (dropout - plain) * 1e-3 / numel
    line = (f"dropout hashing: {dropout:.3f} ms against {plain:.3f} ms without it on "
            f"{numel:.0f} elements")
    if per <= 0:
        return None, line + ": no cost measured; gpu.dropout_element_s stays the base preset's"
    return per, line + f": gpu.dropout_element_s {per * 1e12:.3f} ps per element"


def copy_engine_errors(rows: list[tuple[int, int, float]], cluster: Cluster
                       ) -> list[tuple[int, int, float]]:
    """(nbytes per peer, peers, predicted / measured - 1) of the copy-engine pushes under
    `cluster` (bytes per direction / its copy_engine_bandwidth_Bps)."""
    return [(n, peers, peers * n / cluster.copy_engine_bandwidth_Bps / t - 1)
            for n, peers, t in rows]


def p2p_errors(rows: list[tuple[int, float]], cluster: Cluster) -> list[tuple[int, float]]:
    """(nbytes, predicted / measured - 1) of the cluster's send/recv on the measured rows."""
    from cost_model.collectives import p2p_time

    return [(n, p2p_time(n, cluster, False) / t - 1) for n, t in rows]


def hbm_stream_errors(rows: list[dict], cluster: Cluster) -> list[tuple[int, int, float]]:
    """(inputs, outputs, predicted / measured - 1) of the k-stream rows under `cluster`."""
    out = []
    for r in rows:
        k = r["inputs"] + r["outputs"]
        writes = float(r["nbytes"]) * r["outputs"] / k
        t = float(cluster.gpu.hbm_time_s(float(r["nbytes"]), writes))
        out.append((r["inputs"], r["outputs"], t / (float(r["ms"]) * 1e-3) - 1))
    return out


# The f32 rates price a mixed f16/f32 kernel well enough when they predict every mixed stream
# row within this: twice the k-stream fit's worst error on 2x H200 (2.7 %) and above the
# triad's run-to-run drift (3 %). A byte class gets a rate of its own only when the rows need
# it, and only if it lowers the worst error by at least half of this (a class that buys less
# is fitting noise).
F16_RATE_TOLERANCE = 0.05

# (f32_inputs, f16_inputs, f32_outputs, f16_outputs) of the mixed stream kernels
# (workbench/runtime/calibrate_worker.py), each array of the same element count, shaped like
# the mixed-precision optimizers' kernels: a cast of the f16 gradient, a moment update
# m = b m + (1 - b) g (f16 g), the f16 copy of the weights, the fused mixed Adam (w, m, v, g
# in; w, m, v, w16 out), and two all-f16 kernels.
F16_STREAM_SHAPES = [(0, 1, 1, 0), (1, 1, 1, 0), (1, 0, 0, 1), (3, 1, 3, 1), (0, 2, 0, 1),
                     (0, 1, 0, 1)]


def f16_stream_bytes(row: dict) -> dict[str, float]:
    """The bytes of a device.streams_f16 row per byte class (F16_KERNEL_CLASSES)."""
    n = float(row["numel"])
    return {"f32_read": 4 * n * row["f32_inputs"], "f16_read": 2 * n * row["f16_inputs"],
            "f32_write": 4 * n * row["f32_outputs"], "f16_write": 2 * n * row["f16_outputs"]}


def _shape(row: dict) -> tuple[int, ...]:
    return tuple(int(row[k]) for k in F16_STREAM_KEYS)


def _fit_classes(rows: list[dict], base: dict, free: list[str]):
    """Least squares of the relative error of time = sum over classes of bytes / rate, the
    classes in `free` fitted and the rest at `base`: (rates of `free`, worst |error|), or
    None where the rows cannot fit them (a class no row has, or a rate not positive)."""
    import numpy as np

    A, b = [], []
    for r in rows:
        by, t = f16_stream_bytes(r), float(r["ms"]) * 1e-3
        A.append([by[c] / t for c in free])
        b.append(1.0 - sum(by[c] / base[c] for c in base if c not in free) / t)
    rates = {}
    if free:
        A = np.array(A)
        if np.linalg.matrix_rank(A) < len(free):
            return None
        x, *_ = np.linalg.lstsq(A, np.array(b), rcond=None)
        if any(v <= 0 for v in x):
            return None
        rates = {c: 1.0 / float(v) for c, v in zip(free, x)}
    rate = {**base, **rates}
    worst = max(abs(sum(by / rate[c] for c, by in f16_stream_bytes(r).items())
                    / (float(r["ms"]) * 1e-3) - 1) for r in rows)
    return rates, worst


def fit_hbm_f16_kernels(rows: list[dict], read_Bps: float, write_Bps: float
                        ) -> dict[str, float]:
    """The byte classes (F16_KERNEL_CLASSES) of kernels with 2-byte arrays that stream at
    rates of their own, with those rates, from the mixed f16/f32 stream rows; every other
    class streams at the f32 kernels' split (`read_Bps`, `write_Bps`). Empty: the f32 rates
    predict every row within F16_RATE_TOLERANCE.

    Forward selection: while the worst relative error exceeds the tolerance, free the class
    that lowers it most (its rate by least squares of the relative error, with the classes
    freed before), if it lowers it by at least half the tolerance.

    On CPU, synthetic rows from a cluster whose mixed kernels stream at the f32 rates select
    nothing; from one with slower f32 writes and f16 reads in mixed kernels the fit selects
    those two and recovers their rates (tests/cost_model/test_calibration_dtypes.py). On
    2x H200 (studies/results/calibration/h200x2-run2) the data decided: f16 bytes stream at
    the f32 rates (f16 in, f16 out 3.85 TB/s, as f32's 1 in + 1 out), and so do f32 reads at
    8 per lane (f32 in, f16 out 3.97), but f32 writes at 8 per lane (two 16-byte stores 32
    bytes apart per lane) are slow: f16 in, f32 out 2.62 TB/s. Selected: f32_write at
    2.43 TB/s (f32 kernels 3.56), worst error 30 % -> 7 %; freeing f32_read too would buy
    1.5 points, under the threshold."""
    from cost_model.hardware import F16_KERNEL_CLASSES

    if not rows:
        return {}

    base = {"f32_read": read_Bps, "f16_read": read_Bps, "f32_write": write_Bps,
            "f16_write": write_Bps}
    free: list[str] = []
    rates, worst = _fit_classes(rows, base, free)
    while worst > F16_RATE_TOLERANCE:
        tries = [(c, _fit_classes(rows, base, free + [c]))
                 for c in F16_KERNEL_CLASSES if c not in free]
        tries = [(c, fitted) for c, fitted in tries if fitted is not None]
        if not tries:
            break
        c, (new_rates, new_worst) = min(tries, key=lambda t: t[1][1])
        if worst - new_worst < F16_RATE_TOLERANCE / 2:
            break
        free.append(c)
        rates, worst = new_rates, new_worst
    return rates


def f16_stream_errors(rows: list[dict], cluster: Cluster) -> list[tuple[tuple, float]]:
    """(shape, predicted / measured - 1) of the mixed f16/f32 stream rows under `cluster`."""
    out = []
    for r in rows:
        by = f16_stream_bytes(r)
        writes = by["f32_write"] + by["f16_write"]
        t = float(cluster.gpu.hbm_time_s(sum(by.values()), writes, by["f16_read"],
                                         by["f16_write"]))
        out.append((_shape(r), t / (float(r["ms"]) * 1e-3) - 1))
    return out


def fit_fused_blocks(rows: list[tuple[int, int, float]], P: int, cluster: Cluster
                     ) -> list[tuple[int, float]]:
    """(blocks, fraction) per measured block count: the fused AllReduce kernel's peer
    bandwidth with that many blocks as a fraction of its bandwidth with the most blocks
    measured (the runtime's full grid), from (nbytes, blocks, seconds) rows.

    At each size the kernel's time is its fixed cost (`fused_latency_s` of `cluster`, the
    fitted one) plus the link time, so fraction = (t_full - L) / (t_blocks - L); several sizes
    are averaged. The fraction at the full grid is 1 by construction."""
    lat = float(fused_latency_s(cluster, P))
    by_size: dict[int, dict[int, float]] = {}
    for n, b, t in rows:
        if t <= lat:
            raise HardwareError(f"calibration raw file fused_blocks rows must take longer than "
                                f"the fused kernel's fixed cost ({lat * 1e6:.2f} us) to give a "
                                f"bandwidth, got {t * 1e6:.2f} us at nbytes {n}, blocks {b}; "
                                f"{FIX}")
        by_size.setdefault(n, {})[b] = t
    fractions: dict[int, list[float]] = {}
    for times in by_size.values():
        full = times[max(times)]
        for b, t in times.items():
            fractions.setdefault(b, []).append((full - lat) / (t - lat))
    return [(b, sum(f) / len(f)) for b, f in sorted(fractions.items())]


def fused_block_errors(rows: list[tuple[int, int, float]], P: int, cluster: Cluster
                       ) -> list[tuple[int, int, float]]:
    """(nbytes, blocks, predicted / measured - 1) of the fused kernel on fewer blocks."""
    lat = float(fused_latency_s(cluster, P))
    return [(n, b, (lat + float(fused_comm_time(n, n, P, cluster, blocks=b))) / t - 1)
            for n, b, t in rows]


# ---------------------------------------------------------------- the profile


def _sig(x: float) -> float:
    """Four significant digits: the measurements carry no more."""
    return float(f"{x:.4g}")


def fit(raw: dict, base: str = "h200x4", *, nccl_maxiter: int = 300,
        nccl_popsize: int = 15) -> Calibration:
    """Fit every profile field that the raw measurements determine (see the module table)."""
    P = int(raw["gpus"])
    cluster = preset(base)
    dev = raw["device"]
    flops = {k: _sig(v["flops"]) for k, v in dev["gemm"].items()}
    gpu = {"name": str(dev.get("name", cluster.gpu.name)),
           "sm_count": int(dev.get("sm_count", cluster.gpu.sm_count)),
           "hbm_bandwidth_Bps": _sig(dev["triad"]["Bps"]),
           "hbm_capacity_bytes": float(dev.get("hbm_capacity_bytes",
                                               cluster.gpu.hbm_capacity_bytes)),
           "peak_flops": flops,
           "launch_latency_s": _sig(dev["launch"]["eager_s_per_kernel"])}
    streams = dev.get("streams") or []
    streams16 = dev.get("streams_f16") or []
    hbm_f16 = None
    if streams:
        read_Bps, write_Bps = fit_hbm_read_write(streams)
        gpu["hbm_read_bandwidth_Bps"] = _sig(read_Bps)
        gpu["hbm_write_bandwidth_Bps"] = _sig(write_Bps)
        if streams16:
            # against the rates the profile holds (four digits), so that the f32 bytes of the
            # mixed rows are priced as the cost model will price them
            read_Bps, write_Bps = gpu["hbm_read_bandwidth_Bps"], gpu["hbm_write_bandwidth_Bps"]
            rates = {c: _sig(v) for c, v in
                     fit_hbm_f16_kernels(streams16, read_Bps, write_Bps).items()}
            if rates:
                gpu["hbm_f16_kernel_Bps"] = rates
            hbm_f16 = HbmF16Fit(rates, read_Bps, write_Bps, [], [])
    profile: dict = {"base": base, "name": f"calibrated-{P}gpu", "gpus_per_node": P, "gpu": gpu}
    dtypes = sorted(raw.get("collectives_by_dtype") or {}) if P > 1 else []
    if P > 1:
        nfit = fit_nccl(nccl_table(raw), P, cluster, popsize=nccl_popsize, maxiter=nccl_maxiter)
        profile["nccl"] = _nccl_fields(nfit.tuning)
        # each dtype's bandwidth constants, its latencies the f32 ones (`fit_nccl_bandwidth`)
        f32 = dataclasses.replace(cluster, nccl=nfit.tuning)
        for dtype in dtypes:
            dfit = fit_nccl_bandwidth(nccl_table(raw, dtype), P, f32)
            profile.setdefault("nccl_dtypes", {})[dtype] = _nccl_fields(dfit.tuning)
    p2p, p2p_path = p2p_rows(raw) if P > 1 else ([], "")
    issue = raw.get("host_issue") if P > 1 else None
    if p2p:
        # the latency is what remains beyond the host cost of the path the rows were timed on
        host_s = _apply(profile).nccl.host_overhead_s + (
            _host_delta(issue) if p2p_path == "nccl4py" else 0.0)
        latency_s, bandwidth_Bps = fit_p2p(p2p_kept(p2p), host_s)
        profile["p2p_latency_s"] = _sig(latency_s)
        profile["p2p_bandwidth_Bps"] = _sig(bandwidth_Bps)
    copies = copy_engine_rows(raw) if P > 1 else []
    copy_note = ""
    if copies:
        profile["copy_engine_bandwidth_Bps"] = _sig(fit_copy_engines(copies))
    elif P > 1 and raw.get("copy_engines_error"):
        copy_note = (f"copy engines not measured ({raw['copy_engines_error']}): "
                     f"copy_engine_bandwidth_Bps stays the base preset's "
                     f"({cluster.copy_engine_bandwidth_Bps / 1e9:.1f} GB/s)")
    dropout_s, dropout_note = fit_dropout(raw)
    if dropout_s is not None:
        gpu["dropout_element_s"] = _sig(dropout_s)
    fused = [(int(r["nbytes"]), float(r["ms"]) * 1e-3) for r in raw.get("fused", []) or []]
    if P > 1 and fused:
        # the fused kernel's fixed cost uses the calibrated launch gap: fit after the GPU fields
        partial = _apply(profile)
        k, fixed_s = fit_fused(fused, P, partial)
        profile["peer_load_bandwidth_Bps"] = _sig(k * cluster.peer_load_bandwidth_Bps)
        profile["peer_store_bandwidth_Bps"] = _sig(k * cluster.peer_store_bandwidth_Bps)
        if fixed_s > 0:  # profile numbers must be positive; 0 is the preset's default
            profile["fused_fixed_s"] = _sig(fixed_s)
    blocks = [(int(r["nbytes"]), int(r["blocks"]), float(r["ms"]) * 1e-3)
              for r in raw.get("fused_blocks", []) or []] if P > 1 else []
    if blocks:
        # the fractions subtract the fitted fixed cost: fit after the fused fields
        curve = fit_fused_blocks(blocks, P, _apply(profile))
        profile["fused_block_bandwidth"] = {str(b): _sig(f) for b, f in curve}
    final = _apply(profile)
    nccl_errors, nccl_worst, outliers = _nccl_errors(raw, "f32", P, final)
    by_dtype = {d: _nccl_errors(raw, d, P, final.for_dtype(d)) for d in dtypes}
    fused_errors = [(n, fused_allreduce_time(n, P, final) / t - 1) for n, t in fused] \
        if P > 1 else []
    fused_worst = max((abs(e) for _, e in fused_errors), default=None)
    if hbm_f16 is not None:
        flat = dataclasses.replace(final.gpu, hbm_f16_kernel_Bps=())
        hbm_f16 = dataclasses.replace(
            hbm_f16, errors=f16_stream_errors(streams16, final),
            errors_f32_rates=f16_stream_errors(streams16, dataclasses.replace(final, gpu=flat)))
    host_note = _runtime_host(profile, issue)
    runtime = _apply(profile)
    return Calibration(profile, runtime, nccl_worst, fused_worst, nccl_errors, fused_errors,
                       outliers, hbm_stream_errors(streams, final),
                       nccl_dtype_errors={d: e[0] for d, e in by_dtype.items()},
                       nccl_dtype_worst_error={d: e[1] for d, e in by_dtype.items()},
                       nccl_dtype_outliers={d: e[2] for d, e in by_dtype.items()},
                       hbm_f16=hbm_f16,
                       fused_block_errors=fused_block_errors(blocks, P, final),
                       p2p_errors=p2p_errors(p2p, runtime if p2p_path == "nccl4py"
                                             else final),
                       p2p_kept=p2p_kept(p2p), p2p_path=p2p_path,
                       host_note=host_note,
                       copy_engine_errors=copy_engine_errors(copies, final),
                       copy_engine_note=copy_note, dropout_note=dropout_note)


def p2p_rows(raw: dict) -> tuple[list[tuple[int, float]], str]:
    """The send/recv rows (nbytes, seconds) the fit uses and the path they were timed on:
    nccl4py's (the runtime's Sends) where every row has them, else torch.distributed's."""
    rows = raw.get("p2p", []) or []
    if rows and all("nccl4py_sendrecv_ms" in r for r in rows):
        return [(int(r["nbytes"]), float(r["nccl4py_sendrecv_ms"]) * 1e-3) for r in rows], \
            "nccl4py"
    return [(int(r["nbytes"]), float(r["sendrecv_ms"]) * 1e-3) for r in rows], \
        "torch.distributed" if rows else ""


def _host_delta(issue: dict | None) -> float:
    """nccl4py's host cost per NCCL call less torch.distributed's (0 when not measured)."""
    if not issue or "torch_allreduce_s" not in issue or "nccl4py_allreduce_s" not in issue:
        return 0.0
    return float(issue["nccl4py_allreduce_s"]) - float(issue["torch_allreduce_s"])


def _runtime_host(profile: dict, issue: dict | None) -> str:
    """Move the profile's NCCL host overhead (fitted on tables timed through torch.distributed)
    to the workbench runtime's NCCL path, nccl4py, by the difference of their measured host
    costs per call (`host_issue`; 2x H200, calibration run 4: 26.7 against 22.0 us for a
    4-byte all_reduce); the GPU-side constants stay (both paths run the same NCCL). Changes
    `profile` in place when `issue` has both costs; returns a line for the fit report. The
    fit errors stay the fitted (torch) constants' on the tables they were fitted to."""
    delta = _host_delta(issue)
    if not delta:
        return ""
    torch_s, runtime_s = float(issue["torch_allreduce_s"]), float(issue["nccl4py_allreduce_s"])
    fitted = profile["nccl"]["host_overhead_s"]
    for fields in [profile["nccl"], *profile.get("nccl_dtypes", {}).values()]:
        fields["host_overhead_s"] = _sig(max(fields["host_overhead_s"] + delta, 1e-9))
    return (f"NCCL host overhead per call: {fitted * 1e6:.2f} us fitted on the torch.distributed "
            f"tables; host issue measured {torch_s * 1e6:.1f} us through torch.distributed, "
            f"{runtime_s * 1e6:.1f} us through nccl4py (the runtime's); the profile holds "
            f"{profile['nccl']['host_overhead_s'] * 1e6:.2f} us, the runtime's")


def _nccl_fields(t: NcclTuning) -> dict:
    """The profile mapping of fitted NCCL constants (profile numbers must be positive: a
    latency fitted to 0 is written as 1 ns)."""
    return {"protocols": {p.name: {"base_latency_s": _sig(max(p.base_latency_s, 1e-9)),
                                   "step_latency_s": _sig(max(p.step_latency_s, 1e-9)),
                                   "efficiency": _sig(p.efficiency)} for p in t.protocols},
            "allreduce_bandwidth_factor": _sig(t.allreduce_bandwidth_factor),
            "host_overhead_s": _sig(max(t.host_overhead_s, 1e-9)),
            "collective_latency_s": {k: _sig(v) for k, v in t.collective_latency_s}}


def _nccl_errors(raw: dict, dtype: str, P: int, cluster: Cluster):
    """(errors, worst, left out) of `cluster` on the measured collectives of `dtype`: errors
    over every measured point (the report shows them all); the worst over the points the fit
    used (None when nothing was measured); the (nbytes, kind) it left out: outliers, and for
    f16/bf16 the latency-bound points too (`fit_nccl_bandwidth` fits bandwidth only)."""
    if P == 1:
        return [], None, []
    full = [(int(r["nbytes"]), {k: float(r[f"{k}_ms"]) * 1e-3 for k in KINDS})
            for r in collective_rows(raw, dtype)]
    errors = table_errors(full, P, cluster)
    used = nccl_table(raw, dtype)
    if dtype != "f32":
        used = bandwidth_bound(used, P, cluster)
    used_points = {(n, k) for n, row in used for k in row}
    left_out = [(n, k) for n, errs in errors for k in errs if (n, k) not in used_points]
    worst = max((abs(e) for n, errs in errors for k, e in errs.items()
                 if (n, k) in used_points), default=None)
    return errors, worst, left_out


def _apply(profile: dict) -> Cluster:
    """The cluster a profile mapping describes (through the same code as a profile file)."""
    from cost_model.hardware import override

    data = dict(profile)
    return override(preset(str(data.pop("base"))), data, prefix="")


def write(cal: Calibration, out: Path) -> list[Path]:
    """Write the profile JSON and a text report of the fit errors beside it; check that the
    written profile loads. Returns the paths written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(cal.profile, indent=1) + "\n")
    loaded = load_profile(out)
    if dataclasses.asdict(loaded) != dataclasses.asdict(cal.cluster):
        raise HardwareError(f"written profile {out} must load as the fitted cluster, got a "
                            f"different one; this is a bug in cost_model.calibration")
    report = out.with_suffix(".fit.txt")
    report.write_text(fit_report(cal))
    return [out, report]


def fit_report(cal: Calibration) -> str:
    """The fit errors as text (predicted / measured - 1 per measured point)."""
    lines = [f"profile {cal.profile.get('name')}: predicted / measured - 1 per measured point", ""]
    tables = [("f32", cal.nccl_errors, cal.nccl_worst_error, cal.nccl_outliers)]
    tables += [(d, cal.nccl_dtype_errors[d], cal.nccl_dtype_worst_error[d],
                cal.nccl_dtype_outliers[d]) for d in sorted(cal.nccl_dtype_errors)]
    for dtype, errors, worst, outliers in tables:
        if not errors:
            continue
        lines.append(f"{'nbytes':>12} " + " ".join(f"{k:>14}" for k in KINDS) + f"   ({dtype})")
        for n, errs in errors:
            lines.append(f"{n:>12} " + " ".join(f"{errs[k]:>+14.3f}" for k in KINDS))
        if dtype == "f32":
            lines.append(f"NCCL worst relative error: {worst:.3f} (outliers left out of the "
                         f"fit: {list(outliers) or 'none'})")
        else:
            used = sum(len(errs) for _, errs in errors) - len(outliers)
            lines.append(f"NCCL {dtype} (nccl_dtypes.{dtype}: bandwidth constants fitted on "
                         f"the {used} bandwidth-bound points, latencies f32's) worst relative "
                         f"error there: {worst:.3f}")
        lines.append("")
    if cal.fused_errors:
        lines.append(f"{'nbytes':>12} {'fused AR':>14}")
        for n, e in cal.fused_errors:
            lines.append(f"{n:>12} {e:>+14.3f}")
        lines.append(f"fused AllReduce worst relative error: {cal.fused_worst_error:.3f} "
                     f"(peer bandwidth and fixed cost "
                     f"{cal.cluster.fused_fixed_s * 1e6:.2f} us fitted on every size)")
        lines.append("")
    if cal.hbm_errors:
        g = cal.cluster.gpu
        lines.append(f"{'inputs':>7} {'outputs':>7} {'HBM k-stream kernel':>20}   (read "
                     f"{g.hbm_read_bandwidth_Bps / 1e12:.3f} TB/s, write "
                     f"{g.hbm_write_bandwidth_Bps / 1e12:.3f} TB/s)")
        for i, o, e in cal.hbm_errors:
            lines.append(f"{i:>7} {o:>7} {e:>+20.3f}")
        lines.append(f"HBM k-stream worst relative error: "
                     f"{max(abs(e) for _, _, e in cal.hbm_errors):.3f}")
        lines.append("")
    if cal.hbm_f16 is not None:
        h = cal.hbm_f16
        lines.append(f"{'f32 in, f16 in, f32 out, f16 out':>33} {'f32 rates':>10} "
                     f"{'profile':>10}   (mixed f16/f32 stream kernels)")
        for (shape, e32), (_, e) in zip(h.errors_f32_rates, h.errors):
            lines.append(f"{str(shape):>33} {e32:>+10.3f} {e:>+10.3f}")
        if h.rates:
            own = ", ".join(f"{c} {v / 1e12:.3f} TB/s" for c, v in h.rates.items())
            verdict = f"gpu.hbm_f16_kernel_Bps: {own}; other bytes at the f32 rates"
        else:
            verdict = (f"nothing written: the f32 rates predict every mixed kernel within "
                       f"{F16_RATE_TOLERANCE:.0%}")
        lines.append(f"mixed kernels (f32 kernels: read {h.f32_read_Bps / 1e12:.3f} TB/s, "
                     f"write {h.f32_write_Bps / 1e12:.3f} TB/s): {verdict}; worst "
                     f"{max(abs(e) for _, e in h.errors):.3f} (f32 rates "
                     f"{max(abs(e) for _, e in h.errors_f32_rates):.3f})")
        lines.append("")
    if cal.host_note:
        lines += [cal.host_note, ""]
    if cal.p2p_errors:
        c = cal.cluster
        lines.append(f"{'nbytes':>12} {'send/recv':>14}   (NCCL send/recv between two GPUs "
                     f"through {cal.p2p_path}: "
                     f"latency {c.p2p_latency_s * 1e6:.2f} us beyond the per-call host "
                     f"cost, "
                     f"{c.p2p_bandwidth_Bps / 1e9:.1f} GB/s)")
        kept = {n for n, _ in cal.p2p_kept}
        for n, e in cal.p2p_errors:
            lines.append(f"{n:>12} {e:>+14.3f}" + ("" if n in kept else "   (left out)"))
        lines.append(f"send/recv worst relative error on the fitted sizes: "
                     f"{max(abs(e) for n, e in cal.p2p_errors if n in kept):.3f}")
        lines.append("")
    if cal.copy_engine_errors:
        lines.append(f"{'nbytes':>12} {'peers':>6} {'copy engines':>14}   (pushes to every "
                     f"peer at once by copy engines: "
                     f"{cal.cluster.copy_engine_bandwidth_Bps / 1e9:.1f} GB/s per GPU per "
                     f"direction)")
        for n, peers, e in cal.copy_engine_errors:
            lines.append(f"{n:>12} {peers:>6} {e:>+14.3f}")
        lines.append(f"copy engines worst relative error: "
                     f"{max(abs(e) for _, _, e in cal.copy_engine_errors):.3f}")
        lines.append("")
    if cal.copy_engine_note:
        lines += [cal.copy_engine_note, ""]
    if cal.dropout_note:
        lines += [cal.dropout_note, ""]
    if cal.fused_block_errors:
        curve = dict((int(b), f) for b, f in cal.cluster.fused_block_bandwidth)
        lines.append(f"{'nbytes':>12} {'blocks':>7} {'bandwidth':>10} {'fused AR':>14}   "
                     f"(fused AllReduce on fewer blocks; bandwidth = fraction of the full grid)")
        for n, b, e in cal.fused_block_errors:
            lines.append(f"{n:>12} {b:>7} {curve[b]:>10.3f} {e:>+14.3f}")
        lines.append(f"fused AllReduce on fewer blocks worst relative error: "
                     f"{max(abs(e) for _, _, e in cal.fused_block_errors):.3f}")
    return "\n".join(lines).rstrip("\n") + "\n"


def synthetic_raw(cluster: Cluster, P: int, nbytes: list[int], fused_nbytes: list[int]) -> dict:
    """A raw file as `workbench calibrate` would measure it on `cluster` if the model were
    exact (for tests and dry runs): every time is the model's prediction."""
    from cost_model.collectives import collective_time

    g = cluster.gpu

    def rows(c: Cluster) -> list[dict]:
        return [{"nbytes": n, **{f"{k}_ms": collective_time(k, n, P, c) * 1e3 for k in KINDS}}
                for n in nbytes] if P > 1 else []

    raw = {
        "gpus": P,
        "device": {"name": g.name, "sm_count": g.sm_count,
                   "hbm_capacity_bytes": g.hbm_capacity_bytes,
                   "copy": {"Bps": g.hbm_bandwidth_Bps * 1.1},
                   "triad": {"Bps": g.hbm_bandwidth_Bps},
                   "launch": {"eager_s_per_kernel": g.launch_latency_s},
                   "gemm": {k: {"flops": v} for k, v in g.peak_flops},
                   **({"streams": [_synthetic_stream(g, i, o) for i, o in STREAM_SHAPES],
                       "streams_f16": [_synthetic_stream_f16(g, s) for s in F16_STREAM_SHAPES]}
                      if g.hbm_read_bandwidth_Bps is not None else {})},
        "collectives": rows(cluster),
        "fused": [{"nbytes": n, "ms": fused_allreduce_time(n, P, cluster) * 1e3}
                  for n in fused_nbytes],
    }
    if P > 1 and P % 2 == 0 and cluster.p2p_bandwidth_Bps:
        from cost_model.collectives import p2p_time

        raw["p2p"] = [{"nbytes": n, "sendrecv_ms": p2p_time(n, cluster, False) * 1e3}
                      for n in nbytes]
    if P > 1 and cluster.copy_engine_bandwidth_Bps:
        raw["copy_engines"] = [
            {"nbytes": n, "peers": P - 1, "ms": (P - 1) * n / cluster.copy_engine_bandwidth_Bps
             * 1e3, "Bps": cluster.copy_engine_bandwidth_Bps, "check": "ok"}
            for n in COPY_ENGINE_NBYTES]
    if P > 1 and cluster.nccl_dtypes:
        raw["collectives_by_dtype"] = {d: rows(cluster.for_dtype(d))
                                       for d, _ in cluster.nccl_dtypes}
    if P > 1 and cluster.fused_block_bandwidth:
        lat = float(fused_latency_s(cluster, P))
        raw["fused_blocks"] = [
            {"nbytes": FUSED_BLOCKS_NBYTES, "blocks": int(b),
             "ms": (lat + fused_comm_time(FUSED_BLOCKS_NBYTES, FUSED_BLOCKS_NBYTES, P, cluster,
                                          blocks=int(b))) * 1e3}
            for b, _ in cluster.fused_block_bandwidth]
    return raw


# The buffer of the fused kernel's block sweep (workbench/runtime/calibrate_worker.py): 256 MiB.
# On 2x H200 the full grid takes 0.81 ms there, 36x the kernel's fixed cost (22.6 us), so the
# time is bandwidth; fewer blocks only take longer.
FUSED_BLOCKS_NBYTES = 2**28


def fused_block_counts(sm_count: int, full_grid: int) -> list[int]:
    """The grids of the fused kernel's block sweep: sm_count / 32 .. sm_count blocks (one per
    SM, down to a handful), then the runtime's full grid."""
    counts = {max(1, sm_count // d) for d in (32, 16, 8, 4, 2, 1)} | {full_grid}
    return sorted(c for c in counts if c <= full_grid)


def _synthetic_stream_f16(g, shape: tuple[int, int, int, int], nbytes: int = 2**30) -> dict:
    row = dict(zip(F16_STREAM_KEYS, shape))
    per = 4 * (shape[0] + shape[2]) + 2 * (shape[1] + shape[3])  # bytes per element index
    row["numel"] = nbytes // per // 8 * 8
    by = f16_stream_bytes(row)
    total = sum(by.values())
    t = float(g.hbm_time_s(total, by["f32_write"] + by["f16_write"], by["f16_read"],
                           by["f16_write"]))
    return {**row, "nbytes": int(total), "ms": t * 1e3, "Bps": total / t}


# (inputs, outputs) of the calibration's k-stream kernels (workbench/runtime/calibrate_worker.py)
STREAM_SHAPES = [(1, 1), (2, 1), (4, 1), (6, 1), (8, 1), (4, 3), (5, 4)]


def _synthetic_stream(g, n_in: int, n_out: int, nbytes: int = 2**30) -> dict:
    k = n_in + n_out
    t = float(g.hbm_time_s(float(nbytes), float(nbytes) * n_out / k))
    return {"inputs": n_in, "outputs": n_out, "streams": k, "nbytes": nbytes, "ms": t * 1e3,
            "Bps": nbytes / t}
