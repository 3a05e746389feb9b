"""The simulator's AllToAll: NCCL's latency, then the GPU's link for the bandwidth part of the
cost model's time (cost_model.ops.alltoall), the same split the simulator makes for a Send;
over one rank the copy of the buffer on the HBM: a plan's all_to_all step
(`run_alltoall_step`)."""

from __future__ import annotations

from cost_model.ops.alltoall import alltoall_latency_s, alltoall_seconds
from cost_model.ops.compute import work_s
from cost_model.plan_cost import alltoall_of, copy_work


def _exchange(sim, gpu, nbytes: float, P: int, scale: float, host_paid: bool, copy, name: str,
              key):
    """An AllToAll of `nbytes` per rank over P ranks on `scale` of its buffer; `copy()`: the
    Work of the one-rank copy; `key` names it for the price cache."""
    latency_s = sim._priced(("a2a_fixed", key, scale), lambda: float(alltoall_latency_s(
        sim.cluster, P, nbytes * scale)))
    total = sim._priced(("a2a_time", key, scale),
                        lambda: alltoall_seconds(sim.cluster, nbytes, P, scale))
    wait_s = latency_s - sim.cluster.nccl.host_overhead_s if host_paid else latency_s
    yield sim.env.timeout(max(wait_s, 0.0))  # the host's share paid on the host timeline
    if total is None:  # one rank: the copy of the buffer, on the HBM
        yield from sim._hold(gpu, "hbm", work_s(sim.cluster, copy().scaled(scale)), name)
        return
    duration = (float(total) - latency_s) * gpu.link_factor
    yield from sim._hold(gpu, "link", duration * sim.draw.jitter(), name)


def run_alltoall_step(sim, gpu, step, name: str, scale: float, host_paid: bool):
    """A SimPy process for a plan's all_to_all step (an NcclStep) on one rank."""
    nbytes, P = sim._priced(("a2a_of", id(step)), lambda: alltoall_of(sim.pc, step))
    yield from _exchange(sim, gpu, nbytes, P, scale, host_paid,
                         lambda: copy_work(sim.pc, step), name, id(step))
