"""Communication: NCCL collectives and Sends between pipeline stages, priced by
cost_model.collectives, and the copy a collective over a group of one rank makes."""

from __future__ import annotations

from cost_model import collectives as coll
from cost_model.ops.context import CostContext
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




def one_per_node(op) -> bool:
    """Whether collective `op` runs over one GPU per node (the inter axis of a sub-group)."""
    sub = getattr(op, "sub", None)
    return sub is not None and sub.axis == "inter"




def peak_link_Bps(ctx: CostContext, group: Group, across: bool = False) -> float:
    """The peak bandwidth of the slowest link a group spans (for bandwidth-only bounds);
    `across`: the group is one GPU per node."""
    if across:
        return coll.node_axis_path(ctx.cluster, ctx.group_size(group)).bandwidth_Bps
    path = coll.group_path(ctx.cluster, ctx.group_size(group))
    return path.bandwidth_Bps












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






def send_crosses_nodes(ctx: CostContext, src: Group) -> bool:
    """Stages are laid out one after another: stage k's rank r is GPU k * P + r, so a Send
    crosses nodes when a stage does not share a node with the next one."""
    size = ctx.group_size(src)
    return ctx.cluster.nodes > 1 and 2 * size > ctx.cluster.gpus_per_node


def send_link(ctx: CostContext, src: Group):
    """The link a Send from stage `src` to the next stage goes over: the NIC or NVLink."""
    return ctx.cluster.nic if send_crosses_nodes(ctx, src) else ctx.cluster.nvlink
