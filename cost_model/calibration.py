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
| nccl.* | `cost_model.fit.fit_nccl` on the measured all_reduce/reduce_scatter/all_gather table |
| peer_load/store_bandwidth_Bps | the fused AllReduce kernel (benchmarks/gpu/allreduce.py, no |
| | computation) across sizes, inverted through the model of its time |
| fused_fixed_s | the same rows: the fixed cost beyond launch gap and barrier hops (`fit_fused`) |

What is not measured stays the base preset's (NVLink datasheet bandwidth, NIC, channels).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from cost_model.collectives import fused_comm_time, fused_latency_s
from cost_model.fit import KINDS, Table, fit_nccl, table_errors
from cost_model.hardware import Cluster, load_profile, preset
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
        for row in rows:
            if not isinstance(row, dict) or any(not _positive(row.get(f"{k}_ms"))
                                                for k in KINDS) or not _positive(
                                                    row.get("nbytes")):
                raise HardwareError(f"calibration raw file {path} collective rows must give "
                                    f"nbytes and {', '.join(f'{k}_ms' for k in KINDS)} as "
                                    f"positive numbers, got {row!r}; {FIX}")
    streams = dev.get("streams")
    if streams is not None:
        if not isinstance(streams, list):
            raise HardwareError(f"calibration raw file {path} device.streams must be a list of "
                                f"rows, got {streams!r}; {FIX}")
        for row in streams:
            if not isinstance(row, dict) or not all(
                    _positive(row.get(k)) for k in ("inputs", "outputs", "nbytes", "ms")) \
                    or any(not isinstance(row[k], int) for k in ("inputs", "outputs")):
                raise HardwareError(f"calibration raw file {path} device.streams rows must give "
                                    f"inputs and outputs as positive integers and nbytes and ms "
                                    f"as positive numbers, got {row!r}; {FIX}")
    for row in raw.get("fused", []) or []:
        if not isinstance(row, dict) or not _positive(row.get("nbytes")) \
                or not _positive(row.get("ms")):
            raise HardwareError(f"calibration raw file {path} fused rows must give nbytes and "
                                f"ms as positive numbers, got {row!r}; {FIX}")
    return raw


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 and math.isfinite(x)


# A collective's time cannot fall as its buffer grows: a point slower than this factor times a
# larger size's time of the same kind is a disturbed measurement (calibration h200x2: a
# ReduceScatter of 1 MiB took 53 us between 30 us at 512 KiB and 32 us at 2 MiB). The fit
# minimises the worst error, so one such point would set it; it is left out and reported.
OUTLIER_FACTOR = 1.2


def nccl_table(raw: dict) -> Table:
    """The raw file's collective rows as a fit Table (seconds), outliers left out."""
    table = [(int(r["nbytes"]), {k: float(r[f"{k}_ms"]) * 1e-3 for k in KINDS})
             for r in sorted(raw.get("collectives", []), key=lambda r: r["nbytes"])]
    out = []
    for i, (n, row) in enumerate(table):
        kept = {k: t for k, t in row.items()
                if all(t <= OUTLIER_FACTOR * later[k] for _, later in table[i + 1:])}
        out.append((n, kept))
    return out


def nccl_outliers(raw: dict) -> list[tuple[int, str]]:
    """(nbytes, kind) of the measured points that `nccl_table` leaves out."""
    kept = dict(nccl_table(raw))
    return [(int(r["nbytes"]), k) for r in raw.get("collectives", []) for k in KINDS
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


def hbm_stream_errors(rows: list[dict], cluster: Cluster) -> list[tuple[int, int, float]]:
    """(inputs, outputs, predicted / measured - 1) of the k-stream rows under `cluster`."""
    out = []
    for r in rows:
        k = r["inputs"] + r["outputs"]
        writes = float(r["nbytes"]) * r["outputs"] / k
        t = float(cluster.gpu.hbm_time_s(float(r["nbytes"]), writes))
        out.append((r["inputs"], r["outputs"], t / (float(r["ms"]) * 1e-3) - 1))
    return out


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
    if streams:
        read_Bps, write_Bps = fit_hbm_read_write(streams)
        gpu["hbm_read_bandwidth_Bps"] = _sig(read_Bps)
        gpu["hbm_write_bandwidth_Bps"] = _sig(write_Bps)
    profile: dict = {"base": base, "name": f"calibrated-{P}gpu", "gpus_per_node": P, "gpu": gpu}
    nccl_worst = None
    if P > 1:
        nfit = fit_nccl(nccl_table(raw), P, cluster, popsize=nccl_popsize, maxiter=nccl_maxiter)
        t = nfit.tuning
        profile["nccl"] = {
            # profile numbers must be positive: a latency fitted to 0 is written as 1 ns
            "protocols": {p.name: {"base_latency_s": _sig(max(p.base_latency_s, 1e-9)),
                                   "step_latency_s": _sig(max(p.step_latency_s, 1e-9)),
                                   "efficiency": _sig(p.efficiency)} for p in t.protocols},
            "allreduce_bandwidth_factor": _sig(t.allreduce_bandwidth_factor),
            "host_overhead_s": _sig(max(t.host_overhead_s, 1e-9)),
            "collective_latency_s": {k: _sig(v) for k, v in t.collective_latency_s}}
    fused = [(int(r["nbytes"]), float(r["ms"]) * 1e-3) for r in raw.get("fused", []) or []]
    if P > 1 and fused:
        # the fused kernel's fixed cost uses the calibrated launch gap: fit after the GPU fields
        partial = _apply(profile)
        k, fixed_s = fit_fused(fused, P, partial)
        profile["peer_load_bandwidth_Bps"] = _sig(k * cluster.peer_load_bandwidth_Bps)
        profile["peer_store_bandwidth_Bps"] = _sig(k * cluster.peer_store_bandwidth_Bps)
        if fixed_s > 0:  # profile numbers must be positive; 0 is the preset's default
            profile["fused_fixed_s"] = _sig(fixed_s)
    final = _apply(profile)
    # errors over every measured point, outliers included: the report shows what they are
    full = [(int(r["nbytes"]), {k: float(r[f"{k}_ms"]) * 1e-3 for k in KINDS})
            for r in raw.get("collectives", [])]
    nccl_errors = table_errors(full, P, final) if P > 1 else []
    outliers = nccl_outliers(raw) if P > 1 else []
    if nccl_errors:
        nccl_worst = max(abs(e) for n, errs in nccl_errors for k, e in errs.items()
                         if (n, k) not in outliers)
    fused_errors = [(n, fused_allreduce_time(n, P, final) / t - 1) for n, t in fused] \
        if P > 1 else []
    fused_worst = max((abs(e) for _, e in fused_errors), default=None)
    return Calibration(profile, final, nccl_worst, fused_worst, nccl_errors, fused_errors,
                       outliers, hbm_stream_errors(streams, final))


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
    if cal.nccl_errors:
        lines.append(f"{'nbytes':>12} " + " ".join(f"{k:>14}" for k in KINDS))
        for n, errs in cal.nccl_errors:
            lines.append(f"{n:>12} " + " ".join(f"{errs[k]:>+14.3f}" for k in KINDS))
        lines.append(f"NCCL worst relative error: {cal.nccl_worst_error:.3f} (outliers left "
                     f"out of the fit: {list(cal.nccl_outliers) or 'none'})")
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
    return "\n".join(lines) + "\n"


def synthetic_raw(cluster: Cluster, P: int, nbytes: list[int], fused_nbytes: list[int]) -> dict:
    """A raw file as `workbench calibrate` would measure it on `cluster` if the model were
    exact (for tests and dry runs): every time is the model's prediction."""
    from cost_model.collectives import collective_time

    g = cluster.gpu
    return {
        "gpus": P,
        "device": {"name": g.name, "sm_count": g.sm_count,
                   "hbm_capacity_bytes": g.hbm_capacity_bytes,
                   "copy": {"Bps": g.hbm_bandwidth_Bps * 1.1},
                   "triad": {"Bps": g.hbm_bandwidth_Bps},
                   "launch": {"eager_s_per_kernel": g.launch_latency_s},
                   "gemm": {k: {"flops": v} for k, v in g.peak_flops},
                   **({"streams": [_synthetic_stream(g, i, o) for i, o in STREAM_SHAPES]}
                      if g.hbm_read_bandwidth_Bps is not None else {})},
        "collectives": [{"nbytes": n, **{f"{k}_ms": collective_time(k, n, P, cluster) * 1e3
                                         for k in KINDS}} for n in nbytes] if P > 1 else [],
        "fused": [{"nbytes": n, "ms": fused_allreduce_time(n, P, cluster) * 1e3}
                  for n in fused_nbytes],
    }


# (inputs, outputs) of the calibration's k-stream kernels (workbench/runtime/calibrate_worker.py)
STREAM_SHAPES = [(1, 1), (2, 1), (4, 1), (6, 1), (8, 1), (4, 3), (5, 4)]


def _synthetic_stream(g, n_in: int, n_out: int, nbytes: int = 2**30) -> dict:
    k = n_in + n_out
    t = float(g.hbm_time_s(float(nbytes), float(nbytes) * n_out / k))
    return {"inputs": n_in, "outputs": n_out, "streams": k, "nbytes": nbytes, "ms": t * 1e3,
            "Bps": nbytes / t}
