"""Time of every IR op and fused op on a Cluster, as a sympy expression or a number.

Computation is a roofline: max(HBM bytes / HBM bandwidth, flops / peak) plus a launch.
Collectives use cost_model.collectives (NCCL alpha-beta). Fused kernels are what the generated
code does: peer loads/stores over NVLink for the collective part, the computation's HBM traffic
on the 1/P slice, overlapped inside one kernel.

`CostContext.symbolic` selects sympy expressions in the program's size symbols (for
`--symbolic`) or plain floats (fast; what the simulator uses). The topology (which links a
group spans) always comes from the bound sizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import sympy

from cost_model import collectives as coll
from cost_model.collectives import smax, smin
from cost_model.hardware import Cluster
from workbench import ir
from workbench.errors import WorkbenchError
from workbench.types import Group, ReplicatedLayout, TensorType

RESOURCES = ("link", "hbm")


@dataclass(frozen=True)
class CostContext:
    """A program, a cluster, the bound sizes, and whether to build symbolic expressions."""

    program: ir.Program
    cluster: Cluster
    bound: Mapping[sympy.Symbol, int]
    symbolic: bool = False
    types: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.types:
            self.types.update({v.name: v.type for v in self.program.all_values()})

    def size(self, expr):
        """A size expression: kept symbolic, or evaluated to a number with the bound sizes."""
        expr = sympy.sympify(expr)
        return expr if self.symbolic else float(expr.subs(self.bound))

    def group_size(self, group: Group) -> int:
        """The bound (numeric) size of a group: decides the links it spans."""
        return int(sympy.sympify(group.size).subs(self.bound))

    def P(self, group: Group):
        return self.size(group.size)

    def local_nbytes(self, name: str):
        """Bytes of value `name` that one rank holds."""
        t: TensorType = self.types[name]
        n = sympy.Mul(*t.local_shape()) if t.shape else sympy.Integer(1)
        return self.size(n * t.dtype.nbytes)

    def full_nbytes(self, name: str):
        """Bytes of the whole logical value `name`."""
        return self.size(self.types[name].nbytes())

    def local_numel(self, name: str):
        t: TensorType = self.types[name]
        return self.size(sympy.Mul(*t.local_shape()) if t.shape else sympy.Integer(1))


@dataclass(frozen=True)
class OpCost:
    """Predicted time of one statement, the bandwidth-only busy time it needs on each resource
    (a lower bound: no latency, peak link bandwidth), and its bottleneck."""

    time_s: object
    busy_s: dict  # resource -> seconds
    bottleneck: str
    # The part of time_s spent by the host issuing the op (NCCL's per-call cost). A host that
    # is ahead of the GPU pays it while earlier kernels run; see program_cost.
    host_s: object = 0.0


# ---------------------------------------------------------------- computation


def expr_flops(expr: ir.Expr) -> int:
    """Arithmetic operations per element of an elementwise expression."""
    match expr:
        case ir.Ref() | ir.Const():
            return 0
        case ir.Binary(_, a, b):
            return 1 + expr_flops(a) + expr_flops(b)
        case ir.Unary(_, a) | ir.Cast(_, a) | ir.Dropout(_, _, a):
            return 1 + expr_flops(a)
    return 0


def expr_dropouts(expr: ir.Expr) -> int:
    """Dropout masks per element of an elementwise expression (each hashes the index)."""
    match expr:
        case ir.Dropout(_, _, a):
            return 1 + expr_dropouts(a)
        case ir.Binary(_, a, b):
            return expr_dropouts(a) + expr_dropouts(b)
        case ir.Unary(_, a) | ir.Cast(_, a):
            return expr_dropouts(a)
    return 0


def roofline_s(cluster: Cluster, hbm_bytes, flops, dtype_name: str = "f32",
               sm_fraction: float = 1.0, write_bytes=None, f16_read_bytes=0,
               f16_write_bytes=0):
    """Busy time of a kernel moving `hbm_bytes` and doing `flops` with a fraction of the SMs.

    With fewer SMs (a communication kernel holds some) the arithmetic rate falls in proportion;
    HBM bandwidth stays saturated down to about half the SMs (a streaming kernel needs enough
    loads in flight, not all SMs; an assumption, consistent with copy kernels reaching full
    bandwidth at half occupancy), and falls in proportion below that. `write_bytes` (of
    hbm_bytes) prices writes at the GPU's write rate where the spec splits reads and writes;
    `f16_read_bytes` / `f16_write_bytes` are the bytes of 2-byte elements among the reads and
    writes (`GPU.hbm_time_s`)."""
    gpu = cluster.gpu
    mem_scale = min(1.0, 2.0 * sm_fraction)
    return smax(gpu.hbm_time_s(hbm_bytes, write_bytes, f16_read_bytes, f16_write_bytes)
                / mem_scale, flops / (gpu.flops_for(dtype_name) * sm_fraction))


@dataclass(frozen=True)
class Work:
    """What a kernel (or its computation part) does: HBM bytes, flops, the flops' dtype, how
    many of the bytes are writes (None: not known; priced at the flat HBM bandwidth), how
    many of the reads and of the writes are of 2-byte elements (f16, bf16), and how many
    dropout masks it computes (elements x masks per element)."""

    hbm_bytes: object
    flops: object
    dtype: str = "f32"
    write_bytes: object = None
    f16_read_bytes: object = 0
    f16_write_bytes: object = 0
    dropout_elements: object = 0

    def __add__(self, other: Work) -> Work:
        writes = None if self.write_bytes is None or other.write_bytes is None \
            else self.write_bytes + other.write_bytes
        return Work(self.hbm_bytes + other.hbm_bytes, self.flops + other.flops, self.dtype,
                    writes, self.f16_read_bytes + other.f16_read_bytes,
                    self.f16_write_bytes + other.f16_write_bytes,
                    self.dropout_elements + other.dropout_elements)

    def scaled(self, factor: float) -> Work:
        """The same kernel on `factor` of the data (numbers: the simulator's chunks)."""
        writes = None if self.write_bytes is None else float(self.write_bytes) * factor
        return Work(float(self.hbm_bytes) * factor, float(self.flops) * factor, self.dtype,
                    writes, float(self.f16_read_bytes) * factor,
                    float(self.f16_write_bytes) * factor, float(self.dropout_elements) * factor)


def work_s(cluster: Cluster, work: Work, sm_fraction: float = 1.0):
    """`roofline_s` of a Work, plus its dropout masks' hashing (`GPU.dropout_element_s`,
    measured to add to the streaming time, not to hide under it; slower on fewer SMs): the
    busy time of the kernel it describes on `sm_fraction` of the SMs (the simulator prices
    its computation chunks with this)."""
    streaming = roofline_s(cluster, work.hbm_bytes, work.flops, work.dtype, sm_fraction,
                           work.write_bytes, work.f16_read_bytes, work.f16_write_bytes)
    return dropout_s(cluster, work, sm_fraction) + streaming


def dropout_s(cluster: Cluster, work: Work, sm_fraction: float = 1.0):
    """Time a Work's dropout masks add to its kernel on `sm_fraction` of the SMs."""
    return work.dropout_elements * cluster.gpu.dropout_element_s / sm_fraction


def io_work(ctx: CostContext, reads, writes, flops=0) -> Work:
    """The Work of a kernel that reads the values named in `reads` and writes those in
    `writes` (this rank's part of each), with the bytes of 2-byte elements counted apart."""
    def f16(names):
        return sum((ctx.local_nbytes(n) for n in names if ctx.types[n].dtype.nbytes == 2), 0)

    read = sum((ctx.local_nbytes(n) for n in reads), 0)
    write = sum((ctx.local_nbytes(n) for n in writes), 0)
    return Work(read + write, flops, write_bytes=write, f16_read_bytes=f16(reads),
                f16_write_bytes=f16(writes))


def elementwise_work(ctx: CostContext, stmts, produced_inside=frozenset()) -> Work:
    """HBM traffic and flops of elementwise statements run as one kernel: each tensor read from
    HBM once (values produced inside the kernel are not re-read), each result written once."""
    reads, writes, flops, dropouts = {}, {}, 0, 0
    dtype = "f32"
    inside = set(produced_inside)
    for s in stmts:
        expr = s.op.expr
        out = s.out.name
        for name in ir.expr_refs(expr):
            if name not in inside:
                # An elementwise statement on a slice reads only that slice of a Replicated
                # operand (GPU run 14: Adam's rs-c-ag updates measured at the slice's bytes);
                # broadcast operands (a bias, a scalar) are read whole.
                slice_bytes = ctx.local_numel(out) * ctx.types[name].dtype.nbytes
                reads[name] = smin(ctx.local_nbytes(name), slice_bytes)
        writes[out] = ctx.local_nbytes(out)
        flops = flops + expr_flops(expr) * ctx.local_numel(out)
        dropouts = dropouts + expr_dropouts(expr) * ctx.local_numel(out)
        dtype = s.out.type.dtype.name
        inside.add(out)

    def f16(table):
        return sum((n for name, n in table.items() if ctx.types[name].dtype.nbytes == 2), 0)

    return Work(sum(reads.values()) + sum(writes.values()), flops, dtype, sum(writes.values()),
                f16(reads), f16(writes), dropouts)


def matmul_work(ctx: CostContext, s: ir.Stmt) -> Work:
    a, b = s.op.a, s.op.b
    ta = ctx.types[a]
    k_local = ctx.size(ta.local_shape()[-1])
    flops = 2 * ctx.local_numel(s.out.name) * k_local
    return Work(ctx.local_nbytes(a) + ctx.local_nbytes(b) + ctx.local_nbytes(s.out.name),
                flops, ta.dtype.name)


def _compute_cost(ctx: CostContext, work: Work) -> OpCost:
    c = ctx.cluster
    busy = work_s(c, work)
    mem = c.gpu.hbm_time_s(work.hbm_bytes, work.write_bytes, work.f16_read_bytes,
                           work.f16_write_bytes)
    bottleneck = "hbm"  # the hashing of dropout masks adds to a memory-bound kernel
    if not ctx.symbolic and busy - float(dropout_s(c, work)) > float(mem) * 1.0000001:
        bottleneck = "sm"
    return OpCost(c.gpu.launch_latency_s + busy, {"hbm": busy}, bottleneck)


# ---------------------------------------------------------------- communication


def _collective_kind(op) -> str:
    return {ir.AllReduce: "allreduce", ir.ReduceScatter: "reducescatter",
            ir.AllGather: "allgather", ir.Broadcast: "broadcast", ir.Reduce: "reduce"}[type(op)]


def collective_nbytes(ctx: CostContext, s: ir.Stmt):
    """The buffer size in nccl-tests' convention: the whole (unsliced) tensor."""
    return ctx.full_nbytes(s.op.x)


def peak_link_Bps(ctx: CostContext, group: Group) -> float:
    path = coll.group_path(ctx.cluster, ctx.group_size(group))
    return path.bandwidth_Bps


def collective_cluster(ctx: CostContext, s: ir.Stmt) -> Cluster:
    """The cluster whose NCCL constants price collective `s`: those measured for its dtype
    where the cluster has them (`Cluster.for_dtype`), else its own."""
    return ctx.cluster.for_dtype(ctx.types[s.op.x].dtype.name)


def _collective_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    kind = _collective_kind(s.op)
    group = ctx.types[s.op.x].group
    nbytes, P = collective_nbytes(ctx, s), ctx.P(group)
    cluster = collective_cluster(ctx, s)
    t = coll.collective_time(kind, nbytes, P, cluster, ctx.group_size(group))
    busy = coll.collective_bus_bytes(kind, nbytes, P) / peak_link_Bps(ctx, group)
    copy = single_rank_copy(ctx, s)
    if copy is not None:
        c = _compute_cost(ctx, copy)
        return OpCost(t + c.time_s, {"link": busy, **c.busy_s}, "hbm",
                      cluster.nccl.host_overhead_s)
    return OpCost(t, {"link": busy}, "link", cluster.nccl.host_overhead_s)


def single_rank_copy(ctx: CostContext, s: ir.Stmt) -> Work | None:
    """The device copy that collective `s` makes over a group of one rank, or None.

    NCCL with one rank copies an out-of-place buffer, and the generated code gives every
    collective a fresh output buffer except an AllReduce of a value dead afterwards (reduced
    in place) and an AllGather of the slice that an Update wrote into its whole target
    (gathered in place; codegen.lower's storage rules). A 2-GPU
    pipeline has one rank per stage: measured (GPU run 9), its schedules with an AllGather
    took ~0.09 ms more at T=8192, the copy of 201 MB."""
    if ctx.group_size(ctx.types[s.op.x].group) != 1:
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


def _send_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    src = ctx.types[s.op.x].group
    nbytes = ctx.local_nbytes(s.op.x)
    t = coll.p2p_time(nbytes, ctx.cluster, send_crosses_nodes(ctx, src))
    return OpCost(t, {"link": nbytes / send_link(ctx, src).bandwidth_Bps}, "link",
                  ctx.cluster.nccl.host_overhead_s)


def send_crosses_nodes(ctx: CostContext, src: Group) -> bool:
    """Stages are laid out one after another: stage k's rank r is GPU k * P + r, so a Send
    crosses nodes when a stage does not share a node with the next one."""
    size = ctx.group_size(src)
    return ctx.cluster.nodes > 1 and 2 * size > ctx.cluster.gpus_per_node


def send_link(ctx: CostContext, src: Group):
    """The link a Send from stage `src` to the next stage goes over: the NIC or NVLink."""
    return ctx.cluster.nic if send_crosses_nodes(ctx, src) else ctx.cluster.nvlink


# ---------------------------------------------------------------- fused kernels


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


def fused_parts(ctx: CostContext, s: ir.Stmt) -> FusedParts:
    """Split a Fused statement's body into communication and computation."""
    rs, ag, send = 0, 0, 0
    group = None
    elementwise, produced, extra, scalars = [], set(), Work(0, 0, write_bytes=0), []
    for leaf in s.op.body:
        op = leaf.op
        if isinstance(op, ir.ReduceScatter):
            group = ctx.types[op.x].group
            rs = rs + ctx.full_nbytes(op.x)
            # peers load my whole input (S bytes from my HBM in total) and I write my slice
            extra = extra + io_work(ctx, [op.x], [leaf.out.name])
            produced.add(leaf.out.name)
        elif isinstance(op, ir.AllGather):
            group = ctx.types[op.x].group
            ag = ag + ctx.full_nbytes(leaf.out.name)
            # peers store their slices into my HBM: the whole gathered buffer is written
            extra = extra + io_work(ctx, [], [leaf.out.name])
        elif isinstance(op, ir.Send):
            group = ctx.types[op.x].group
            send = send + ctx.local_nbytes(op.x)
        elif isinstance(op, ir.ELEMENTWISE_OPS):
            elementwise.append(leaf)
        elif isinstance(op, ir.Slice):
            continue  # a view of the input: no data moves
        elif isinstance(op, (ir.Norm, ir.ReduceTensor)):
            # read the input once (unless this kernel produced it) and reduce the partials
            reads = [] if op.x in produced else [op.x]
            extra = extra + io_work(ctx, reads, [], 2 * ctx.local_numel(op.x))
            if _is_sliced(ctx.types[op.x]):
                scalars.append(ctx.types[op.x].group)
        else:
            raise WorkbenchError(f"fused {s.op.kind} body must hold collectives and elementwise "
                                 f"statements only, got {type(op).__name__}")
    work = elementwise_work(ctx, elementwise, frozenset(produced)) + extra
    engine, chunks = s.op.engine, s.op.chunks
    if engine == "copy" and group is not None:
        # Copy engines stage what the SMs would load from peers: pulled pieces are written to
        # and read back from a local staging buffer, and every peer's copy engine reads this
        # rank's result slice once more from HBM.
        share = (ctx.P(group) - 1) / ctx.P(group)
        work = work + Work(share * (2 * rs + ag), 0, write_bytes=share * rs)
    return FusedParts(rs, ag, send, work, group, tuple(scalars), engine, chunks)


def fused_link_s(ctx: CostContext, parts: FusedParts, sms: float | None = None):
    """Link time of a fused kernel's communication (peer loads/stores or a P2P send), the
    kernel holding `sms` SMs (None: all; fewer slow the peer accesses where the cluster has a
    calibrated block curve, `cost_model.collectives.fused_block_fraction`)."""
    t = 0
    blocks = None if sms is None else coll.fused_blocks_on(ctx.cluster, sms)
    if parts.engine == "copy" and parts.group is not None:
        return coll.copy_engine_comm_time(parts.rs_nbytes, parts.ag_nbytes, ctx.P(parts.group),
                                          ctx.cluster, ctx.group_size(parts.group))
    if parts.group is not None and (parts.rs_nbytes or parts.ag_nbytes):
        t = coll.fused_comm_time(parts.rs_nbytes, parts.ag_nbytes, ctx.P(parts.group),
                                 ctx.cluster, ctx.group_size(parts.group), blocks)
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
    return coll.fused_link_bandwidths(ctx.cluster, 1, blocks)[1]  # a pair inside a node


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
    return coll.fused_latency_s(ctx.cluster, ctx.group_size(parts.group))


def _fused_cost(ctx: CostContext, s: ir.Stmt, sms: float | None = None) -> OpCost:
    parts = fused_parts(ctx, s)
    comp = work_s(ctx.cluster, parts.work)
    link = fused_link_s(ctx, parts, sms)
    # The kernel pipelines chunks: communication of one chunk overlaps computation of another.
    t = fused_latency_s(ctx, s, parts) + smax(link, comp)
    if parts.engine == "copy":
        # Pieces of 1/chunks of the slice, pulls and pushes sharing the link. Link-bound, the
        # last piece's computation hides behind about one piece of pushes (half the link's
        # bytes are pushes) and adds what exceeds it; computation-bound, the first piece's
        # pull and the last one's push (one piece of link time) add up.
        t = t + smin(link, smax(0, comp - link / 2)) / parts.chunks
    bottleneck = "link" if (ctx.symbolic or float(link) >= float(comp)) else "hbm"
    if parts.group is None:
        bottleneck = "hbm"
    return OpCost(t, {"link": fused_link_lower_s(ctx, parts), "hbm": comp}, bottleneck)


# ---------------------------------------------------------------- dispatch


def stmt_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    """Predicted time of one top-level statement (plain, Fused or Overlapped)."""
    op = s.op
    if isinstance(op, ir.Slice):
        return OpCost(0.0 if not ctx.symbolic else sympy.Integer(0), {}, "none")  # a view
    if isinstance(op, ir.ELEMENTWISE_OPS):
        return _compute_cost(ctx, elementwise_work(ctx, [s]))
    if isinstance(op, ir.MatMul):
        return _compute_cost(ctx, matmul_work(ctx, s))
    if isinstance(op, (ir.ReduceTensor, ir.Norm)):
        t_in = ctx.types[op.x]
        cost = _compute_cost(ctx, Work(ctx.local_nbytes(op.x), 2 * ctx.local_numel(op.x)))
        if isinstance(t_in.layout, ReplicatedLayout) or not _is_sliced(t_in):
            return cost
        # over a Sliced input the per-rank partials are all-reduced (a 4-byte AllReduce)
        return OpCost(cost.time_s + norm_combine_s(ctx, t_in.group), cost.busy_s, "hbm")
    if isinstance(op, ir.Send):
        return _send_cost(ctx, s)
    if isinstance(op, ir.COMMUNICATION_OPS):
        return _collective_cost(ctx, s)
    if isinstance(op, ir.Fused):
        if op.kind == "compute":
            return _compute_cost(ctx, elementwise_work(ctx, op.body))
        return _fused_cost(ctx, s)
    if isinstance(op, ir.Overlapped):
        producer, consumer = (stmt_cost(ctx, b) for b in op.body)
        # each chunk is its own kernel or NCCL call: every chunk after the first pays the
        # statement's fixed cost again (the simulator runs the chunks so)
        again = op.chunks - 1
        tp = producer.time_s + again * stmt_fixed_s(ctx, op.body[0], op.chunks)
        beside = _fused_beside_compute_s(ctx, *op.body, op.chunks)
        if beside is None:
            tc = consumer.time_s + again * stmt_fixed_s(ctx, op.body[1], op.chunks)
            # chunk i of the consumer waits for chunk i of the producer: the slower one runs
            # the whole time, the faster one adds one chunk of pipeline fill
            t = smax(tp, tc) + smin(tp, tc) / op.chunks
        else:
            tc = consumer.time_s
            # the SMs are time-shared, not partitioned: the producer runs at its own speed
            # and each consumer chunk on its overlapped grid in the gaps (one kernel's fixed
            # cost per chunk); see _fused_beside_compute_s
            t = tp + beside
        if stmt_group(ctx, op.body[0]) == stmt_group(ctx, op.body[1]):
            busy = _add_busy(producer.busy_s, consumer.busy_s)
        else:  # the consumer runs in the next stage, on other GPUs, at the same time
            busy = _max_busy(producer.busy_s, consumer.busy_s)
        slow = producer if ctx.symbolic or float(tp) >= float(tc) else consumer
        return OpCost(t, busy, slow.bottleneck)
    raise WorkbenchError(f"cost model must know op {type(op).__name__}, got no rule; add one in "
                         "cost_model/ops.py")


def stmt_fixed_s(ctx: CostContext, s: ir.Stmt, chunks: int = 1):
    """The part of a statement's time that does not shrink with its data, for one of
    `chunks` equal pieces of it: a launch for a kernel, a fused kernel's fixed cost, NCCL's
    per-call cost (host, kind and protocol latency of the plan a piece gets) for a
    collective, a Send's latency. An overlap pays it once per chunk."""
    op, c = s.op, ctx.cluster
    if isinstance(op, ir.Fused) and op.kind != "compute":
        return fused_latency_s(ctx, s, fused_parts(ctx, s))
    if isinstance(op, ir.Send):
        return coll.p2p_time(0.0, c, send_crosses_nodes(ctx, ctx.types[op.x].group))
    if isinstance(op, ir.COMMUNICATION_OPS):
        cluster = collective_cluster(ctx, s)
        group = ctx.types[op.x].group
        if single_rank_copy(ctx, s) is not None:
            return cluster.nccl.host_overhead_s + c.gpu.launch_latency_s
        nccl = cluster.nccl
        call = nccl.host_overhead_s + nccl.kind_latency_s(_collective_kind(op))
        if ctx.symbolic:
            return call + min(p.base_latency_s for p in nccl.protocols)
        piece = float(collective_nbytes(ctx, s)) / chunks
        return coll.choose_plan(_collective_kind(op), piece, ctx.group_size(group), cluster,
                                ctx.group_size(group)).fixed_s
    return c.gpu.launch_latency_s


def _fused_beside_compute_s(ctx: CostContext, producer: ir.Stmt, consumer: ir.Stmt,
                            chunks: int):
    """Time a fused collective consumer adds beside a computation producer that fills the
    SMs (a MatMul or elementwise kernel), or None where the overlap is priced as a plain
    pipeline (no block curve: the presets; other producers or consumers).

    Measured on 2x H200 (GPU runs 6 and 10, model-parallel layer), cuBLAS and the fused
    AllReduce time-share the SMs rather than split them: the overlapped step took the MatMul
    alone plus the collective on its overlapped grid (0 to 20 % less; T=8192: 1.87 + 0.49 =
    2.36 against 2.36 ms in run 6, 1.85 + 0.56 against 2.37 in run 10), and never the MatMul
    slowed to the SMs a partition would leave it. So the consumer adds its chunks at the
    bandwidth of its grid (`nccl.max_channels` SMs' worth of blocks, about the runtime's
    quarter grid; the calibrated block curve), each chunk its own kernel's fixed cost."""
    c = ctx.cluster
    if not shares_sms(c, producer, consumer):
        return None
    one = _fused_cost(ctx, consumer, sms=overlap_consumer_sms(c))
    parts = fused_parts(ctx, consumer)
    return one.time_s + (chunks - 1) * fused_latency_s(ctx, consumer, parts)


def shares_sms(cluster: Cluster, producer: ir.Stmt, consumer: ir.Stmt) -> bool:
    """Whether an overlap of `producer` and `consumer` is priced as SM time-sharing
    (`_fused_beside_compute_s`): a computation beside a fused collective, on a cluster with a
    calibrated block curve."""
    return (bool(cluster.fused_block_bandwidth)
            and isinstance(producer.op, (ir.MatMul, *ir.ELEMENTWISE_OPS))
            and isinstance(consumer.op, ir.Fused) and consumer.op.kind != "compute")


def overlap_consumer_sms(cluster: Cluster) -> int:
    """SMs' worth of blocks an overlapped fused collective runs on (`nccl.max_channels`,
    capped by the GPU's SMs): the grid the cost model and the simulator price it at."""
    return min(cluster.nccl.max_channels, cluster.gpu.sm_count)


def _is_sliced(t: TensorType) -> bool:
    from workbench.types import Sliced

    return isinstance(t.layout, Sliced)


def stmt_group(ctx: CostContext, s: ir.Stmt) -> Group:
    """The group whose ranks run statement `s`: that of its first operand with a shape (a
    Send's destination stage receives, but the source stage runs it)."""
    names = s.op.operands()
    for n in names:
        t = ctx.types[n]
        if t.shape or len(names) == 1:
            return t.group
    return s.outs[0].type.group


def _max_busy(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = smax(out.get(k, 0), v)
    return out


def _add_busy(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


@dataclass(frozen=True)
class ProgramCost:
    """Closed-form time of a whole program (statements run one after another on each rank),
    the per-statement costs, and the bandwidth-only lower bound."""

    time_s: object
    stmts: tuple
    busy_s: dict

    @property
    def lower_bound_s(self):
        """No schedule of these kernels on this machine can be faster: each resource must be
        busy this long and serves one kernel at a time."""
        return smax(*self.busy_s.values()) if self.busy_s else 0


def host_overlapped_total(costs, symbolic: bool = False):
    """Time of statements run one after another on a stream, with the host issuing them ahead.

    CUDA and NCCL calls are asynchronous: the host pays a call's issue cost (`host_s`) while
    the GPU is still running earlier work, so the GPU starts a statement at the later of the
    moment it is free and the moment the host has issued it. A single call therefore costs
    host + GPU time (what a CUDA-event-timed microbenchmark sees), while in a sequence most
    of the host cost hides behind the kernels before it. The simulator runs the same rule.
    """
    zero = sympy.Integer(0) if symbolic else 0.0
    host, gpu = zero, zero
    for c in costs:
        host = host + c.host_s
        start = sympy.Max(gpu, host) if symbolic else max(gpu, host)
        gpu = start + (c.time_s - c.host_s)
    return gpu


def program_cost(program: ir.Program, cluster: Cluster, bound: Mapping[sympy.Symbol, int],
                 symbolic: bool = False) -> ProgramCost:
    """The cost model's prediction for a program on a cluster."""
    ctx = CostContext(program, cluster, bound, symbolic)
    costs = tuple(stmt_cost(ctx, s) for s in program.stmts)
    total = host_overlapped_total(costs, symbolic)
    busy: dict = {}
    for c in costs:
        busy = _add_busy(busy, c.busy_s)
    return ProgramCost(total, costs, busy)
