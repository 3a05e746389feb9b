"""Fused kernels: a Fused statement's body split into link traffic and computation
(`fused_parts`, one rule per body op in FUSED_PART_RULES), priced as the generated code runs
it: peer loads/stores over NVLink (or the copy engines) overlapped with the computation on the
1/P slice, inside one kernel."""

from __future__ import annotations

from dataclasses import dataclass

from codegen.lower_rows import PIPELINE_GROUPS
from codegen.plan import collective_grid, overlap_grid
from cost_model import collectives as coll
from cost_model.collectives import smax, smin
from cost_model.hardware import Cluster
from cost_model.ops.comm import (
    norm_combine_s,
    peak_link_Bps,
    send_crosses_nodes,
    send_link,
)
from cost_model.ops.compute import Work, work_s
from cost_model.ops.context import CostContext, OpCost
from workbench import ir
from workbench.types import Group


@dataclass(frozen=True)
class FusedParts:
    """A fused kernel split into its link traffic and its computation."""

    rs_nbytes: object  # buffer reduce-scattered by peer loads
    ag_nbytes: object  # buffers all-gathered by peer stores
    send_nbytes: object  # bytes sent point-to-point
    work: Work  # HBM traffic and flops of the computation (and of the collective's buffers)
    group: Group | None
    scalar_allreduces: tuple = ()  # groups of Norms/ReduceTensors over Sliced inputs
    engine: str = "sm"  # who moves the bytes (ir.Fused.engine): the kernel, or copy engines
    chunks: int = 1  # pieces per slice when copy engines move them
    algorithm: str = "two-shot"  # a whole AllReduce's algorithm (ir.Fused.algorithm)
    # Computation before the ReduceScatter (design note 78): the computed contribution is
    # pushed into the owners' staging buffers (peer stores), whatever the collective mode.
    pushed: bool = False
    # Vectors per thread per loop iteration of the kernel moving the bytes by peer accesses
    # (CodegenOptions.unroll; a row kernel is generated at 1): its peer bandwidth by the
    # calibrated unroll curve (`collectives.fused_unroll_factor`, design note 95).
    unroll: int = 1
    # The computation that waits for the link phase (design note 97): a row kernel's passes
    # after a two-shot AllReduce's barrier or Lamport's stores, priced after the link time;
    # `work` is then the link phase's own (None: all of the computation overlaps the link).
    after: Work | None = None
    # A pipelined row AllReduce: one block in this many computes (CodegenOptions.
    # pipeline_compute_share; 0 for every other kernel).
    compute_share: int = 0






def _times(work: Work, k) -> Work:
    """The Work of `k` (a number or a sympy size) such kernels' bytes (symbolic-safe)."""
    writes = None if work.write_bytes is None else k * work.write_bytes
    return Work(k * work.hbm_bytes, k * work.flops, work.dtype, writes,
                k * work.f16_read_bytes, k * work.f16_write_bytes, k * work.dropout_elements)




















"""What each op inside a fused kernel's body adds to the kernel's link traffic and
computation (`fused_parts`). An op that may be fused adds one entry here; one without an entry
is refused, naming it."""






def _pushes(ctx: CostContext, engine: str, group) -> bool:
    """Whether a fused kernel reduce-scatters by peer stores (the push collective mode; a
    one-rank group moves nothing, so its push kernel is the pull one)."""
    return (ctx.options.collective_mode == "push" and engine == "sm" and group is not None
            and ctx.group_size(group) > 1)


def fused_blocks(ctx: CostContext, sms: float | None):
    """Thread blocks of a fused collective kernel holding `sms` SMs (None: all), at the
    codegen options' blocks per SM (collective_blocks_per_sm; the full grid is 2 a SM) and
    grid cap (collective_grid); None for the full grid. Only a cluster with a calibrated
    block curve prices fewer blocks (`cost_model.collectives.fused_block_fraction`); the
    presets have none."""
    per_sm, cap = ctx.options.collective_blocks_per_sm, ctx.options.collective_grid
    if sms is None and per_sm == 2 and not cap:
        return None
    full = coll.fused_blocks_on(ctx.cluster, ctx.cluster.gpu.sm_count if sms is None else sms)
    blocks = full * per_sm / 2
    return min(blocks, cap) if cap else blocks  # collective_grid: at most that many


def fused_link_s(ctx: CostContext, parts: FusedParts, sms: float | None = None):
    """Link time of a fused kernel's communication (peer loads/stores or a P2P send), the
    kernel holding `sms` SMs (None: all; fewer slow the peer accesses where the cluster has a
    calibrated block curve, `cost_model.collectives.fused_block_fraction`), with the codegen
    options' collective mode and blocks per SM and the kernel's unroll (`FusedParts.unroll`,
    through the calibrated unroll curve; vector width and cache hints have no modelled
    effect: workbench.options.PRICED)."""
    t = 0
    blocks = fused_blocks(ctx, sms)
    if parts.engine == "copy" and parts.group is not None:
        return coll.copy_engine_comm_time(parts.rs_nbytes, parts.ag_nbytes, ctx.P(parts.group),
                                          ctx.cluster, ctx.group_size(parts.group))
    if parts.group is not None and (parts.rs_nbytes or parts.ag_nbytes):
        t = coll.fused_comm_time(parts.rs_nbytes, parts.ag_nbytes, ctx.P(parts.group),
                                 ctx.cluster, ctx.group_size(parts.group), blocks,
                                 push=parts.pushed or _pushes(ctx, parts.engine, parts.group),
                                 unroll=parts.unroll)
    if parts.send_nbytes:
        t = t + parts.send_nbytes / fused_send_Bps(ctx, parts, blocks)
    return t


def fused_send_Bps(ctx: CostContext, parts: FusedParts, blocks: float | None = None) -> float:
    """Bandwidth of a fused Send: inside a node the kernel stores into the next stage's
    buffer over NVLink, at the rate measured for peer stores (scaled by the block curve when
    it runs `blocks` blocks; None: its full grid); across nodes it goes out through the NIC,
    like NCCL's Simple protocol. (It was priced as an NCCL send, at NVLink x Simple
    efficiency: 291 GB/s on the calibrated 2x H200 against 326 GB/s measured for the fused
    Send of the pipeline step.)"""
    if send_crosses_nodes(ctx, parts.group):
        return ctx.cluster.nic.bandwidth_Bps * ctx.cluster.nccl.protocols[-1].efficiency
    return coll.fused_link_bandwidths(ctx.cluster, 1, blocks, parts.unroll)[1]  # a pair


def fused_link_lower_s(ctx: CostContext, parts: FusedParts):
    """Bandwidth-only link busy time at peak link bandwidth (a lower bound)."""
    t = 0
    if parts.group is not None and (parts.rs_nbytes or parts.ag_nbytes):
        P = ctx.P(parts.group)
        t = (P - 1) * (parts.rs_nbytes + parts.ag_nbytes) / P / peak_link_Bps(ctx, parts.group)
    if parts.send_nbytes:
        t = t + parts.send_nbytes / send_link(ctx, parts.group).bandwidth_Bps
    return t


def fused_latency_s(ctx: CostContext, s: ir.Stmt, parts: FusedParts):  # noqa: ARG001
    """Fixed cost of a fused kernel: launch, barriers, and the all-reduces of scalar partials
    (a norm over slices needs one before the values that use it)."""
    scalars = sum((norm_combine_s(ctx, g) for g in parts.scalar_allreduces), 0)
    return scalars + _fused_fixed_s(ctx, parts)


def _fused_fixed_s(ctx: CostContext, parts: FusedParts):
    """A fused kernel's fixed cost beyond its norms' combines: launches, barriers."""
    if parts.group is None:
        return ctx.cluster.gpu.launch_latency_s
    # A one-rank group's collective parts touch no peer: the kernel pays no cross-GPU barrier
    # (the calibrated fused_fixed_s is that of 2 GPUs'). Measured on 2x H200 (GPU run 12,
    # pipeline with one GPU per stage), fuse-rs-c-send-ag's fixed cost is a fused Send's.
    peers = (parts.rs_nbytes or parts.ag_nbytes) and ctx.group_size(parts.group) > 1
    launch = ctx.cluster.gpu.launch_latency_s
    if parts.engine == "copy":
        # a kernel per piece; with peers, a one-block barrier kernel before the pulls (the
        # peers' inputs are complete) and one after the pushes (every push into this rank
        # has landed), each a flag round trip over the link
        if not peers:
            return parts.chunks * launch
        hop = coll.group_path(ctx.cluster, ctx.group_size(parts.group)).hop_latency_s
        return (parts.chunks + 2) * launch + 4 * hop
    if not peers:
        if not parts.send_nbytes:
            return launch
        return launch + send_link(ctx, parts.group).latency_s
    if parts.algorithm == "lamport":
        # No barrier: readers spin on the data itself, which arrives one hop after the store.
        # The calibrated fixed cost of a fused kernel beyond launch and hops
        # (Cluster.fused_fixed_s) is its two barriers' fences and flag handshakes, which this
        # kernel does not have (to be checked against P = 2 timings, issue 27).
        hop = coll.group_path(ctx.cluster, ctx.group_size(parts.group)).hop_latency_s
        return launch + hop
    return coll.fused_latency_s(ctx.cluster, ctx.group_size(parts.group))




def fused_parts_cost(ctx: CostContext, parts: FusedParts, sms: float | None = None,
                     comp_fraction: float = 1.0) -> OpCost:
    """The cost of a fused kernel of these FusedParts (a Fused statement's, or a plan step's:
    cost_model.plan_cost) holding `sms` SMs (None: all) for its peer accesses, its
    computation on `comp_fraction` of the SMs (1: all; `capped_fused_cost`)."""
    if parts.algorithm == "pipelined" and sms is None and comp_fraction == 1.0:
        return _pipelined_cost(ctx, parts)
    comp = work_s(ctx.cluster, parts.work, comp_fraction)
    link = fused_link_s(ctx, parts, sms)
    # The kernel pipelines chunks: communication of one chunk overlaps computation of another;
    # computation that waits for the link phase (a barrier, Lamport's stores) runs after it.
    waits = fused_after_s(ctx, parts, comp_fraction)
    t = fused_latency_s(ctx, None, parts) + smax(link, comp) + waits
    if parts.engine == "copy":
        # Pieces of 1/chunks of the slice, pulls and pushes sharing the link. Link-bound, the
        # last piece's computation hides behind about one piece of pushes (half the link's
        # bytes are pushes) and adds what exceeds it; computation-bound, the first piece's
        # pull and the last one's push (one piece of link time) add up.
        t = t + smin(link, smax(0, comp - link / 2)) / parts.chunks
    bottleneck = "link" if (ctx.symbolic or float(link) >= float(comp + waits)) else "hbm"
    if parts.group is None:
        bottleneck = "hbm"
    return OpCost(t, {"link": fused_link_lower_s(ctx, parts), "hbm": comp + waits}, bottleneck)


def _pipelined_cost(ctx: CostContext, parts: FusedParts) -> OpCost:
    """A pipelined row AllReduce (design note 108): its peer accesses on the moving blocks'
    share of the grid, its HBM work (the moves' and the passes') on the computing blocks'
    share, beside each other; the last row group's computation, after its arrival, adds one
    group's share of the work. The computation on a share of the SMs takes the whole GPU's
    time over the share, not the roofline's (HBM saturating at half the SMs): a row kernel's
    loads are latency-bound, and on 2 x H200 an eighth of the grid computing took 0.954 ms
    where the whole grid's epilogue takes 0.12-0.14 (note 108)."""
    share = 1 / parts.compute_share
    link = fused_link_s(ctx, parts, (1 - share) * ctx.cluster.gpu.sm_count)
    comp = work_s(ctx.cluster, parts.work) / share
    t = fused_latency_s(ctx, None, parts) + smax(link, comp) + comp / PIPELINE_GROUPS
    bottleneck = "link" if (ctx.symbolic or float(link) >= float(comp)) else "hbm"
    return OpCost(t, {"link": fused_link_lower_s(ctx, parts), "hbm": comp}, bottleneck)


def fused_after_s(ctx: CostContext, parts: FusedParts, comp_fraction: float = 1.0):
    """Seconds of a fused kernel's computation that waits for its link phase (FusedParts.after,
    design note 97): a two-shot row AllReduce's passes after its barrier, Lamport's after its
    stores; 0 for a kernel whose computation all overlaps the link. On `comp_fraction` of
    the SMs."""
    return 0 if parts.after is None else work_s(ctx.cluster, parts.after, comp_fraction)




def overlap_consumer_sms(cluster: Cluster, options, chosen: int | None = None) -> float:
    """SMs' worth of blocks an overlapped fused collective runs on: the grid the runtime
    launches (`codegen.plan.overlap_grid` of its full grid, the options' blocks per SM on
    every SM; `chosen` blocks, the plan's OverlapStep.consumer_blocks, or the options'
    overlap_blocks) at that many blocks per SM: what the cost model and the simulator price
    it at (its full grid by the runtime's formula, `codegen.plan.collective_grid`). (Until
    design note 87, NCCL's channels: 32 SMs where the runtime ran 33.)"""
    per_sm = options.collective_blocks_per_sm
    full = collective_grid(None, per_sm, cluster.gpu.sm_count)
    blocks = overlap_grid(full, options.overlap_blocks if chosen is None else chosen)
    return blocks / per_sm
