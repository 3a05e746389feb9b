"""Fused kernels: a Fused statement's body split into link traffic and computation
(`fused_parts`, one rule per body op in FUSED_PART_RULES), priced as the generated code runs
it: peer loads/stores over NVLink (or the copy engines) overlapped with the computation on the
1/P slice, inside one kernel."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from codegen.lower_rows import PIPELINE_GROUPS, has_axis_reduction
from codegen.plan import collective_grid, overlap_grid
from cost_model import collectives as coll
from cost_model.collectives import smax, smin
from cost_model.hardware import Cluster
from cost_model.ops.comm import (
    comm_group,
    norm_combine_s,
    peak_link_Bps,
    send_crosses_nodes,
    send_link,
)
from cost_model.ops.compute import Work, elementwise_work, io_work, work_s
from cost_model.ops.context import CostContext, OpCost, is_sliced
from workbench import ir
from workbench.errors import NotOnThisCluster, WorkbenchError
from workbench.types import Group
from workbench.verify import exchange_pushes


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


@dataclass
class _BodySum:
    """What the statements of a fused body add up to, one statement at a time (mutable: it
    lives for one `fused_parts` call, which turns it into a frozen FusedParts)."""

    rs: object = 0  # buffer reduce-scattered by peer loads
    ag: object = 0  # buffers all-gathered by peer stores
    send: object = 0  # bytes sent point-to-point
    group: Group | None = None  # the group of the body's communication
    elementwise: list = field(default_factory=list)  # statements priced as one kernel
    produced: set = field(default_factory=set)  # values the kernel holds (not re-read)
    extra: Work = field(default_factory=lambda: Work(0, 0, write_bytes=0))  # beyond those
    scalars: list = field(default_factory=list)  # groups of reductions over Sliced inputs
    algorithm: str = "two-shot"  # how a whole AllReduce in the body runs (ir.Fused.algorithm)
    pushed: bool = False  # the ReduceScatter's input computed in the kernel, pushed (note 78)
    # a whole AllReduce's phase one when the rest of the kernel waits for it (note 97)
    phase_one: Work | None = None
    exchange_push: bool = False  # a fused AllToAll that pushes (verify.exchange_pushes)
    # values read after the kernel (later statements, the program's outputs): a value the
    # kernel produces and nothing else reads stays in registers (design note 85)
    live: frozenset = frozenset()


def _reduce_scatter_part(ctx: CostContext, body: _BodySum, leaf: ir.Stmt) -> None:
    op = leaf.op
    body.group = comm_group(ctx, op)  # a node-level one: the node's ranks
    body.rs = body.rs + ctx.full_nbytes(op.x)
    if op.x in {e.out.name for e in body.elementwise}:
        # Computed before it in this kernel (a cast, a scaling; design note 78): my whole
        # contribution (S bytes, in its own dtype) is pushed into the owners' staging buffers,
        # so S bytes land in my staging buffer (the elementwise statements' write of op.x
        # stands for them), which I read back; I write my slice.
        body.pushed = True
        body.extra = body.extra + io_work(ctx, [op.x], [leaf.out.name])
        body.produced.add(leaf.out.name)
        return
    # peers load my whole input (S bytes from my HBM in total); I write my reduced slice only
    # if something after the kernel reads it (Adam's update consumes it in registers)
    written = [leaf.out.name] if leaf.out.name in body.live else []
    body.extra = body.extra + io_work(ctx, [op.x], written)
    body.produced.add(leaf.out.name)


def _times(work: Work, k) -> Work:
    """The Work of `k` (a number or a sympy size) such kernels' bytes (symbolic-safe)."""
    writes = None if work.write_bytes is None else k * work.write_bytes
    return Work(k * work.hbm_bytes, k * work.flops, work.dtype, writes,
                k * work.f16_read_bytes, k * work.f16_write_bytes, k * work.dropout_elements)


def _allreduce_part(ctx: CostContext, body: _BodySum, leaf: ir.Stmt) -> None:
    """A whole AllReduce fused with row computation (`AllReduce C+`), by its algorithm
    (workbench.transforms.ALLREDUCE_ALGORITHMS); S = this rank's input bytes."""
    op, out = leaf.op, leaf.out.name
    body.group = comm_group(ctx, op)
    P = ctx.P(body.group)
    x_bytes = ctx.local_nbytes(op.x)
    if body.algorithm in ("two-shot", "pipelined"):
        # NCCL's bytes: a reduce-scatter of S and an all-gather of S (the summed rows). Phase
        # one: peers load my input once in total and store the summed rows into my buffer;
        # two-shot's passes read them back from HBM after the barrier (design note 97),
        # pipelined's beside the moves of the next row group (note 108): no phase of its own
        body.rs = body.rs + x_bytes
        body.ag = body.ag + x_bytes
        moves = io_work(ctx, [op.x], [out])
        if body.algorithm == "two-shot":
            body.phase_one = moves
        else:
            body.extra = body.extra + moves
        body.extra = body.extra + io_work(ctx, [out], [])
    elif body.algorithm == "one-shot":
        # every rank loads every rank's whole input: P loads of my S bytes, (P - 1) S through
        # each rank's links, priced as a peer-load reduce-scatter of P S (as a fused Reduce);
        # the passes reduce as they load: no phase of its own
        body.rs = body.rs + P * x_bytes
        body.extra = body.extra + _times(io_work(ctx, [op.x], []), P)
    else:
        # Lamport: phase one stores my S bytes into every rank's receive buffer (an all-gather
        # of P S by stores; P S land in my HBM); after it the passes spin-read them back, then
        # re-poison the buffer of two launches ahead (P S more writes)
        body.ag = body.ag + P * x_bytes
        body.phase_one = io_work(ctx, [op.x], []) + _times(io_work(ctx, [], [out]), P)
        body.extra = body.extra + _times(io_work(ctx, [out], [out]), P)
    body.produced.add(out)


def _all_gather_part(ctx: CostContext, body: _BodySum, leaf: ir.Stmt) -> None:
    op = leaf.op
    body.group = comm_group(ctx, op)
    body.ag = body.ag + ctx.full_nbytes(leaf.out.name)
    # peers store their slices into my HBM: the whole gathered buffer is written, but for
    # this rank's own slice when the kernel computed it: its producer's store is that slice's
    # (the generated kernel stores w1_s once, into w; GPU run 30, design note 85)
    gathered = io_work(ctx, [], [leaf.out.name])
    if op.x in {e.out.name for e in body.elementwise}:
        P = ctx.P(body.group)
        gathered = Work(gathered.hbm_bytes * (P - 1) / P, 0,
                        write_bytes=gathered.write_bytes * (P - 1) / P)
    body.extra = body.extra + gathered


def _reduce_part(ctx: CostContext, body: _BodySum, leaf: ir.Stmt) -> None:
    op = leaf.op
    body.group = ctx.types[op.x].group
    # The root loads every peer's whole input, (P - 1) S bytes through its own links, which is
    # what a peer-load reduce-scatter of P S bytes loads per rank: priced as that.
    body.rs = body.rs + ctx.P(body.group) * ctx.local_nbytes(op.x)
    body.extra = body.extra + io_work(ctx, [op.x], [])  # its own input; the sum in registers
    body.produced.add(leaf.out.name)


def _broadcast_part(ctx: CostContext, body: _BodySum, leaf: ir.Stmt) -> None:
    op = leaf.op
    body.group = ctx.types[op.x].group
    # The root stores S bytes into each of P - 1 peers: the stores of an all-gather of P S.
    body.ag = body.ag + ctx.P(body.group) * ctx.local_nbytes(leaf.out.name)
    body.extra = body.extra + io_work(ctx, [], [leaf.out.name])  # written on every rank


def _send_part(ctx: CostContext, body: _BodySum, leaf: ir.Stmt) -> None:
    op = leaf.op
    body.group = ctx.types[op.x].group
    body.send = body.send + ctx.local_nbytes(op.x)


def _alltoall_part(ctx: CostContext, body: _BodySum, leaf: ir.Stmt) -> None:
    """A peer-memory AllToAll (fused kind alltoall, design note 79): every rank loads P - 1 of
    its P blocks from their sources, which a peer-load reduce-scatter of the exchanged tensor's
    S bytes prices (the same (P - 1) / P S through each rank's links); the computation before
    it reads the tensors it loads from HBM once in total (the elementwise statements' reads),
    and the received value is held in registers."""
    op = leaf.op
    body.group = ctx.types[op.x].group
    producers = {e.out.name for e in body.elementwise}
    if body.exchange_push:  # computed here, pushed: peer stores of the exchanged value
        body.ag = body.ag + ctx.local_nbytes(op.x)
        body.extra = body.extra + io_work(ctx, [], [leaf.out.name])  # peers' stores land here
        body.produced.add(leaf.out.name)
        return
    loaded = ([n for e in body.elementwise for n in ir.expr_refs(e.op.expr)
               if n not in producers and ctx.types[n].rank] if op.x in producers else [op.x])
    body.rs = body.rs + sum((ctx.local_nbytes(n) for n in dict.fromkeys(loaded)), 0)
    if op.x not in producers:
        body.extra = body.extra + io_work(ctx, [op.x], [])
    body.produced.add(leaf.out.name)


def _elementwise_part(ctx: CostContext, body: _BodySum, leaf: ir.Stmt) -> None:
    body.elementwise.append(leaf)


def _view_part(ctx: CostContext, body: _BodySum, leaf: ir.Stmt) -> None:
    pass  # a view of the input: no data moves


def _reduction_part(ctx: CostContext, body: _BodySum, leaf: ir.Stmt) -> None:
    op = leaf.op
    # read the input once (unless this kernel produced it) and reduce the partials
    reads = [] if op.x in body.produced else [op.x]
    body.extra = body.extra + io_work(ctx, reads, [], 2 * ctx.local_numel(op.x))
    if is_sliced(ctx.types[op.x]):
        body.scalars.append(ctx.types[op.x].group)


FUSED_PART_RULES: dict[type, Callable[[CostContext, _BodySum, ir.Stmt], None]] = {
    ir.ReduceScatter: _reduce_scatter_part,
    ir.AllReduce: _allreduce_part,
    ir.AllToAll: _alltoall_part,
    ir.Reduce: _reduce_part,
    ir.Broadcast: _broadcast_part,
    ir.AllGather: _all_gather_part,
    ir.Send: _send_part,
    ir.Compute: _elementwise_part,
    ir.Update: _elementwise_part,
    ir.ReduceAxis: _elementwise_part,  # each rank reduces its own rows: no cross-rank step
    ir.Slice: _view_part,
    ir.Norm: _reduction_part,
    ir.ReduceTensor: _reduction_part,
}
"""What each op inside a fused kernel's body adds to the kernel's link traffic and
computation (`fused_parts`). An op that may be fused adds one entry here; one without an entry
is refused, naming it."""


def fused_parts(ctx: CostContext, s: ir.Stmt) -> FusedParts:
    """Split a Fused statement's body into communication and computation."""
    rules = [(leaf, FUSED_PART_RULES.get(type(leaf.op))) for leaf in s.op.body]
    for leaf, rule in rules:
        if rule is None:
            raise WorkbenchError(f"fused {s.op.kind} body must hold collectives and elementwise "
                                 f"statements only, got {type(leaf.op).__name__}")
    live = frozenset({n for t in ctx.program.stmts if t is not s for n in t.op.operands()}
                     | {v.name for v in ctx.program.outputs})
    body = _BodySum(algorithm=getattr(s.op, "algorithm", "two-shot"), live=live,
                    exchange_push=s.op.kind == "alltoall" and exchange_pushes(s.op.body))
    for leaf, rule in rules:
        rule(ctx, body, leaf)
    rs, ag, send, group = body.rs, body.ag, body.send, body.group
    engine, chunks = s.op.engine, s.op.chunks
    if engine == "sm" and group is not None and (rs or ag):
        check_one_domain(ctx, s, group)
    work = elementwise_work(ctx, body.elementwise, frozenset(body.produced)) + body.extra
    after = None
    if body.phase_one is not None:  # the passes wait for phase one (design note 97)
        work, after = body.phase_one, work
    if engine == "copy" and group is not None:
        # Copy engines stage what the SMs would load from peers: pulled pieces are written to
        # and read back from a local staging buffer, and every peer's copy engine reads this
        # rank's result slice once more from HBM.
        share = (ctx.P(group) - 1) / ctx.P(group)
        work = work + Work(share * (2 * rs + ag), 0, write_bytes=share * rs)
    elif _pushes(ctx, engine, group) and rs and not body.pushed:
        # Push mode (CodegenOptions.collective_mode): the peers' slices land in this rank's
        # staging buffer (written to HBM) and are read back to be reduced locally.
        share = (ctx.P(group) - 1) / ctx.P(group)
        work = work + Work(share * rs, 0, write_bytes=share * rs)
    # the unroll the generated kernel has: a row kernel's is 1 (codegen.lower_rows)
    unroll = 1 if has_axis_reduction(s) else ctx.options.unroll
    compute_share = ctx.options.pipeline_compute_share if body.algorithm == "pipelined" else 0
    return FusedParts(rs, ag, send, work, group, tuple(body.scalars), engine, chunks,
                      body.algorithm, body.pushed, unroll, after, compute_share)


def check_one_domain(ctx: CostContext, s: ir.Stmt, group: Group) -> None:
    """A fused collective kernel moves its bytes by peer loads and stores through NVLink: its
    whole group must sit in one NVLink domain (a node). Across nodes there is no peer memory
    to load from (CUDA IPC and NVSHMEM-style symmetric windows end at the NVLink domain), so
    such a schedule cannot run there: NotOnThisCluster, which `workbench simulate` shows as a
    row with a note and never marks best."""
    c = ctx.cluster
    size = ctx.group_size(group)
    if c.nodes == 1 or size <= c.gpus_per_node:
        return
    domains = -(-size // c.gpus_per_node)
    raise NotOnThisCluster(
        f"a fused {s.op.kind} kernel (peer loads and stores over NVLink) must keep its group "
        f"inside one NVLink domain of {c.gpus_per_node} GPUs, got a group of {size} GPUs over "
        f"{domains} domains of {c.name}; across nodes use NCCL collectives (a schedule "
        f"without fuse, e.g. rs-c-ag) or groups of at most {c.gpus_per_node} GPUs")


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


def fused_cost(ctx: CostContext, s: ir.Stmt, sms: float | None = None) -> OpCost:
    """The cost of a fused collective or Send kernel (ir.Fused of a kind other than
    "compute") holding `sms` SMs (None: all)."""
    return fused_parts_cost(ctx, fused_parts(ctx, s), sms)


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


def capped_fused_cost(ctx: CostContext, s: ir.Stmt, sms: int) -> OpCost:
    """A fused collective whose grid is capped (`CodegenOptions.collective_grid`) to run on
    `sms` SMs beside other kernels (design note 99): its peer accesses at the grid's blocks
    as `fused_cost` prices them (through a calibrated block curve), its computation on those
    SMs at the roofline's per-SM rates (`roofline_s`: HBM saturates at half the SMs and falls
    in proportion below, arithmetic in proportion), as a kernel on that share of the GPU."""
    fraction = min(1.0, sms / ctx.cluster.gpu.sm_count)
    return fused_parts_cost(ctx, fused_parts(ctx, s), None, fraction)


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
