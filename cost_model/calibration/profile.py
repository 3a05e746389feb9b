"""Every fit of a raw file together: the profile mapping, the cluster it describes, and the
errors each fit leaves (what the fit report shows)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from cost_model.calibration.fits import (
    copy_engine_errors,
    f16_stream_errors,
    fit_copy_engines,
    fit_dropout,
    fit_fused,
    fit_fused_blocks,
    fit_fused_unrolls,
    fit_hbm_f16_kernels,
    fit_hbm_read_write,
    fit_p2p,
    fused_allreduce_time,
    fused_block_errors,
    fused_unroll_errors,
    hbm_stream_errors,
    p2p_errors,
    p2p_kept,
)
from cost_model.calibration.nccl import (
    KINDS,
    bandwidth_bound,
    fit_nccl,
    fit_nccl_bandwidth,
    table_errors,
)
from cost_model.calibration.raw import collective_rows, copy_engine_rows, nccl_table, p2p_rows
from cost_model.hardware import Cluster, NcclTuning, preset, profile_cluster


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
    # (nbytes, unroll, predicted / measured - 1) of the fused kernel at each unroll
    fused_unroll_errors: list = ()
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


def _sig(x: float) -> float:
    """Four significant digits: the measurements carry no more."""
    return float(f"{x:.4g}")


def fit(raw: dict, base: str = "h200x4", *, nccl_maxiter: int = 300,
        nccl_popsize: int = 15) -> Calibration:
    """Fit every profile field that the raw measurements determine (the table in
    cost_model.calibration's docstring says which measurement sets which field)."""
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
    unrolls = [(int(r["nbytes"]), int(r["unroll"]), float(r["ms"]) * 1e-3)
               for r in raw.get("fused_unroll", []) or []] if P > 1 else []
    if unrolls:
        # relative to unroll 1 at the same grid: the fitted fixed cost is subtracted
        curve = fit_fused_unrolls(unrolls, P, _apply(profile))
        profile["fused_unroll_bandwidth"] = {str(u): _sig(f) for u, f in curve}
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
                       fused_unroll_errors=fused_unroll_errors(unrolls, P, final),
                       p2p_errors=p2p_errors(p2p, runtime if p2p_path == "nccl4py"
                                             else final),
                       p2p_kept=p2p_kept(p2p), p2p_path=p2p_path,
                       host_note=host_note,
                       copy_engine_errors=copy_engine_errors(copies, final),
                       copy_engine_note=copy_note, dropout_note=dropout_note)


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
    return profile_cluster(profile, "the fitted profile")
