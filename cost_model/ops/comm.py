"""Communication: NCCL collectives and Sends between pipeline stages, priced by
cost_model.collectives, and the copy a collective over a group of one rank makes."""

from __future__ import annotations

import sympy

from cost_model import collectives as coll
from cost_model.hardware import Cluster
from cost_model.ops.compute import Work, compute_cost, io_work
from cost_model.ops.context import CostContext, OpCost
from workbench import ir
from workbench.types import Group

# The IR collectives cost_model.collectives prices as NCCL's ring/tree/NVLS collectives, by
# their kind (read from the one name table, ir.COLLECTIVES; an AllToAll is NCCL's grouped
# sends, priced by cost_model.ops.alltoall).
COLLECTIVE_KINDS: dict[type, str] = {c.op: c.kind for c in ir.COLLECTIVES
                                     if c.op is not ir.AllToAll}


def collective_kind(op) -> str:
    """The NCCL collective (cost_model.collectives' kind) that collective op `op` runs."""
    return ir.collective_of(op).kind


def comm_group(ctx: CostContext, op) -> Group:
    """The group one instance of collective `op` runs on: its operand's group, or for a
    node-level collective (`op.sub`, design note 35) the sub-group: the per_node ranks of a
    node (intra) or the ranks of one local rank, one per node (inter)."""
    group = ctx.types[op.x].group
    sub = getattr(op, "sub", None)
    if sub is None:
        return group
    if sub.axis == "intra":
        return Group(f"{group.name}.intra", sympy.Integer(sub.per_node))
    return Group(f"{group.name}.inter", sympy.sympify(group.size) / sub.per_node)


def one_per_node(op) -> bool:
    """Whether collective `op` runs over one GPU per node (the inter axis of a sub-group)."""
    sub = getattr(op, "sub", None)
    return sub is not None and sub.axis == "inter"


def collective_nbytes(ctx: CostContext, s: ir.Stmt):
    """The buffer size in nccl-tests' convention: the whole (unsliced) tensor; for an
    AllReduce across nodes of a node-level split, the slice each rank holds."""
    if one_per_node(s.op):
        return ctx.local_nbytes(s.op.x)
    return ctx.full_nbytes(s.op.x)


def peak_link_Bps(ctx: CostContext, group: Group, across: bool = False) -> float:
    """The peak bandwidth of the slowest link a group spans (for bandwidth-only bounds);
    `across`: the group is one GPU per node."""
    if across:
        return coll.node_axis_path(ctx.cluster, ctx.group_size(group)).bandwidth_Bps
    path = coll.group_path(ctx.cluster, ctx.group_size(group))
    return path.bandwidth_Bps


def collective_cluster(ctx: CostContext, s: ir.Stmt) -> Cluster:
    """The cluster whose NCCL constants price collective `s`: those measured for its dtype
    where the cluster has them (`Cluster.for_dtype`), else its own."""
    return ctx.cluster.for_dtype(ctx.types[s.op.x].dtype.name)


def collective_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    """The cost of an NCCL collective statement (AllReduce, ReduceScatter, AllGather,
    Broadcast, Reduce), with the copy it makes over a group of one rank."""
    kind = collective_kind(s.op)
    group = comm_group(ctx, s.op)
    across = one_per_node(s.op)
    nbytes, P = collective_nbytes(ctx, s), ctx.P(group)
    cluster = collective_cluster(ctx, s)
    t = coll.collective_time(kind, nbytes, P, cluster, ctx.group_size(group), across)
    busy = coll.collective_bus_bytes(kind, nbytes, P) / peak_link_Bps(ctx, group, across)
    copy = single_rank_copy(ctx, s)
    if copy is not None:
        c = compute_cost(ctx, copy)
        return OpCost(t + c.time_s, {"link": busy, **c.busy_s}, "hbm",
                      cluster.nccl.host_overhead_s)
    return OpCost(t, {"link": busy}, "link", cluster.nccl.host_overhead_s)


def collective_plan(ctx: CostContext, s: ir.Stmt, scale: float = 1.0) -> coll.Plan:
    """The plan NCCL picks for collective statement `s` (numeric sizes), on `scale` of its
    buffer (a chunk of an overlap): algorithm, protocol, steps and the link that bounds it."""
    group = comm_group(ctx, s.op)
    nbytes = float(ctx.size(collective_nbytes(ctx, s))) * scale
    P = ctx.group_size(group)
    return coll.choose_plan(collective_kind(s.op), nbytes, P, collective_cluster(ctx, s), P,
                            one_per_node(s.op))


def collective_fixed_s(ctx: CostContext, s: ir.Stmt, chunks: int = 1):
    """NCCL's per-call cost of collective `s` for one of `chunks` equal pieces of it: host,
    kind and protocol latency of the plan a piece gets (with a single rank's copy: host cost
    and a launch)."""
    c = ctx.cluster
    cluster = collective_cluster(ctx, s)
    group = comm_group(ctx, s.op)
    if single_rank_copy(ctx, s) is not None:
        return cluster.nccl.host_overhead_s + c.gpu.launch_latency_s
    nccl = cluster.nccl
    call = nccl.host_overhead_s + nccl.kind_latency_s(collective_kind(s.op))
    if ctx.symbolic:
        return call + min(p.base_latency_s for p in nccl.protocols)
    piece = float(collective_nbytes(ctx, s)) / chunks
    return coll.choose_plan(collective_kind(s.op), piece, ctx.group_size(group), cluster,
                            ctx.group_size(group), one_per_node(s.op)).fixed_s


def single_rank_copy(ctx: CostContext, s: ir.Stmt) -> Work | None:
    """The device copy that collective `s` makes over a group of one rank, or None.

    NCCL with one rank copies an out-of-place buffer, and the generated code gives every
    collective a fresh output buffer except an AllReduce of a value dead afterwards (reduced
    in place) and an AllGather of the slice that an Update wrote into its whole target
    (gathered in place; codegen.lower's storage rules). A 2-GPU
    pipeline has one rank per stage: measured (GPU run 9), its schedules with an AllGather
    took ~0.09 ms more at T=8192, the copy of 201 MB."""
    if ctx.group_size(comm_group(ctx, s.op)) != 1:
        return None
    if isinstance(s.op, ir.AllReduce) and ctx.program.dead_after(s.op.x, s):
        return None  # reduced in place (GPU run 15: 0.013 ms for 201 MB on one rank)
    if isinstance(s.op, ir.AllGather):
        producer = next((p for p in ctx.program.leaves() if p.out.name == s.op.x), None)
        if producer is not None and isinstance(producer.op, ir.Update):
            return None
    return io_work(ctx, [s.op.x], [s.out.name])


def norm_combine_s(ctx: CostContext, group: Group):
    """Combining a norm's per-rank partial sums, as the generated code does it: one small
    finish kernel that waits on a peer-flag barrier and reads every rank's partials by peer
    loads (codegen's norm_finish kernel), not an NCCL all_reduce of 4 bytes, whose host and
    protocol latency (tens of us) the generated code never pays. Cost: a launch, a barrier
    round trip over the group's link, and the calibrated fixed cost of a fused kernel."""
    c = ctx.cluster
    crosses = c.nodes > 1 and ctx.group_size(group) > c.gpus_per_node
    link = c.nic if crosses else c.nvlink
    return c.gpu.launch_latency_s + 2 * link.latency_s + c.fused_fixed_s


def send_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    """The cost of an NCCL Send of this rank's part of a value to the next stage."""
    src = ctx.types[s.op.x].group
    nbytes = ctx.local_nbytes(s.op.x)
    t = coll.p2p_time(nbytes, ctx.cluster, send_crosses_nodes(ctx, src))
    return OpCost(t, {"link": nbytes / send_link(ctx, src).bandwidth_Bps}, "link",
                  ctx.cluster.nccl.host_overhead_s)


def send_fixed_s(ctx: CostContext, s: ir.Stmt, chunks: int = 1):
    """A Send's latency (its cost at no bytes, NCCL's host cost included); the same for
    every piece of it."""
    return coll.p2p_time(0.0, ctx.cluster, send_crosses_nodes(ctx, ctx.types[s.op.x].group))


def send_crosses_nodes(ctx: CostContext, src: Group) -> bool:
    """Stages are laid out one after another: stage k's rank r is GPU k * P + r, so a Send
    crosses nodes when a stage does not share a node with the next one."""
    size = ctx.group_size(src)
    return ctx.cluster.nodes > 1 and 2 * size > ctx.cluster.gpus_per_node


def send_link(ctx: CostContext, src: Group):
    """The link a Send from stage `src` to the next stage goes over: the NIC or NVLink."""
    return ctx.cluster.nic if send_crosses_nodes(ctx, src) else ctx.cluster.nvlink
