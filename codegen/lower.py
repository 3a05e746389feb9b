"""Lower a (scheduled) program to a Plan: device buffers, where each value lives, and the steps
that compute it (generated kernels and NCCL collectives), for a group of P ranks.

This module holds the entry points and LOWERING_RULES, which picks the lowering of each op
class; the plan's types are in codegen.plan, the planner's state in codegen.planner, kernel
construction in codegen.kernel_builder, and each lowering kind in a codegen.lower_* module.

Storage rules (the whole runtime relies on them):
- every program input gets a buffer of its local shape;
- an Update writes in place into its target's buffer; an Update that turns a whole (Replicated)
  target into a Sliced value writes rank r's slice of it, at offset r * slice;
- an AllGather of such a slice gathers in place into the whole buffer; any other AllGather,
  every other collective and every Compute whose value is read outside its kernel gets a fresh
  buffer; values used only inside one fused kernel live in registers.

Pipelines (programs of several groups, one per stage): ranks are numbered stage-major, global
rank = stage * P + r; every buffer belongs to one group (`BufferSpec.group`) and is allocated on
that group's ranks only, every step runs on the groups that `Plan.step_groups` names, and a
Send writes into (fused) or receives into (NCCL) a buffer of the destination group on the
same local rank r.

Index expressions stay sympy until the last moment and are printed with the integer-division
printer (codegen.cprinter): `rank` and the size symbols are kernel parameters, `e` is the element
index inside a kernel's domain.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from codegen.forms import fused_form
from codegen.lower_alltoall import alltoall_kernel_step
from codegen.lower_collective import fused_collective_steps
from codegen.lower_copy_engines import copy_engine_step
from codegen.lower_elementwise import elementwise_kernel, slice_loc
from codegen.lower_index import gather_step, topk_step
from codegen.lower_library import (
    gemm_step,
    matmul_epilogue_steps,
    nccl_step,
    reduce_tensor_steps,
)
from codegen.lower_node import node_view, per_node_of
from codegen.lower_norm import norm_steps
from codegen.lower_overlap import overlap_steps
from codegen.lower_pipeline import pipeline_step
from codegen.lower_rows import has_axis_reduction, row_kernel_step
from codegen.lower_send import p2p_step, send_steps
from codegen.plan import (
    KernelStep,
    Origin,
    PipelineStep,
    Plan,
    RingFusedStep,
    fault,
    grid_rule_of,
    map_kernels,
)
from codegen.planner import Planner, numel_of, stage_order
from codegen.tuning import tune_plan
from codegen.work import SYNC_KINDS, kernel_math, per_chunk
from workbench import ir
from workbench.errors import WorkbenchError
from workbench.options import CodegenOptions

# The entry points: `lower` a program to a Plan, and its pipeline's `stage_order` (the runtime
# sizes its rank groups by it before lowering). The plan's types live in codegen.plan.
__all__ = ["LOWERING_RULES", "lower", "stage_order"]

# A lowered statement: its steps, each with the groups (pipeline stages) that run it.
Steps = list[tuple[object, tuple[int, ...]]]

@dataclass(frozen=True)
class LoweringContext:
    """What every lowering rule reads: the planner's state and the codegen options."""

    pl: Planner
    opts: CodegenOptions

    def here(self, steps) -> Steps:
        """`steps` run on the group of the statement being lowered."""
        return [(s, (self.pl.group,)) for s in steps]


def _what(stmt: ir.Stmt) -> str:
    return f"statement {stmt.name} ({stmt.op})"


def _lower_overlapped(ctx: LoweringContext, stmt: ir.Stmt, first: int) -> Steps:
    if len(stmt.op.body) == 3:  # a pipelined hierarchy's legs (codegen.lower_pipeline)
        return ctx.here([pipeline_step(ctx.pl, stmt, first, ctx.opts)])
    return overlap_steps(ctx.pl, stmt, first, ctx.opts)


def _lower_matmul(ctx: LoweringContext, stmt: ir.Stmt, first: int) -> Steps:
    return ctx.here([gemm_step(ctx.pl, stmt, _what(stmt))])


# What a plan that lowering refuses for want of a network-fused collective says; the simulate
# command shows such a row with this note and never marks it best.
SIMULATED_ONLY = "simulated only: needs a fused network collective"


def _lower_fused(ctx: LoweringContext, stmt: ir.Stmt, first: int) -> Steps:
    """A fused region by its form (codegen.forms.fused_form: the one place that decides what
    a region runs as) and, for a kernel, its shape: a row kernel where it reduces along rows."""
    op = stmt.op
    form = fused_form(stmt)
    if has_axis_reduction(stmt):  # RMSNorm, LayerNorm, softmax: a row kernel (lower_rows)
        return ctx.here([row_kernel_step(ctx.pl, stmt, first, ctx.opts)])
    if form == "copy":
        return ctx.here([copy_engine_step(ctx.pl, stmt, first)])
    if form == "ring":  # priced and simulated from the peers form's kernel, never run
        why = (f"{_what(stmt)}: {SIMULATED_ONLY}: the update inside NCCL's ring across "
               "nodes needs a collective whose network steps a kernel drives with "
               "computation between them (NCCL 2.28's device API reaches peers over "
               "NVLink/NVLS, and GIN's one-sided puts over the network, but gives no ring "
               "to fuse into; decision 72); run fuse-rs-c-ag inside a node, or "
               "the pipelined hierarchy across nodes")
        kernels = fused_collective_steps(ctx.pl, stmt, first, ctx.opts)
        if len(kernels) != 1:
            raise fault(f"{why}; and a ring-fused region must be one kernel to be priced, "
                        f"got {len(kernels)} launches (a norm whose users wait for it)")
        return ctx.here([RingFusedStep(kernels[0], stmt.name, why)])
    if form == "matmul":
        return ctx.here(matmul_epilogue_steps(ctx.pl, stmt, first))
    if form == "compute":
        return ctx.here([elementwise_kernel(ctx.pl, stmt, first)])
    # "peers": one kernel moving the bytes, by the collective it holds
    if op.kind == "alltoall":  # a peer-memory AllToAll with its computation (lower_alltoall)
        return ctx.here([alltoall_kernel_step(ctx.pl, stmt, first, ctx.opts)])
    if op.kind == "send":
        return send_steps(ctx.pl, stmt, first, ctx.opts)
    return ctx.here(fused_collective_steps(ctx.pl, stmt, first, ctx.opts))


def _lower_send(ctx: LoweringContext, stmt: ir.Stmt, first: int) -> Steps:
    return [p2p_step(ctx.pl, stmt)]


def _lower_slice(ctx: LoweringContext, stmt: ir.Stmt, first: int) -> Steps:
    ctx.pl.locs[stmt.out.name] = slice_loc(ctx.pl, stmt, _what(stmt))  # a view: no step
    return []


def _lower_norm(ctx: LoweringContext, stmt: ir.Stmt, first: int) -> Steps:
    return ctx.here(norm_steps(ctx.pl, stmt, first))


def _lower_rows(ctx: LoweringContext, stmt: ir.Stmt, first: int) -> Steps:
    return ctx.here([row_kernel_step(ctx.pl, stmt, first, ctx.opts)])


def _lower_elementwise(ctx: LoweringContext, stmt: ir.Stmt, first: int) -> Steps:
    return ctx.here([elementwise_kernel(ctx.pl, stmt, first)])


def _lower_reduce_tensor(ctx: LoweringContext, stmt: ir.Stmt, first: int) -> Steps:
    return ctx.here(reduce_tensor_steps(ctx.pl, stmt))


def _lower_gather(ctx: LoweringContext, stmt: ir.Stmt, first: int) -> Steps:
    return ctx.here([gather_step(ctx.pl, stmt, first)])


def _lower_topk(ctx: LoweringContext, stmt: ir.Stmt, first: int) -> Steps:
    return ctx.here([topk_step(ctx.pl, stmt, first)])


def _lower_nccl(ctx: LoweringContext, stmt: ir.Stmt, first: int) -> Steps:
    return ctx.here([nccl_step(ctx.pl, stmt, first)])


LoweringRule = Callable[[LoweringContext, ir.Stmt, int], Steps]

LOWERING_RULES: dict[type, LoweringRule] = {
    ir.Compute: _lower_elementwise,
    ir.Update: _lower_elementwise,
    ir.Slice: _lower_slice,
    ir.Norm: _lower_norm,
    ir.ReduceAxis: _lower_rows,
    ir.MatMul: _lower_matmul,
    ir.AllReduce: _lower_nccl,
    ir.ReduceScatter: _lower_nccl,
    ir.AllGather: _lower_nccl,
    ir.Broadcast: _lower_nccl,
    ir.Reduce: _lower_nccl,
    ir.ReduceTensor: _lower_reduce_tensor,
    ir.Send: _lower_send,
    ir.AllToAll: _lower_nccl,
    ir.Gather: _lower_gather,
    ir.TopK: _lower_topk,
    ir.Fused: _lower_fused,
    ir.Overlapped: _lower_overlapped,
}
"""How the GPU backend runs each op class, as JAX keeps one lowering per primitive: a rule
takes the statement and the index of its first leaf and returns its steps. A new op adds one
entry here; an op with none is reported by `lower` as not generated, naming the statement."""


def lower(program: ir.Program, P: int, options: CodegenOptions | None = None, *,
          collective_unroll: int | None = None, collective_mode: str | None = None,
          collective_vec_bytes: int | None = None, collective_cache: str | None = None,
          priced_only: bool = False) -> Plan:
    """Lower `program` for groups of P ranks (P per stage of a pipeline, whose ranks are
    numbered stage-major) with the codegen `options` (workbench.options; None: the defaults),
    which the plan keeps (`Plan.options`); raises RuntimeFault for ops the GPU backend does not
    generate yet (the message names the op and the statement). `priced_only`: also lower the
    forms that are priced and simulated but never run (RingFusedStep; `Plan.refusal` says
    why), for the readers that price a schedule the backend refuses.

    The keyword arguments are those of before the options (unroll, collective_mode, vec_bytes,
    cache), set over `options` when given: callers written against them still lower the same
    plan."""
    opts = options or CodegenOptions()
    given = {"unroll": collective_unroll, "collective_mode": collective_mode,
             "vec_bytes": collective_vec_bytes, "cache": collective_cache}
    given = {k: v for k, v in given.items() if v is not None}
    if given:
        try:
            opts = dataclasses.replace(opts, **given)
        except WorkbenchError as e:
            raise fault(str(e)) from None
    plan = _lower_any(program, P, opts)
    if plan.refusal and not priced_only:
        raise fault(plan.refusal)
    return dataclasses.replace(tune_plan(plan, opts), options=opts)


def _lower_any(program: ir.Program, P: int, opts: CodegenOptions) -> Plan:
    per_node = per_node_of(program)
    if per_node:
        # node-level collectives: lower one node's view (codegen.lower_node, design note 36)
        if P % per_node:
            raise fault(f"the group size must be a multiple of the {per_node} GPUs per node of "
                        f"{program.name}'s node-level collectives, got P={P}")
        plan = _lower(node_view(program), per_node, opts)
        chunks = [s.chunks for s in plan.steps if isinstance(s, PipelineStep)]
        return dataclasses.replace(plan, program=program, per_node=per_node,
                                   nodes=P // per_node, slice_chunks=max(chunks, default=1))
    return _lower(program, P, opts)


def origin_of(stmt: ir.Stmt) -> Origin:
    """How the plan names the steps of top-level statement `stmt` (codegen.plan.Origin): its
    kernels by its region's text for a fused region (FusedAllreduce[lamport], ...), else by
    its op class; an overlap's parts and a hierarchy's legs by their own statements."""
    op = stmt.op
    kind = type(op).__name__
    parts = tuple(origin_of(s) for s in op.body) if isinstance(op, ir.Overlapped) else ()
    return Origin(stmt.name, f"{stmt.name} = {op if isinstance(op, ir.Fused) else kind}",
                  f"{stmt.name} = {kind}", parts)


def _kernel_math(pl: Planner):
    """The function that fills a kernel step's grid rule (codegen.plan.grid_rule_of) and its
    flops, dropout masks and their dtype from the statements it computes
    (codegen.work.kernel_math), for one launch: a kernel launched per chunk of a composite
    step computes one chunk's."""
    leaves = {leaf.name: leaf for s in pl.program.stmts for leaf in s.leaves()}

    def iteration_numel(s: ir.Stmt):
        if isinstance(s.op, ir.ReduceAxis):  # reads its input whole, writes one per row
            return pl.sub(numel_of(s.op.input_type(pl.types, str(s.op)).local_shape()))
        return pl.local_numel(s.out.name)

    def fill(step: KernelStep, chunks: int) -> KernelStep:
        step = dataclasses.replace(step, grid_rule=grid_rule_of(step.spec))
        if step.spec.kind in SYNC_KINDS:
            return step
        flops, dropouts, dtype = kernel_math([leaves[n] for n in step.stmts if n in leaves],
                                             pl.local_numel, iteration_numel)
        if chunks > 1 and per_chunk(step):
            flops, dropouts = flops / chunks, dropouts / chunks
        return dataclasses.replace(step, flops=flops, dropouts=dropouts, flops_dtype=dtype)

    return fill


def _lower(program: ir.Program, P: int, opts: CodegenOptions) -> Plan:
    pl = Planner(program, P)
    pl.analyse_uses()
    for v in program.inputs:
        pl.locs[v.name] = pl.new_buffer(v.name, pl.local_numel(v.name), holds_input=v.name)
    ctx = LoweringContext(pl, opts)
    math = _kernel_math(pl)
    steps: Steps = []
    origins: list[Origin] = []
    leaf_index = 0
    for stmt in program.stmts:
        first = leaf_index
        leaf_index += len(list(stmt.leaves()))
        pl.group = pl.stage(stmt)
        rule = LOWERING_RULES.get(type(stmt.op))
        if rule is None:
            raise fault(f"the GPU backend must support every op of {program.name}, got "
                        f"{_what(stmt)}, which it does not generate yet; measure a schedule "
                        "without it")
        lowered = [(map_kernels(s, math, 1), g) for s, g in rule(ctx, stmt, first)]
        steps += lowered
        origins += [origin_of(stmt)] * len(lowered)
    return Plan(program, P, tuple(pl.buffers.values()), dict(pl.locs),
                tuple(s for s, _ in steps), tuple(g.name for g in pl.stages),
                tuple(g for _, g in steps), origins=tuple(origins))
