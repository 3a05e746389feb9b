"""The fit report (predicted / measured - 1 per measured point) and writing the profile."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from cost_model.calibration.fits import F16_RATE_TOLERANCE
from cost_model.calibration.nccl import KINDS
from cost_model.calibration.profile import Calibration
from cost_model.hardware import load_profile
from workbench.errors import HardwareError
from workbench.files import write_atomic


def write(cal: Calibration, out: Path) -> list[Path]:
    """Write the profile JSON and a text report of the fit errors beside it; check that the
    written profile loads. Returns the paths written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, json.dumps(cal.profile, indent=1) + "\n")
    loaded = load_profile(out)
    if dataclasses.asdict(loaded) != dataclasses.asdict(cal.cluster):
        raise HardwareError(f"written profile {out} must load as the fitted cluster, got a "
                            f"different one; this is a bug in cost_model.calibration")
    report = out.with_suffix(".fit.txt")
    write_atomic(report, fit_report(cal))
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
        lines.append("")
    if cal.fused_unroll_errors:
        curve = {int(u): f for u, f in cal.cluster.fused_unroll_bandwidth}
        lines.append(f"{'nbytes':>12} {'unroll':>7} {'bandwidth':>10} {'fused AR':>14}   "
                     f"(fused AllReduce by vectors per thread per iteration; bandwidth = "
                     f"factor on unroll 1's)")
        for n, u, e in cal.fused_unroll_errors:
            lines.append(f"{n:>12} {u:>7} {curve.get(u, 1.0):>10.4f} {e:>+14.3f}")
        lines.append(f"fused AllReduce by unroll worst relative error: "
                     f"{max(abs(e) for _, _, e in cal.fused_unroll_errors):.3f}")
    return "\n".join(lines).rstrip("\n") + "\n"
