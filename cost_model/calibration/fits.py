"""The fits of the GPU's and the links' constants, each with the errors it leaves.

HBM read/write rates from the k-stream kernels, the byte classes of mixed f16/f32 kernels, the
dropout hashing cost, the fused AllReduce kernel's peer bandwidth, fixed cost, block curve and
unroll curve,
NCCL send/recv latency and bandwidth, and the copy engines' bandwidth. The NCCL collectives'
constants are fitted in cost_model.calibration.nccl; cost_model.calibration.profile puts every
fit into one profile.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from cost_model.calibration.raw import F16_STREAM_KEYS, FIX, OUTLIER_FACTOR
from cost_model.collectives import fused_comm_time, fused_latency_s, p2p_time
from cost_model.hardware import F16_KERNEL_CLASSES, Cluster
from workbench.errors import HardwareError

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


def _check_above_fixed_cost(table: str, knob: str, n: int, k: int, t: float, lat: float):
    """A row of a fused-kernel sweep must take longer than the kernel's fixed cost, or it
    gives no bandwidth."""
    if t <= lat:
        raise HardwareError(f"calibration raw file {table} rows must take longer than the "
                            f"fused kernel's fixed cost ({lat * 1e6:.2f} us) to give a "
                            f"bandwidth, got {t * 1e6:.2f} us at nbytes {n}, {knob} {k}; {FIX}")


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
        _check_above_fixed_cost("fused_blocks", "blocks", n, b, t, lat)
        by_size.setdefault(n, {})[b] = t
    fractions: dict[int, list[float]] = {}
    for times in by_size.values():
        full = times[max(times)]
        for b, t in times.items():
            fractions.setdefault(b, []).append((full - lat) / (t - lat))
    return [(b, sum(f) / len(f)) for b, f in sorted(fractions.items())]


def _fused_errors(rows: list[tuple[int, int, float]], P: int, cluster: Cluster, knob: str
                  ) -> list[tuple[int, int, float]]:
    """(nbytes, knob's value, predicted / measured - 1) of the fused AllReduce kernel, the
    knob (`blocks` or `unroll` of fused_comm_time) at each row's value."""
    lat = float(fused_latency_s(cluster, P))
    return [(n, k, (lat + float(fused_comm_time(n, n, P, cluster, **{knob: k}))) / t - 1)
            for n, k, t in rows]


def fused_block_errors(rows: list[tuple[int, int, float]], P: int, cluster: Cluster
                       ) -> list[tuple[int, int, float]]:
    """(nbytes, blocks, predicted / measured - 1) of the fused kernel on fewer blocks."""
    return _fused_errors(rows, P, cluster, "blocks")


def fit_fused_unrolls(rows: list[tuple[int, int, float]], P: int, cluster: Cluster
                      ) -> list[tuple[int, float]]:
    """(unroll, factor) per measured unroll: the fused AllReduce kernel's peer bandwidth
    generated at that unroll as a factor on the unroll 1 kernel's (design note 95), from
    (nbytes, unroll, seconds) rows on the full grid.

    As `fit_fused_blocks`: the time is the kernel's fixed cost L plus its link time, so
    factor = (t_1 - L) / (t_u - L) at each size, averaged over sizes; rows of one size and
    unroll (unroll 1 measured first and last) are averaged first. Unroll 1 is 1 by
    construction."""
    lat = float(fused_latency_s(cluster, P))
    by_size: dict[int, dict[int, list[float]]] = {}
    for n, u, t in rows:
        _check_above_fixed_cost("fused_unroll", "unroll", n, u, t, lat)
        by_size.setdefault(n, {}).setdefault(u, []).append(t)
    factors: dict[int, list[float]] = {}
    for n, times in sorted(by_size.items()):
        if 1 not in times:
            raise HardwareError(f"calibration raw file fused_unroll rows must hold unroll 1 at "
                                f"every size (the curve's reference), got unrolls "
                                f"{sorted(times)} at nbytes {n}; {FIX}")
        mean = {u: sum(ts) / len(ts) for u, ts in times.items()}
        for u, t in mean.items():
            factors.setdefault(u, []).append((mean[1] - lat) / (t - lat))
    return [(u, sum(f) / len(f)) for u, f in sorted(factors.items())]


def fused_unroll_errors(rows: list[tuple[int, int, float]], P: int, cluster: Cluster
                        ) -> list[tuple[int, int, float]]:
    """(nbytes, unroll, predicted / measured - 1) of the fused kernel at each unroll."""
    return _fused_errors(rows, P, cluster, "unroll")


# ---------------------------------------------------------------- HBM streams


def fit_hbm_read_write(rows: list[dict]) -> tuple[float, float]:
    """(read_Bps, write_Bps) from the k-stream kernel rows (inputs, outputs, nbytes, ms; the
    nbytes split evenly over the inputs + outputs arrays): least squares of the relative error
    of time = read bytes / R + written bytes / W (linear in 1/R and 1/W)."""
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
    2x H200 (records/calibration/h200x2-run2) the data decided: f16 bytes stream at
    the f32 rates (f16 in, f16 out 3.85 TB/s, as f32's 1 in + 1 out), and so do f32 reads at
    8 per lane (f32 in, f16 out 3.97), but f32 writes at 8 per lane (two 16-byte stores 32
    bytes apart per lane) are slow: f16 in, f32 out 2.62 TB/s. Selected: f32_write at
    2.43 TB/s (f32 kernels 3.56), worst error 30 % -> 7 %; freeing f32_read too would buy
    1.5 points, under the threshold."""
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


# ---------------------------------------------------------------- send/recv


def p2p_kept(rows: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """The send/recv rows the fit uses: as for the collectives (`nccl_table`), a size slower
    than OUTLIER_FACTOR times a larger size's time is left out (2x H200, calibration run 3:
    64 KiB .. 4 MiB took 74-92 us, 8 MiB 55 us)."""
    rows = sorted(rows)
    return [(n, t) for i, (n, t) in enumerate(rows)
            if all(t <= OUTLIER_FACTOR * later for _, later in rows[i + 1:])]


# A send/recv row is bandwidth bound when it takes at least this many times the fastest one (the
# latency); as cost_model.calibration.nccl.BANDWIDTH_BOUND_FACTOR for the collectives.
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


def p2p_errors(rows: list[tuple[int, float]], cluster: Cluster) -> list[tuple[int, float]]:
    """(nbytes, predicted / measured - 1) of the cluster's send/recv on the measured rows."""
    return [(n, p2p_time(n, cluster, False) / t - 1) for n, t in rows]


# ---------------------------------------------------------------- copy engines


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


def copy_engine_errors(rows: list[tuple[int, int, float]], cluster: Cluster
                       ) -> list[tuple[int, int, float]]:
    """(nbytes per peer, peers, predicted / measured - 1) of the copy-engine pushes under
    `cluster` (bytes per direction / its copy_engine_bandwidth_Bps)."""
    return [(n, peers, peers * n / cluster.copy_engine_bandwidth_Bps / t - 1)
            for n, peers, t in rows]


# ---------------------------------------------------------------- dropout


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
