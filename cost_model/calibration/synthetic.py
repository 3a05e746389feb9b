"""A raw calibration file as the model predicts it, for tests and dry runs."""

from __future__ import annotations

from cost_model.calibration.fits import f16_stream_bytes, fused_allreduce_time
from cost_model.calibration.nccl import KINDS
from cost_model.calibration.raw import (
    COPY_ENGINE_NBYTES,
    F16_STREAM_KEYS,
    F16_STREAM_SHAPES,
    FUSED_BLOCKS_NBYTES,
    STREAM_SHAPES,
)
from cost_model.collectives import collective_time, fused_comm_time, fused_latency_s, p2p_time
from cost_model.hardware import Cluster
from workbench.options import UNROLLS


def synthetic_raw(cluster: Cluster, P: int, nbytes: list[int], fused_nbytes: list[int]) -> dict:
    """A raw file as `workbench calibrate` would measure it on `cluster` if the model were
    exact (for tests and dry runs): every time is the model's prediction."""
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
    if P > 1 and cluster.fused_unroll_bandwidth:
        lat = float(fused_latency_s(cluster, P))
        raw["fused_unroll"] = [
            {"nbytes": FUSED_BLOCKS_NBYTES, "unroll": u,
             "ms": (lat + fused_comm_time(FUSED_BLOCKS_NBYTES, FUSED_BLOCKS_NBYTES, P, cluster,
                                          unroll=u)) * 1e3}
            for u in UNROLLS]
    return raw


def _synthetic_stream_f16(g, shape: tuple[int, int, int, int], nbytes: int = 2**30) -> dict:
    row = dict(zip(F16_STREAM_KEYS, shape))
    per = 4 * (shape[0] + shape[2]) + 2 * (shape[1] + shape[3])  # bytes per element index
    row["numel"] = nbytes // per // 8 * 8
    by = f16_stream_bytes(row)
    total = sum(by.values())
    t = float(g.hbm_time_s(total, by["f32_write"] + by["f16_write"], by["f16_read"],
                           by["f16_write"]))
    return {**row, "nbytes": int(total), "ms": t * 1e3, "Bps": total / t}


def _synthetic_stream(g, n_in: int, n_out: int, nbytes: int = 2**30) -> dict:
    k = n_in + n_out
    t = float(g.hbm_time_s(float(nbytes), float(nbytes) * n_out / k))
    return {"inputs": n_in, "outputs": n_out, "streams": k, "nbytes": nbytes, "ms": t * 1e3,
            "Bps": nbytes / t}
