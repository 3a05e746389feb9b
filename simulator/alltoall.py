"""The simulator's AllToAll: NCCL's latency, then the GPU's link for the bandwidth part of the
cost model's time (cost_model.ops.alltoall), the same split the simulator makes for a Send."""

from __future__ import annotations

from cost_model.ops import alltoall_fixed_s, alltoall_time, io_work, work_s


def run_all_to_all(sim, run):
    """A SimPy process for one AllToAll statement on one rank (a RUN_RULES entry)."""
    ctx, s = sim.ctx, run.s
    latency_s = sim._priced(("a2a_fixed", id(s)), lambda: float(alltoall_fixed_s(ctx, s)))
    total = sim._priced(("a2a_time", id(s), run.scale),
                        lambda: alltoall_time(ctx, s, run.scale))
    if run.host_paid:  # the host's share was paid on the host timeline
        latency_s -= sim.cluster.nccl.host_overhead_s
    yield sim.env.timeout(max(latency_s, 0.0))
    if total is None:  # one rank: the copy of the buffer, on the HBM
        copy = io_work(ctx, [s.op.x], [s.out.name]).scaled(run.scale)
        yield from sim._hold(run.gpu, "hbm", work_s(sim.cluster, copy), run.name)
        return
    duration = (float(total) - float(alltoall_fixed_s(ctx, s))) * run.gpu.link_factor
    yield from sim._hold(run.gpu, "link", duration * sim.draw.jitter(), run.name)
