"""Fit the NCCL constants of the collective model to a measured table, and check a fit.

    python -m cost_model.calibration.nccl          # H200_NCCL's predicted/measured - 1
    python -m cost_model.calibration.nccl --refit  # fit again (differential evolution), same

How H200_NCCL (cost_model/hardware.py) was fitted: the model of cost_model/collectives.py with
free host overhead, per-kind latency (AR, RS; AG = 0), per-protocol (base latency, step latency,
efficiency) and the AllReduce bandwidth factor, minimising the worst relative error over the 24
points of cost_model/data/nccl_h200x4.csv with scipy.optimize.differential_evolution (seed 0,
popsize 30).
Worst error: 12.4% (AllReduce at 256 KiB, 16 MiB; ReduceScatter at 4 MiB, 256 MiB).

`fit_nccl` is that fit as a function of any measured table, group size and base cluster:
`workbench calibrate` (cost_model.calibration.profile.fit) calls it on the f32 table it
measured, and `fit_nccl_bandwidth` (the bandwidth constants only, from the f32 fit) on the f16
and bf16 ones.
"""

from __future__ import annotations

import csv
import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

from cost_model.collectives import choose_plan, collective_time
from cost_model.hardware import Cluster, NcclTuning, Protocol, preset
from workbench.errors import HardwareError

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl_h200x4.csv"
KINDS = ("allreduce", "reducescatter", "allgather")

# A measured table: one row per buffer size, (nbytes, {kind: measured seconds}).
Table = list[tuple[int, dict[str, float]]]

# Search box of the free parameters (seconds, fractions). Wide enough to hold every fitted value
# seen so far (H200_NCCL) with room on both sides; efficiencies stay under 1 (a protocol cannot
# beat its link). The AllReduce factor was 0.95 on 4 GPUs, but on 2 GPUs NCCL's AllReduce reaches
# 1.2x the bus bandwidth of its ReduceScatter (calibration h200x2: 323 vs 266 GB/s at 1 GiB).
_LATENCY_BOUND_S = (0.0, 30e-6)
_STEP_BOUND_S = (0.0, 10e-6)
_HOST_BOUND_S = (0.0, 100e-6)
_EFFICIENCY_BOUND = (0.05, 1.0)
_FACTOR_BOUND = (0.5, 2.0)


@dataclass(frozen=True, slots=True)
class NcclFit:
    """The result of `fit_nccl`: the fitted constants and their worst relative error."""

    tuning: NcclTuning
    worst_error: float


def read_table(path: Path) -> Table:
    """A CSV of `nbytes,allreduce_ms,reducescatter_ms,allgather_ms` ('#' lines are comments)
    -> Table in seconds."""
    with open(path) as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    return [(int(r["nbytes"]), {k: float(r[f"{k}_ms"]) * 1e-3 for k in KINDS
                                if r.get(f"{k}_ms") not in (None, "")}) for r in rows]


def table_errors(table: Table, P: int, cluster: Cluster) -> list[tuple[int, dict[str, float]]]:
    """(nbytes, {kind: predicted / measured - 1}) for every point of a measured table."""
    return [(n, {k: collective_time(k, n, P, cluster) / t - 1 for k, t in row.items()})
            for n, row in table]


def _vector(nccl: NcclTuning) -> list[float]:
    """NcclTuning -> the free parameters, in the order `_tuning` reads them."""
    x = [nccl.host_overhead_s, nccl.kind_latency_s("allreduce"),
         nccl.kind_latency_s("reducescatter"), nccl.allreduce_bandwidth_factor]
    for p in nccl.protocols:
        x += [p.base_latency_s, p.step_latency_s, p.efficiency]
    return x


def _bounds(nccl: NcclTuning) -> list[tuple[float, float]]:
    return ([_HOST_BOUND_S, _LATENCY_BOUND_S, _LATENCY_BOUND_S, _FACTOR_BOUND]
            + [_LATENCY_BOUND_S, _STEP_BOUND_S, _EFFICIENCY_BOUND] * len(nccl.protocols))


def _tuning(x, base: NcclTuning) -> NcclTuning:
    """The free parameters -> NcclTuning (the rest, e.g. channels, from `base`)."""
    host, lat_ar, lat_rs, factor = (float(v) for v in x[:4])
    protocols = tuple(Protocol(p.name, float(x[4 + 3 * i]), float(x[5 + 3 * i]),
                               float(x[6 + 3 * i])) for i, p in enumerate(base.protocols))
    # AllGather's own latency stays 0: it is not separable from the host overhead (the fit of
    # H200_NCCL found the same); Reduce runs the ReduceScatter reduction kernel.
    latency = dict(base.collective_latency_s, allreduce=lat_ar, reducescatter=lat_rs,
                   reduce=lat_rs, allgather=0.0)
    return dataclasses.replace(base, protocols=protocols, allreduce_bandwidth_factor=factor,
                               host_overhead_s=host, collective_latency_s=tuple(latency.items()))


def _worst(x, table: Table, P: int, cluster: Cluster) -> float:
    """The objective: worst |relative error| over the table for parameters x."""
    c = dataclasses.replace(cluster, nccl=_tuning(x, cluster.nccl))
    return max(abs(e) for _, errs in table_errors(table, P, c) for e in errs.values())


def fit_nccl(table: Table, P: int, cluster: Cluster, *, seed: int = 0, popsize: int = 30,
             maxiter: int = 1000) -> NcclFit:
    """Fit the NCCL constants of `cluster` to a measured table of a group of P GPUs.

    Minimises the worst relative error (not squared error: the studies need every size right,
    and the small sizes are latency bound while the large ones are bandwidth bound) with
    scipy.optimize.differential_evolution, started from `cluster`'s own constants (so the fit
    is never worse than them on this table)."""
    # imported here: scipy.optimize takes most of a second to import, and only the NCCL
    # fits need it (not the CLI's other commands, nor the GPU ranks of `workbench calibrate`)
    from scipy.optimize import differential_evolution

    result = differential_evolution(
        _worst, _bounds(cluster.nccl), args=(table, P, cluster), seed=seed, popsize=popsize,
        maxiter=maxiter, tol=1e-4, polish=False,  # L-BFGS polishing does not suit a max
        x0=[min(max(v, lo), hi) for v, (lo, hi) in zip(_vector(cluster.nccl),
                                                      _bounds(cluster.nccl))])
    return NcclFit(_tuning(result.x, cluster.nccl), float(result.fun))


# A measured point is bandwidth bound when it takes at least this many times the model's time of
# a 1-byte collective of its kind (the latency): there the bandwidth constants set the time.
BANDWIDTH_BOUND_FACTOR = 2.0


def bandwidth_bound(table: Table, P: int, cluster: Cluster) -> Table:
    """The points of a measured table that are bandwidth bound under `cluster`'s constants
    (see BANDWIDTH_BOUND_FACTOR); sizes left with no point are dropped."""
    out = []
    for n, row in table:
        kept = {k: t for k, t in row.items()
                if t >= BANDWIDTH_BOUND_FACTOR * collective_time(k, 1, P, cluster)}
        if kept:
            out.append((n, kept))
    return out


def _bandwidth_tuning(x, base: NcclTuning) -> NcclTuning:
    """(AllReduce factor, efficiency per protocol) -> NcclTuning, the rest from `base`."""
    return dataclasses.replace(
        base, allreduce_bandwidth_factor=float(x[0]),
        protocols=tuple(dataclasses.replace(p, efficiency=float(e))
                        for p, e in zip(base.protocols, x[1:])))


def _bandwidth_worst(x, table: Table, P: int, cluster: Cluster) -> float:
    c = dataclasses.replace(cluster, nccl=_bandwidth_tuning(x, cluster.nccl))
    return max(abs(e) for _, errs in table_errors(table, P, c) for e in errs.values())


def fit_nccl_bandwidth(table: Table, P: int, cluster: Cluster, *, seed: int = 0,
                       popsize: int = 15, maxiter: int = 300) -> NcclFit:
    """Fit only the bandwidth constants of `cluster`'s NCCL model (the AllReduce bandwidth
    factor and each protocol's efficiency) to the bandwidth-bound points of a measured table,
    keeping its latencies (host overhead, per-kind and per-protocol latencies): minimax
    relative error by differential evolution, started from `cluster`'s values.

    Calibration fits each collective dtype (f16, bf16) this way from the f32 constants: an
    element type changes how fast NCCL reduces and moves bytes, not what a call costs to issue
    or a protocol step to start. The small sizes cannot tell them apart anyway: in the second
    2x H200 calibration the f16 and bf16 sweeps, run after the f32 one, took half the time at
    64 KiB even for all_gather, which does no arithmetic (warm-up, not dtype); a full
    `fit_nccl` of that f16 table would have priced every small f16 collective 2x faster. With
    four free constants it takes a few seconds (a full `fit_nccl` takes ~90)."""
    from scipy.optimize import differential_evolution

    points = bandwidth_bound(table, P, cluster)
    if not points:
        raise HardwareError(f"a measured NCCL table must hold bandwidth-bound points (at least "
                            f"{BANDWIDTH_BOUND_FACTOR:g}x the model's 1-byte time) to fit "
                            f"bandwidth constants, got sizes {[n for n, _ in table]}; measure "
                            f"up to 1 GiB as `workbench calibrate` does")
    bounds = [_FACTOR_BOUND] + [_EFFICIENCY_BOUND] * len(cluster.nccl.protocols)
    x0 = [cluster.nccl.allreduce_bandwidth_factor] + [p.efficiency
                                                       for p in cluster.nccl.protocols]
    result = differential_evolution(
        _bandwidth_worst, bounds, args=(points, P, cluster), seed=seed, popsize=popsize,
        maxiter=maxiter, tol=1e-4, polish=False,
        x0=[min(max(v, lo), hi) for v, (lo, hi) in zip(x0, bounds)])
    return NcclFit(_bandwidth_tuning(result.x, cluster.nccl), float(result.fun))


def errors() -> list[tuple[int, dict]]:
    """(nbytes, {kind: predicted / measured - 1}) of H200_NCCL on the 4x H200 table."""
    return table_errors(read_table(DATA), 4, preset("h200x4"))


def print_errors(table: Table, P: int, cluster: Cluster) -> float:
    """Print the error table of `cluster` on a measured table; return the worst error."""
    print(f"{'nbytes':>12} " + " ".join(f"{k:>14}" for k in KINDS) + "  AR protocol")
    worst = 0.0
    for n, errs in table_errors(table, P, cluster):
        worst = max(worst, *(abs(e) for e in errs.values()))
        proto = choose_plan("allreduce", n, P, cluster).protocol
        print(f"{n:>12} " + " ".join(f"{errs.get(k, float('nan')):>+14.3f}" for k in KINDS)
              + f"  {proto}")
    print(f"worst relative error: {worst:.3f}")
    return worst


def main() -> None:
    """`python -m cost_model.calibration.nccl [--refit]`: see the module docstring."""
    cluster = preset("h200x4")
    table = read_table(DATA)
    if "--refit" in sys.argv[1:]:
        fit = fit_nccl(table, 4, cluster)
        cluster = dataclasses.replace(cluster, nccl=fit.tuning)
        print(fit.tuning)
    print_errors(table, 4, cluster)


if __name__ == "__main__":
    main()
