"""Pricing a lowered plan's steps (decision 104; design notes 74, 87).

`plan_cost(plan, cluster, bound)` prices what the GPU backend runs: each step of the plan that
codegen.lower made, by its class's rule in PLAN_COST_RULES (and PLAN_FIXED_RULES for the part
of it that does not shrink with its data), from the step's work (codegen.work.StepWork: the
HBM bytes it reads and writes, of them the 2-byte ones, the bytes it moves between GPUs) and
its kind, count and group, with the formulas the IR-level model uses (roofline `work_s`,
NCCL's plans `cost_model.collectives`, peer loads and stores `fused_link_s`, the fused
kernels' fixed costs). Nothing here is a new formula: the rules say what a step is, and the
cost model's functions say what it costs.

A step holds what it is priced by (decision 104): a generated kernel's flops and dropout
masks are its own fields, counted once by lowering (KernelStep.flops), and no IR statement is
read here (an import-linter contract in pyproject.toml says so). Every plan step class has its
rule: a row
kernel's whole AllReduce by its algorithm, AllToAll by its rank's bytes, a fused Send and its
receiver's wait, a receiving stage's chunks pipelined with its sender's, the pipelined
hierarchy's legs (`cost_model.ops.pipeline.pipelined`), copy engines (design note 87) and
CoCoNet's ring-fused form (RingFusedStep: NCCL's ring on its kernel's bytes). What
kind of step a region became (the fused-kind switch) is lowering's decision, read here from
the step's class and its kernel's kind.

Numbers only: `--symbolic`'s closed form is a lower bound read from the same plan
(`cost_model.plan_formula`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import sympy

from codegen import plan as cp
from codegen.spec import ComputedPush
from codegen.work import (
    DTYPE_BYTES,
    StepWork,
    link_phase_work,
    peer_bytes,
    per_chunk,
    send_bytes,
    step_work,
)
from cost_model import collectives as coll
from cost_model.collectives import smax, smin
from cost_model.hardware import Cluster
from cost_model.ops import alltoall as a2a
from cost_model.ops.comm import norm_combine_s, peak_link_Bps, send_crosses_nodes, send_link
from cost_model.ops.compute import Work, compute_cost
from cost_model.ops.context import (
    CostContext,
    OpCost,
    ProgramCost,
    add_busy,
    host_overlapped_total,
    max_busy,
)
from cost_model.ops.fused import (
    FusedParts,
    fused_latency_s,
    fused_parts_cost,
    overlap_consumer_sms,
)
from cost_model.ops.network_fused import ring_cost, ring_plan
from cost_model.ops.pipeline import pipelined
from workbench.types import Group


@dataclass(frozen=True)
class PlanContext:
    """A plan to price on a cluster with bound sizes: the plan, the IR-level context of its
    program (the cluster, the sizes, the codegen options the plan was lowered with) and its
    buffers' sizes."""

    plan: cp.Plan
    ctx: CostContext
    numel: dict

    @staticmethod
    def of(plan: cp.Plan, cluster: Cluster, bound: Mapping[sympy.Symbol, int]) -> PlanContext:
        """The context of `plan` on `cluster` with sizes `bound`."""
        ctx = CostContext(plan.program, cluster, bound, options=plan.options)
        return PlanContext(plan, ctx, {b.name: b.numel for b in plan.buffers})

    def n(self, expr) -> float:
        """A plan expression (sizes unbound) as a number."""
        return float(sympy.sympify(expr).subs(self.ctx.bound))

    def group(self, comm: str = "group") -> Group:
        """The group a step runs on: the plan's P ranks (a node's in a node view), or for
        the "inter" communicator the same local rank of every node."""
        if comm == "inter":
            return Group("inter", sympy.Integer(self.plan.nodes))
        return Group("plan", sympy.Integer(self.plan.P))

    def work(self, step) -> StepWork:
        """The step's StepWork, its sizes bound."""
        return self.bind(step_work(step, self.plan.P, self.numel))

    def bind(self, w: StepWork) -> StepWork:
        """A StepWork with its sizes bound."""
        return StepWork(*(self.n(getattr(w, f)) for f in w.__dataclass_fields__))


# ---------------------------------------------------------------- generated kernels


def kernel_work(pc: PlanContext, step: cp.KernelStep) -> Work:
    """The roofline Work of one launch of a generated kernel, from its step alone: its bytes
    (codegen.work.StepWork) and the flops and dropout masks lowering counted (KernelStep.flops,
    .dropouts: one chunk's for a kernel launched per chunk of an overlap)."""
    w = pc.work(step)
    return Work(w.read_bytes + w.write_bytes, w.flops, step.flops_dtype, w.write_bytes,
                w.f16_read_bytes, w.f16_write_bytes, pc.n(step.dropouts))


def fused_parts_of(pc: PlanContext, step: cp.KernelStep) -> FusedParts:
    """A fused collective kernel as the cost model's FusedParts, from its spec: the buffers
    it reduce-scatters by peer loads (or pushes, in push mode) and gathers by peer stores,
    whole (P slices of `extent` elements), and its Work."""
    rs, ag = (pc.n(b) for b in peer_bytes(step, pc.plan.P))
    send = pc.n(send_bytes(step)) if step.spec.kind == "send" else 0.0
    group = pc.group() if (rs or ag or send) else None
    # computation before a reduce-scatter pushes its values whatever the collective mode
    pushed = any(isinstance(p, ComputedPush) for p in step.spec.pushes)
    ar = step.spec.allreduce  # a row kernel's whole AllReduce: its algorithm's fixed cost
    work, after = _link_phases(pc, step)
    return FusedParts(rs, ag, send, work, group, pushed=pushed,
                      algorithm=ar.algorithm if ar is not None else "two-shot",
                      unroll=step.spec.unroll,  # as generated (a row kernel's is 1)
                      after=after, compute_share=ar.compute_share if ar is not None else 0)


def _link_phases(pc: PlanContext, step: cp.KernelStep) -> tuple[Work, Work | None]:
    """A kernel's Work split into the phase its link traffic overlaps and the computation
    that waits for that phase (codegen.work.link_phase_work: a row kernel's passes after a
    two-shot barrier or Lamport's stores, design note 97; the flops are the passes'), or its
    whole Work and None."""
    whole = kernel_work(pc, step)
    phase = link_phase_work(step, pc.plan.P)
    if phase is None:
        return whole, None
    p = pc.bind(phase)
    during = Work(p.read_bytes + p.write_bytes, 0.0, whole.dtype, p.write_bytes,
                  p.f16_read_bytes, p.f16_write_bytes)
    after = Work(whole.hbm_bytes - during.hbm_bytes, whole.flops, whole.dtype,
                 whole.write_bytes - p.write_bytes, whole.f16_read_bytes - p.f16_read_bytes,
                 whole.f16_write_bytes - p.f16_write_bytes, whole.dropout_elements)
    return during, after


def _fused_collective_cost(pc: PlanContext, step: cp.KernelStep, sms=None) -> OpCost:
    """A fused collective kernel holding `sms` SMs (None: all), as `fused_cost` prices one:
    its fixed cost, then its link time and its computation overlapped."""
    return fused_parts_cost(pc.ctx, fused_parts_of(pc, step), sms)


def copy_engine_parts(pc: PlanContext, step: cp.CopyEngineStep) -> FusedParts:
    """A fused collective whose bytes copy engines move, as the cost model's FusedParts: the
    buffers its pulls reduce-scatter and its pushes gather (P slices of each copy), its HBM
    traffic (the kernel's and the copies' staging: codegen.work), the kernel's flops, its
    pieces."""
    P = pc.plan.P
    rs = sum(P * pc.n(c.numel) * DTYPE_BYTES[c.dtype] for c in step.copies if c.pull)
    ag = sum(P * pc.n(c.numel) * DTYPE_BYTES[c.dtype] for c in step.copies if not c.pull)
    kw, w = kernel_work(pc, step.kernel), pc.work(step)
    work = Work(w.read_bytes + w.write_bytes, kw.flops, kw.dtype, w.write_bytes,
                w.f16_read_bytes, w.f16_write_bytes, kw.dropout_elements)
    return FusedParts(rs, ag, 0, work, pc.group() if (rs or ag) else None, engine="copy",
                      chunks=step.chunks)


def _copy_engine_cost(pc: PlanContext, step: cp.CopyEngineStep) -> OpCost:
    return fused_parts_cost(pc.ctx, copy_engine_parts(pc, step))


def _copy_engine_fixed_s(pc: PlanContext, step: cp.CopyEngineStep, chunks: int):
    return fused_latency_s(pc.ctx, None, copy_engine_parts(pc, step))


def _ring_fused_cost(pc: PlanContext, step: cp.RingFusedStep) -> OpCost:
    """CoCoNet's ring-fused collective: NCCL's ring plan on the bytes its peers-form kernel
    reduce-scatters and gathers, plus the computation the ring does not hide
    (cost_model.ops.network_fused.ring_cost); over one rank, that kernel."""
    parts = fused_parts_of(pc, step.kernel)
    return ring_cost(pc.ctx, parts) or fused_parts_cost(pc.ctx, parts)


def _ring_fused_fixed_s(pc: PlanContext, step: cp.RingFusedStep, chunks: int):
    parts = fused_parts_of(pc, step.kernel)
    priced = ring_plan(pc.ctx, parts)
    return priced[0].fixed_s if priced is not None else fused_latency_s(pc.ctx, None, parts)


def _finish_cost(pc: PlanContext, step: cp.KernelStep) -> OpCost:
    """A norm's finishing kernel: across ranks, the combine the cost model prices for
    reductions over slices (`norm_combine_s`); on one rank's partials, a launch."""
    if step.flags:
        return OpCost(norm_combine_s(pc.ctx, pc.group()), {}, "hbm")
    return OpCost(pc.ctx.cluster.gpu.launch_latency_s, {}, "hbm")


def _kernel_cost(pc: PlanContext, step: cp.KernelStep) -> OpCost:
    kind = step.spec.kind
    if kind in ("elementwise", "rows", "gather", "topk"):
        return compute_cost(pc.ctx, kernel_work(pc, step))
    if kind in ("collective", "send"):
        return _fused_collective_cost(pc, step)
    if kind == "finish":
        return _finish_cost(pc, step)
    if kind == "wait":
        # the receiving stage waits for the sender's flag: the sender's kernel is the time
        return OpCost(0.0, {}, "none")
    raise TypeError(f"a plan's kernel step must be of a kind the cost model prices, got "
                    f"{kind!r} ({step.spec.name}); add it to cost_model.plan_cost._kernel_cost")


def _kernel_fixed_s(pc: PlanContext, step: cp.KernelStep, chunks: int):
    if step.spec.kind in ("collective", "send"):
        return fused_latency_s(pc.ctx, None, fused_parts_of(pc, step))
    if step.spec.kind == "wait":
        return 0.0
    return pc.ctx.cluster.gpu.launch_latency_s


# ---------------------------------------------------------------- library calls


def nccl_buffer(pc: PlanContext, step: cp.NcclStep):
    """(kind, buffer bytes in nccl-tests' convention, ranks, across nodes) of an NCCL step:
    the count is one rank's part for reduce_scatter and all_gather, its buffer otherwise; an
    "inter" call runs over one rank per node."""
    across = step.comm == "inter"
    P = pc.plan.nodes if across else pc.plan.P
    part = pc.n(step.count) * DTYPE_BYTES[step.dtype]
    c = step.collective
    return c.kind, part * (P if c.whole_src or c.whole_dst else 1), P, across


def nccl_call(pc: PlanContext, step: cp.NcclStep):
    """`nccl_buffer`'s (kind, bytes, ranks, across nodes) and the cluster with the step's
    dtype's NCCL constants."""
    return (*nccl_buffer(pc, step), pc.ctx.cluster.for_dtype(step.dtype))


def nccl_plan(pc: PlanContext, step: cp.NcclStep, chunks: int = 1) -> coll.Plan:
    """The plan NCCL picks for one of `chunks` equal pieces of an NCCL step (its channels,
    steps and fixed cost)."""
    kind, nbytes, P, across, cluster = nccl_call(pc, step)
    return coll.choose_plan(kind, nbytes / chunks, P, cluster, P, across)


def copies(step: cp.NcclStep) -> bool:
    """Whether NCCL over one rank copies the buffer (out of place), as `single_rank_copy`:
    offsets compared on that rank, rank 0 (an AllGather of an update's slice, from offset
    `N * rank` of the buffer it gathers into, runs in place)."""
    def where(loc):
        return loc.buffer, sympy.sympify(loc.offset).subs(cp.RANK, 0)

    return where(step.src) != where(step.dst)


def copy_work(pc: PlanContext, step: cp.NcclStep) -> Work:
    """The HBM work of NCCL's copy of an out-of-place buffer over one rank."""
    w = pc.work(step)
    return Work(w.read_bytes + w.write_bytes, 0, "f32", w.write_bytes, w.f16_read_bytes,
                w.f16_write_bytes)


def alltoall_of(pc: PlanContext, step: cp.NcclStep) -> tuple[float, int]:
    """(a rank's buffer bytes, ranks) of an all_to_all step (cost_model.ops.alltoall)."""
    return pc.n(step.count) * DTYPE_BYTES[step.dtype], pc.plan.P


def _alltoall_cost(pc: PlanContext, step: cp.NcclStep) -> OpCost:
    """NCCL's grouped sends of an AllToAll (cost_model.ops.alltoall), or over one rank the
    copy of its buffer."""
    nbytes, P = alltoall_of(pc, step)
    cluster = pc.ctx.cluster
    host = cluster.nccl.host_overhead_s
    t = a2a.alltoall_seconds(cluster, nbytes, P)
    if t is None:
        c = compute_cost(pc.ctx, copy_work(pc, step))
        return OpCost(c.time_s + host, c.busy_s, "hbm", host)
    return OpCost(t, a2a.alltoall_busy(cluster, nbytes, P), "link", host)


def _exchanges(step: cp.NcclStep) -> bool:
    """Whether an NCCL step is an AllToAll (NCCL's grouped sends, cost_model.ops.alltoall)."""
    return step.op == "all_to_all"


def _nccl_cost(pc: PlanContext, step: cp.NcclStep) -> OpCost:
    if _exchanges(step):
        return _alltoall_cost(pc, step)
    kind, nbytes, P, across, cluster = nccl_call(pc, step)
    t = coll.collective_time(kind, nbytes, P, cluster, P, across)
    busy = coll.collective_bus_bytes(kind, nbytes, P) / peak_link_Bps(
        pc.ctx, pc.group(step.comm), across)
    host = cluster.nccl.host_overhead_s
    if P == 1 and copies(step):
        c = compute_cost(pc.ctx, copy_work(pc, step))
        return OpCost(t + c.time_s, {"link": busy, **c.busy_s}, "hbm", host)
    return OpCost(t, {"link": busy}, "link", host)


def _nccl_fixed_s(pc: PlanContext, step: cp.NcclStep, chunks: int):
    if _exchanges(step):
        nbytes, P = alltoall_of(pc, step)
        return a2a.alltoall_latency_s(pc.ctx.cluster, P, nbytes / chunks)
    kind, nbytes, P, across, cluster = nccl_call(pc, step)
    if P == 1 and copies(step):
        return cluster.nccl.host_overhead_s + pc.ctx.cluster.gpu.launch_latency_s
    return nccl_plan(pc, step, chunks).fixed_s


def gemm_work(pc: PlanContext, step: cp.GemmStep) -> Work:
    """A GEMM's roofline Work: its operands and product, 2 m k n flops at its dtype's rate
    (the bytes at the flat HBM rate, as `matmul_work`)."""
    w = pc.work(step)
    return Work(w.read_bytes + w.write_bytes, w.flops, step.dtype)


def _gemm_cost(pc: PlanContext, step: cp.GemmStep) -> OpCost:
    return compute_cost(pc.ctx, gemm_work(pc, step))


def _reduce_cost(pc: PlanContext, step: cp.ReduceStep) -> OpCost:
    """A library reduction: one read and two flops an element (as `reduction_work`)."""
    count = pc.n(step.count)
    return compute_cost(pc.ctx, Work(count * DTYPE_BYTES[step.dtype], 2 * count))


def _send_crosses(pc: PlanContext) -> bool:
    return send_crosses_nodes(pc.ctx, pc.group())


def _send_cost(pc: PlanContext, step: cp.SendStep) -> OpCost:
    nbytes = pc.work(step).link_bytes
    crosses = _send_crosses(pc)
    t = coll.p2p_time(nbytes, pc.ctx.cluster, crosses)
    return OpCost(t, {"link": nbytes / send_link(pc.ctx, pc.group()).bandwidth_Bps}, "link",
                  pc.ctx.cluster.nccl.host_overhead_s)


def _send_fixed_s(pc: PlanContext, step: cp.SendStep, chunks: int):
    return coll.p2p_time(0.0, pc.ctx.cluster, _send_crosses(pc))


def _launch_fixed_s(pc: PlanContext, step, chunks: int):
    return pc.ctx.cluster.gpu.launch_latency_s


# ---------------------------------------------------------------- overlaps


def shares_sms_step(cluster: Cluster, step: cp.OverlapStep) -> bool:
    """Whether an overlap is priced as SM time-sharing: its consumer kernel shares the SMs
    with a GEMM on part of its grid (lowering's OverlapStep.shares_sms), on a cluster with a
    calibrated block curve."""
    return bool(cluster.fused_block_bandwidth) and step.shares_sms


def consumer_sms(pc: PlanContext, step: cp.OverlapStep) -> float:
    """SMs' worth of the grid an overlapped consumer runs on (the plan's)."""
    return overlap_consumer_sms(pc.ctx.cluster, pc.plan.options, step.consumer_blocks)


def _overlap_cost(pc: PlanContext, step: cp.OverlapStep) -> OpCost:
    """Producer and consumer chunk by chunk on two streams, as `rules._overlapped_cost`
    prices an Overlapped statement: every chunk after the first pays its step's fixed cost
    again; the slower side runs the whole time and the faster adds one chunk of fill, or a
    fused collective beside a computation time-shares the SMs."""
    producer, consumer = (step_cost(pc, s) for s in (step.producer, step.consumer))
    chunks = step.chunks
    tp = _all_chunks_s(pc, step.producer, producer, chunks)
    if shares_sms_step(pc.ctx.cluster, step):
        one = _fused_collective_cost(pc, step.consumer, sms=consumer_sms(pc, step))
        tc = consumer.time_s
        t = tp + _all_chunks_s(pc, step.consumer, one, chunks)
    else:
        tc = _all_chunks_s(pc, step.consumer, consumer, chunks)
        t = smax(tp, tc) + smin(tp, tc) / chunks
    busy = add_busy(*(_all_chunks_busy(s, c, chunks)
                      for s, c in ((step.producer, producer), (step.consumer, consumer))))
    slow = producer if tp >= tc else consumer
    return OpCost(t, busy, slow.bottleneck)


def _all_chunks_s(pc: PlanContext, part, cost: OpCost, chunks: int):
    """Seconds of every chunk of an overlap's part: a kernel launched per chunk (priced on
    its chunk: codegen.work.per_chunk) `chunks` times; a GEMM or NCCL call priced whole, plus
    its fixed cost again for every chunk after the first."""
    if per_chunk(part):
        return chunks * cost.time_s
    return cost.time_s + (chunks - 1) * step_fixed_s(pc, part, chunks)


def _all_chunks_busy(part, cost: OpCost, chunks: int) -> dict:
    if not per_chunk(part):
        return cost.busy_s
    return {k: chunks * v for k, v in cost.busy_s.items()}


def _chunked_cost(pc: PlanContext, step: cp.ChunkedStep) -> OpCost:
    """Parts chunk by chunk on one stream: every chunk of each part, one after another (a
    receiving stage's flag waits cost nothing of their own: `receives`)."""
    costs = [step_cost(pc, s) for s in step.steps]
    t = sum((_all_chunks_s(pc, s, c, step.chunks) for s, c in zip(step.steps, costs)), 0.0)
    busy: dict = {}
    for s, c in zip(step.steps, costs):
        busy = add_busy(busy, _all_chunks_busy(s, c, step.chunks))
    slow = max(costs, key=lambda c: float(c.time_s))
    return OpCost(t, busy, slow.bottleneck)


def receives(step) -> bool:
    """Whether a step is the receiving stage's side of a fused Send: its flag wait (a wait
    kernel, or a ChunkedStep whose parts start with one, then what reads each chunk)."""
    first = step.steps[0] if isinstance(step, cp.ChunkedStep) else step
    return isinstance(first, cp.KernelStep) and first.spec.kind == "wait"


def _pipelined(sender: OpCost, receiver: OpCost, chunks: int) -> OpCost:
    """A sending stage's chunks and the receiving stage's work on each chunk, on two stages'
    GPUs at once (chunk i read once it has arrived), as an overlap of two stages: the slower
    side the whole time, the faster one chunk of fill; each stage's resources its own."""
    tp, tc = sender.time_s, receiver.time_s
    t = smax(tp, tc) + smin(tp, tc) / chunks
    slow = sender if tp >= tc else receiver
    return OpCost(t, max_busy(sender.busy_s, receiver.busy_s), slow.bottleneck)


def _statement_costs(pc: PlanContext, steps) -> list:
    """The costs of one statement's steps, in order (a receiving stage's chunked work and its
    sender's chunks as one pipeline)."""
    costs: list = []
    for k, step in enumerate(steps):
        c = step_cost(pc, step)
        if k and receives(step) and isinstance(step, cp.ChunkedStep) and c.time_s:
            costs.append(_pipelined(costs.pop(), c, step.chunks))
        else:
            costs.append(c)
    return costs


def _pipeline_leg(pc: PlanContext, leg, chunks: int):
    """(seconds of one piece of a pipelined hierarchy's leg on the GPU, the whole leg's
    cost, NCCL's host cost of a piece), as `cost_model.ops.pipeline.pipeline_leg_s`: an NCCL
    leg's piece by the plan NCCL picks for a piece (every step's latency again), less its
    host part; a kernel launched per chunk (the fused update + gather) priced on its chunk."""
    one = step_cost(pc, leg)
    if isinstance(leg, cp.NcclStep):
        piece = float(nccl_plan(pc, leg, chunks).time_s)
        return piece - one.host_s, one, one.host_s
    if per_chunk(leg):
        whole = OpCost(chunks * one.time_s, _all_chunks_busy(leg, one, chunks), one.bottleneck)
        return one.time_s, whole, one.host_s
    again = (chunks - 1) * (step_fixed_s(pc, leg, chunks) - one.host_s)
    return (one.time_s + again) / chunks, one, one.host_s


def _pipeline_cost(pc: PlanContext, step: cp.PipelineStep) -> OpCost:
    """A pipelined hierarchy's three legs as a pipeline of its chunks
    (`cost_model.ops.pipeline.pipelined`)."""
    legs = [_pipeline_leg(pc, leg, step.chunks) for leg in step.legs]
    return pipelined(legs, step.chunks)


PlanCostRule = Callable[[PlanContext, object], OpCost]

PLAN_COST_RULES: dict[type, PlanCostRule] = {
    cp.KernelStep: _kernel_cost,
    cp.NcclStep: _nccl_cost,
    cp.GemmStep: _gemm_cost,
    cp.ReduceStep: _reduce_cost,
    cp.SendStep: _send_cost,
    cp.OverlapStep: _overlap_cost,
    cp.PipelineStep: _pipeline_cost,
    cp.CopyEngineStep: _copy_engine_cost,
    cp.ChunkedStep: _chunked_cost,
    cp.RingFusedStep: _ring_fused_cost,
}
"""The time of a plan step of each class: (PlanContext, step) -> OpCost. A new plan step class
adds one entry here and one in PLAN_FIXED_RULES."""

PLAN_FIXED_RULES: dict[type, Callable] = {
    cp.KernelStep: _kernel_fixed_s,
    cp.NcclStep: _nccl_fixed_s,
    cp.GemmStep: _launch_fixed_s,
    cp.ReduceStep: _launch_fixed_s,
    cp.SendStep: _send_fixed_s,
    cp.OverlapStep: _launch_fixed_s,
    cp.PipelineStep: _launch_fixed_s,
    cp.CopyEngineStep: _copy_engine_fixed_s,
    cp.ChunkedStep: _launch_fixed_s,
    cp.RingFusedStep: _ring_fused_fixed_s,
}
"""The part of a step's time that does not shrink with its data, for one of `chunks` equal
pieces of it (an overlap pays it once per chunk)."""


def _rule(table: dict, name: str, step):
    rule = table.get(type(step))
    if rule is None:
        raise TypeError(f"every plan step class must have a rule in {name}, got "
                        f"{type(step).__name__}; add one to cost_model.plan_cost.{name}")
    return rule


def step_cost(pc: PlanContext, step) -> OpCost:
    """The cost of one plan step (PLAN_COST_RULES by its class)."""
    return _rule(PLAN_COST_RULES, "PLAN_COST_RULES", step)(pc, step)


def step_fixed_s(pc: PlanContext, step, chunks: int = 1):
    """The fixed part of one of `chunks` pieces of a step (PLAN_FIXED_RULES)."""
    return _rule(PLAN_FIXED_RULES, "PLAN_FIXED_RULES", step)(pc, step, chunks)


# ---------------------------------------------------------------- a whole plan


@dataclass(frozen=True)
class PlanCost(ProgramCost):
    """A plan's predicted time (its steps one after another on each rank, the host issuing
    NCCL calls ahead) and each step's cost in order (`stmts`), with the top-level statement
    each step lowers (`names`, parallel to `stmts`)."""

    names: tuple = ()

    def by_statement(self) -> dict[str, tuple[float, float]]:
        """(seconds, of them the host's issue cost) of each top-level statement's steps, by
        its name: what a per-statement measurement is set against (`sweep steps`)."""
        out: dict[str, tuple[float, float]] = {}
        for c, name in zip(self.stmts, self.names):
            t, host = out.get(name, (0.0, 0.0))
            out[name] = (t + float(c.time_s), host + float(c.host_s))
        return out


def plan_cost(plan: cp.Plan, cluster: Cluster, bound: Mapping[sympy.Symbol, int]) -> PlanCost:
    """The cost model's prediction for a lowered plan on a cluster with sizes `bound` (see
    the module docstring). `bound`'s keys may be size names or any sympy Symbols of those
    names (ir.Program.sizes_by_symbol)."""
    bound = plan.program.sizes_by_symbol(bound)
    pc = PlanContext.of(plan, cluster, bound)
    costs, names = [], []
    for origin, steps, _ in plan.statements():
        priced = _statement_costs(pc, steps)
        costs += priced
        names += [origin.stmt] * len(priced)
    total = host_overlapped_total(costs)
    busy: dict = {}
    for c in costs:
        busy = add_busy(busy, c.busy_s)
    return PlanCost(total, tuple(costs), busy, tuple(names))


def leaf_steps(step):
    """The steps inside a composite step (overlap, chunked, pipeline), or the step itself."""
    if isinstance(step, cp.OverlapStep):
        return [step.producer, step.consumer]
    if isinstance(step, cp.ChunkedStep):
        return list(step.steps)
    if isinstance(step, cp.PipelineStep):
        return list(step.legs)
    return [step]


def nccl_link_bytes(plan: cp.Plan, step: cp.NcclStep) -> sympy.Expr:
    """Bytes one rank moves over links for an NCCL step, sizes unbound: a collective's bus
    bytes (`collectives.collective_bus_bytes` of its nccl-tests buffer: 2(P-1)/P of it for an
    AllReduce, (P-1)/P for ReduceScatter and AllGather, the buffer for a Broadcast or Reduce's
    chain), the (P-1)/P of its buffer an AllToAll sends away. `plan_link_bytes` binds it;
    `plan_formula` keeps it a formula."""
    nbytes = sympy.sympify(step.count) * DTYPE_BYTES[step.dtype]
    if _exchanges(step):  # all_to_all: all but this rank's own block
        return nbytes * (plan.P - 1) / plan.P
    P = plan.nodes if step.comm == "inter" else plan.P
    c = step.collective
    whole = nbytes * (P if c.whole_src or c.whole_dst else 1)
    return sympy.sympify(coll.collective_bus_bytes(c.kind, whole, P))


def plan_link_bytes(plan: cp.Plan, bound: Mapping[sympy.Symbol, int]) -> float:
    """Bytes each GPU must send (= receive) for the plan's communication, at the bandwidth
    lower bound: an NCCL step's (`nccl_link_bytes`), a Send's payload, a fused kernel's peer
    loads and stores (StepWork.link_bytes). Divided by the link bandwidth, the link floor of
    the step (the runtime's `comm_bytes`)."""
    pc = PlanContext.of(plan, None, bound)
    total = 0.0
    for step in (leaf for s in plan.steps for leaf in leaf_steps(s)):
        if isinstance(step, cp.NcclStep):
            total += pc.n(nccl_link_bytes(plan, step))
        else:
            total += pc.work(step).link_bytes
    return total


__all__ = ["PLAN_COST_RULES", "PLAN_FIXED_RULES", "PlanContext", "PlanCost",
           "alltoall_of", "consumer_sms", "copies", "copy_engine_parts", "copy_work",
           "fused_parts_of", "gemm_work", "kernel_work", "leaf_steps", "nccl_buffer", "nccl_call",
           "nccl_link_bytes", "nccl_plan", "plan_cost",
           "plan_link_bytes", "receives", "shares_sms_step", "step_cost",
           "step_fixed_s"]
