"""AllToAll (an MoE layer's dispatch and combine) as NCCL runs it: grouped ncclSend/ncclRecv
(or ncclAlltoAll), each rank sending block j of its buffer to rank j at once.

Each rank sends (P - 1)/P of its buffer and receives as much. Inside an NVLink domain the
NVSwitch carries every pair at once, so a rank's sends share its NVLink bandwidth; across
nodes the blocks bound for the other nodes ((P - g)/P of the buffer, g GPUs per node) leave
through the rank's NIC at the same time as the rest crosses NVLink: the slower of the two sets
the time. Over one rank it is the copy NCCL makes of an out-of-place buffer."""

from __future__ import annotations

from cost_model import collectives as coll
from cost_model.ops.compute import compute_cost, io_work
from cost_model.ops.context import CostContext, OpCost
from workbench import ir


def alltoall_parts(ctx: CostContext, s: ir.Stmt):
    """(bytes each rank sends inside its node, bytes it sends to other nodes, ranks, whether
    the group spans nodes); ranks and nodes come from the bound sizes."""
    nbytes = ctx.local_nbytes(s.op.x)
    P = ctx.group_size(ctx.types[s.op.x].group)
    c = ctx.cluster
    g = min(P, c.gpus_per_node) if c.nodes > 1 else P
    return nbytes * (g - 1) / P, nbytes * (P - g) / P, P, P > g


def alltoall_time(ctx: CostContext, s: ir.Stmt, scale: float = 1.0):
    """Seconds of one AllToAll on `scale` of its buffer (a chunk of an overlap); None over
    one rank (a copy, see alltoall_cost)."""
    intra, inter, P, crosses = alltoall_parts(ctx, s)
    if P == 1:
        return None
    t = coll.p2p_time(intra * scale, ctx.cluster, False)
    if crosses:
        t = coll.smax(t, coll.p2p_time(inter * scale, ctx.cluster, True))
    return t


def alltoall_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    """The AllToAll's time (see the module docstring) and the link time it occupies."""
    t = alltoall_time(ctx, s)
    if t is None:  # one rank: NCCL copies the buffer
        c = compute_cost(ctx, io_work(ctx, [s.op.x], [s.out.name]))
        return OpCost(c.time_s + ctx.cluster.nccl.host_overhead_s, c.busy_s, "hbm",
                      ctx.cluster.nccl.host_overhead_s)
    intra, inter, _, crosses = alltoall_parts(ctx, s)
    c = ctx.cluster
    busy = {"link": intra / c.nvlink.bandwidth_Bps}
    if crosses:
        busy["link"] = coll.smax(busy["link"], inter / c.nic.bandwidth_Bps)
    return OpCost(t, busy, "link", c.nccl.host_overhead_s)


def alltoall_fixed_s(ctx: CostContext, s: ir.Stmt, chunks: int = 1):
    """The AllToAll's latency: its cost at no bytes (NCCL's host cost included)."""
    _, _, P, crosses = alltoall_parts(ctx, s)
    c = ctx.cluster
    if P == 1:
        return c.nccl.host_overhead_s + c.gpu.launch_latency_s
    return coll.p2p_time(0.0, c, crosses)
