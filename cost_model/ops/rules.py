"""The cost rules: one entry per IR op class in each table, as JAX keeps one rule per
primitive. `stmt_cost` prices a top-level statement with COST_RULES, `stmt_fixed_s` the part of
it that does not shrink with its data with FIXED_COST_RULES; an op class with no entry is an
error naming it. Regions (Fused, Overlapped) are priced as the generated code runs their body.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import sympy

from codegen.forms import fused_form, is_fused_collective
from cost_model.collectives import smax, smin
from cost_model.hardware import Cluster
from cost_model.ops.alltoall import alltoall_cost, alltoall_fixed_s
from cost_model.ops.comm import (
    collective_cost,
    collective_fixed_s,
    norm_combine_s,
    send_cost,
    send_fixed_s,
)
from cost_model.ops.compute import (
    compute_cost,
    elementwise_work,
    index_work,
    matmul_epilogue_works,
    matmul_work,
    reduction_work,
)
from cost_model.ops.context import (
    CostContext,
    OpCost,
    add_busy,
    is_sliced,
    max_busy,
    stmt_group,
)
from cost_model.ops.fused import fused_cost, fused_latency_s, fused_parts, overlap_consumer_sms
from cost_model.ops.network_fused import ring_fused_cost, ring_fused_plan
from cost_model.ops.pipeline import is_pipeline, pipeline_cost
from workbench import ir
from workbench.errors import WorkbenchError
from workbench.types import ReplicatedLayout

CostRule = Callable[[CostContext, ir.Stmt], OpCost]
FixedCostRule = Callable[[CostContext, ir.Stmt, int], object]


def rule_for(table: Mapping[type, Callable], table_name: str, op) -> Callable:
    """The rule of `table` for op `op`'s class, or an error naming the op and the table."""
    rule = table.get(type(op))
    if rule is None:
        raise WorkbenchError(f"cost model must know op {type(op).__name__}, got no rule in "
                             f"{table_name}; add one in cost_model/ops/rules.py")
    return rule


# ---------------------------------------------------------------- statement time


def _view_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    return OpCost(0.0 if not ctx.symbolic else sympy.Integer(0), {}, "none")  # a view


def _elementwise_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    return compute_cost(ctx, elementwise_work(ctx, [s]))


def _index_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    return compute_cost(ctx, index_work(ctx, s))


def _matmul_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    return compute_cost(ctx, matmul_work(ctx, s))


def _reduction_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    t_in = ctx.types[s.op.x]
    cost = compute_cost(ctx, reduction_work(ctx, s))
    if isinstance(t_in.layout, ReplicatedLayout) or not is_sliced(t_in):
        return cost
    # over a Sliced input the per-rank partials are all-reduced (a 4-byte AllReduce)
    return OpCost(cost.time_s + norm_combine_s(ctx, t_in.group), cost.busy_s, "hbm")


def _fused_compute_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    return compute_cost(ctx, elementwise_work(ctx, s.op.body))


def _fused_matmul_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    """The GEMM and, unless the library runs it, the epilogue kernel."""
    costs = [compute_cost(ctx, w) for w in matmul_epilogue_works(ctx, s)]
    busy: dict = {}
    for c in costs:
        busy = add_busy(busy, c.busy_s)
    return OpCost(sum((c.time_s for c in costs), 0), busy, costs[0].bottleneck)


# A Fused statement's price by what it runs as (codegen.forms.fused_form, lowering's decision):
# ring is CoCoNet's form across nodes (cost_model.ops.network_fused); copy engines and peer
# accesses are the fused kernel's pipeline (cost_model.ops.fused).
FUSED_COST_RULES: dict[str, CostRule] = {
    "compute": _fused_compute_cost,
    "matmul": _fused_matmul_cost,
    "ring": ring_fused_cost,
    "copy": fused_cost,
    "peers": fused_cost,
}


def _fused_stmt_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    return FUSED_COST_RULES[fused_form(s)](ctx, s)


def _overlapped_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    op = s.op
    if is_pipeline(op):  # three legs of a hierarchical split (cost_model.ops.pipeline)
        return pipeline_cost(ctx, s, stmt_cost, stmt_fixed_s)
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
        busy = add_busy(producer.busy_s, consumer.busy_s)
    else:  # the consumer runs in the next stage, on other GPUs, at the same time
        busy = max_busy(producer.busy_s, consumer.busy_s)
    slow = producer if ctx.symbolic or float(tp) >= float(tc) else consumer
    return OpCost(t, busy, slow.bottleneck)


COST_RULES: dict[type, CostRule] = {
    ir.Compute: _elementwise_cost,
    ir.Update: _elementwise_cost,
    ir.MatMul: _matmul_cost,
    ir.ReduceTensor: _reduction_cost,
    ir.Norm: _reduction_cost,
    ir.ReduceAxis: _elementwise_cost,  # a row kernel: reads its input, writes a value per row
    ir.Slice: _view_cost,
    ir.Gather: _index_cost,
    ir.TopK: _index_cost,
    ir.AllReduce: collective_cost,
    ir.ReduceScatter: collective_cost,
    ir.AllGather: collective_cost,
    ir.Broadcast: collective_cost,
    ir.Reduce: collective_cost,
    ir.Send: send_cost,
    ir.AllToAll: alltoall_cost,
    ir.Fused: _fused_stmt_cost,
    ir.Overlapped: _overlapped_cost,
}
"""The time of a top-level statement of each op class: (CostContext, Stmt) -> OpCost, its
predicted time, busy time per resource (the bandwidth-only lower bound) and bottleneck. A new
op adds one entry here (and one in FIXED_COST_RULES)."""


def stmt_cost(ctx: CostContext, s: ir.Stmt) -> OpCost:
    """Predicted time of one top-level statement (plain, Fused or Overlapped)."""
    return rule_for(COST_RULES, "COST_RULES", s.op)(ctx, s)


# ---------------------------------------------------------------- fixed cost


def _launch_fixed_s(ctx: CostContext, s: ir.Stmt, chunks: int = 1):
    return ctx.cluster.gpu.launch_latency_s


def _fused_stmt_fixed_s(ctx: CostContext, s: ir.Stmt, chunks: int = 1):
    form = fused_form(s)
    if form == "ring" and ring_fused_plan(ctx, s) is not None:
        return ring_fused_plan(ctx, s)[0].fixed_s
    if form == "compute":
        return _launch_fixed_s(ctx, s, chunks)
    if form == "matmul":
        return len(matmul_epilogue_works(ctx, s)) * _launch_fixed_s(ctx, s, chunks)
    return fused_latency_s(ctx, s, fused_parts(ctx, s))


FIXED_COST_RULES: dict[type, FixedCostRule] = {
    ir.Compute: _launch_fixed_s,
    ir.Update: _launch_fixed_s,
    ir.MatMul: _launch_fixed_s,
    ir.ReduceTensor: _launch_fixed_s,
    ir.Norm: _launch_fixed_s,
    ir.ReduceAxis: _launch_fixed_s,
    ir.Slice: _launch_fixed_s,
    ir.Gather: _launch_fixed_s,
    ir.TopK: _launch_fixed_s,
    ir.AllReduce: collective_fixed_s,
    ir.ReduceScatter: collective_fixed_s,
    ir.AllGather: collective_fixed_s,
    ir.Broadcast: collective_fixed_s,
    ir.Reduce: collective_fixed_s,
    ir.Send: send_fixed_s,
    ir.AllToAll: alltoall_fixed_s,
    ir.Fused: _fused_stmt_fixed_s,
    ir.Overlapped: _launch_fixed_s,
}
"""The part of a statement's time that does not shrink with its data, per op class:
(CostContext, Stmt, chunks) -> seconds for one of `chunks` equal pieces of it. A new op adds
one entry here (and one in COST_RULES)."""


def stmt_fixed_s(ctx: CostContext, s: ir.Stmt, chunks: int = 1):
    """The part of a statement's time that does not shrink with its data, for one of
    `chunks` equal pieces of it: a launch for a kernel, a fused kernel's fixed cost, NCCL's
    per-call cost (host, kind and protocol latency of the plan a piece gets) for a
    collective, a Send's latency. An overlap pays it once per chunk."""
    return rule_for(FIXED_COST_RULES, "FIXED_COST_RULES", s.op)(ctx, s, chunks)


# ---------------------------------------------------------------- overlap beside computation


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
    bandwidth of its grid (the runtime's, a quarter of the full grid by default:
    `overlap_consumer_sms`; the calibrated block curve), each chunk its own kernel's fixed
    cost."""
    c = ctx.cluster
    if not shares_sms(c, producer, consumer):
        return None
    one = fused_cost(ctx, consumer, sms=overlap_consumer_sms(c, ctx.options))
    parts = fused_parts(ctx, consumer)
    return one.time_s + (chunks - 1) * fused_latency_s(ctx, consumer, parts)


def shares_sms(cluster: Cluster, producer: ir.Stmt, consumer: ir.Stmt) -> bool:
    """Whether an overlap of `producer` and `consumer` is priced as SM time-sharing
    (`_fused_beside_compute_s`): a computation beside a fused collective, on a cluster with a
    calibrated block curve."""
    return (bool(cluster.fused_block_bandwidth)
            and isinstance(producer.op, (ir.MatMul, *ir.ELEMENTWISE_OPS))
            and is_fused_collective(consumer))
