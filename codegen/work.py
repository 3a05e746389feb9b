"""What each plan step does, as the cost model would price it: a `StepWork` record per step
(this rank's HBM bytes read and written, bytes it moves over links, flops, and the groups that
run it), read from the plan alone: the buffers, counts and kernel specs lowering made.

This is the first part of pricing plan steps instead of IR statements (issue 22's "one plan,
four readers"; docs/design/house.md, note 61 says what is left). Sizes stay expressions, as the
plan's. What a record counts:

- a generated kernel: each vector load and store of `extent` elements per rank (a row kernel:
  rows x cols), by its C type's size; a reduce-scatter load (`Load.peers`) reads P slices, the
  P - 1 remote ones over the link; a gathering store (`Store.peers`) writes P - 1 remote copies
  over the link; a push (push mode) stores P - 1 slices into the peers' staging buffers.
  Scalars (a hyperparameter, a norm) are one element each, an operand broadcast along rows
  (`rowvec`) one row, another broadcast operand (`gather`, a bias) its buffer once (it stays
  in cache); flops are not counted for generated kernels (the cost model reads them from the
  IR expressions, which the spec holds only as C text). Not counted yet: the whole-AllReduce
  phase at the head of a row kernel (`spec.RowAllReduce`: two-shot, one-shot, Lamport, design
  note 58) and its "lamport" loads;
- an NCCL call: the bytes it reads and writes on this rank, and its payload (the per-rank
  buffer that the algorithm moves; the algorithm's factor, 2 (P - 1) / P for a ring
  AllReduce, is the cost model's: `link_bytes` is the payload, not the wire bytes);
- a GEMM: 2 m k n flops, its operands read and its product written; a library reduction: its
  input read; a Send: the payload, read on the sender;
- composite steps (overlap, copy engines, chunked): the sum of their parts; copy engines' peer
  copies move their bytes over the link.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import sympy

from codegen import plan as cp
from codegen.spec import ComputedPush

# bytes of each element type, by the C type of kernel operands and the plan's dtype names
C_BYTES = {"float": 4, "__half": 2, "__nv_bfloat16": 2, "double": 8, "uint32_t": 4, "int": 4}
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "u32": 4, "i32": 4, "f64": 8}

ZERO = sympy.Integer(0)


@dataclass(frozen=True)
class StepWork:
    """One step's work on one rank (sympy expressions of the sizes)."""

    read_bytes: sympy.Expr = ZERO  # this rank's HBM reads
    write_bytes: sympy.Expr = ZERO  # this rank's HBM writes
    link_bytes: sympy.Expr = ZERO  # bytes this rank moves to or from other GPUs (payload)
    flops: sympy.Expr = ZERO

    def __add__(self, other: StepWork) -> StepWork:
        return StepWork(*(getattr(self, f.name) + getattr(other, f.name)
                          for f in dataclasses.fields(self)))


def plan_work(plan: cp.Plan) -> list[tuple[object, tuple[str, ...], StepWork]]:
    """(step, the groups that run it, its work) for every step of the plan, in order."""
    groups = plan.step_groups or ((0,),) * len(plan.steps)
    numel = {b.name: b.numel for b in plan.buffers}
    return [(s, tuple(plan.groups[g] for g in gs), step_work(s, plan.P, numel))
            for s, gs in zip(plan.steps, groups)]


def step_work(step, P: int, numel: dict | None = None) -> StepWork:
    """The work of one plan step on one rank of a group of P (WORK_RULES by its class);
    `numel`: the plan's buffers' elements by name (a broadcast operand reads its buffer)."""
    rule = WORK_RULES.get(type(step))
    if rule is None:
        raise TypeError(f"every plan step class must have a work rule, got "
                        f"{type(step).__name__}; add one to codegen.work.WORK_RULES")
    return rule(step, P, numel or {})


def _kernel(step: cp.KernelStep, P: int, numel: dict) -> StepWork:
    spec = step.spec
    n = sympy.sympify(step.extent)
    if spec.row is not None:  # extent counts rows: each load and store covers rows x cols
        n = n * sympy.sympify(step.cols)
        loads = {ld.var: ld for p in spec.row.passes for ld in p.loads}.values()
        stores = [st for p in spec.row.passes for st in p.stores]
    else:
        loads, stores = spec.loads, spec.stores
    work = StepWork()
    computed = [p for p in spec.pushes if isinstance(p, ComputedPush)]
    for ld in (*loads, *spec.scalars):
        size = n * C_BYTES.get(ld.c_type, 4)
        if ld.mode == "scalar":  # one element (a hyperparameter, a norm), read once
            work += StepWork(read_bytes=sympy.Integer(C_BYTES.get(ld.c_type, 4)))
        elif ld.mode == "rowvec":  # one row's worth (a norm's weight), read once from HBM
            work += StepWork(read_bytes=sympy.sympify(step.cols) * C_BYTES.get(ld.c_type, 4))
        elif ld.mode == "gather":  # a broadcast operand (a bias): its buffer, read once
            ref = next((p.ref for p in spec.params if p.name == ld.ptr), "")
            if ref in numel:
                work += StepWork(read_bytes=numel[ref] * C_BYTES.get(ld.c_type, 4))
        elif ld.mode == "reduce" and computed:  # the P parts of the local staging buffer
            work += StepWork(read_bytes=P * size)
        elif ld.mode == "reduce":  # every rank's slice, P - 1 of them remote
            work += StepWork(read_bytes=P * size, link_bytes=(P - 1) * size)
        elif ld.mode == "exchange":  # an AllToAll by peer loads: P - 1 of P blocks remote
            work += StepWork(read_bytes=size, link_bytes=(P - 1) * size / P)
        elif ld.mode == "contig":
            work += StepWork(read_bytes=size)
    for st in stores:
        size = n * C_BYTES.get(st.c_type, 4)
        if st.block:  # an AllToAll by peer stores: P - 1 of P blocks remote
            work += StepWork(write_bytes=size, link_bytes=(P - 1) * size / P)
            continue
        remote = (len(st.peers) - 1) if st.peers else 0
        own = 0 if st.skip_self else 1
        work += StepWork(write_bytes=(own + remote) * size, link_bytes=remote * size)
    for push in computed:  # computation before the reduce-scatter (design note 78)
        work += _computed_push(push, n, P)
    for push in spec.pushes:  # phase one of push mode: P - 1 slices into the peers' staging
        if push in computed:
            continue
        size = n * C_BYTES.get(push.c_type, 4)
        work += StepWork(read_bytes=(P - 1) * size, write_bytes=(P - 1) * size,
                         link_bytes=(P - 1) * size)
    return work


def _computed_push(push: ComputedPush, n, P: int) -> StepWork:
    """Phase one of a FusedReduceScatter with computation before it: this rank's whole
    contribution (P slices of n) computed from its loads, the values kept in memory stored,
    and each slice stored into its owner's staging buffer (P - 1 of them remote)."""
    whole = P * n
    read = sum((whole * C_BYTES.get(ld.c_type, 4) for ld in push.loads), sympy.Integer(0))
    kept = sum((whole * C_BYTES.get(st.c_type, 4) for st in push.stores), sympy.Integer(0))
    pushed = n * C_BYTES.get(push.c_type, 4)
    return StepWork(read_bytes=read, write_bytes=kept + P * pushed, link_bytes=(P - 1) * pushed)


def _nccl(step: cp.NcclStep, P: int, numel: dict) -> StepWork:
    part = sympy.sympify(step.count) * DTYPE_BYTES[step.dtype]
    whole = P * part  # the side of reduce_scatter / all_gather that holds every rank's part
    read, write, payload = {
        "all_reduce": (part, part, part),
        "reduce_scatter": (whole, part, whole),
        "all_gather": (part, whole, whole),
    }.get(step.op, (part, part, part))  # broadcast, reduce: one buffer
    return StepWork(read, write, payload)


def _gemm(step: cp.GemmStep, P: int, numel: dict) -> StepWork:
    m, k, n = (sympy.sympify(x) for x in (step.m, step.k, step.n))
    size = DTYPE_BYTES[step.dtype]
    bias = n * size if step.bias is not None else 0
    return StepWork((m * k + k * n) * size + bias, m * n * size, ZERO, 2 * m * k * n)


def _reduce(step: cp.ReduceStep, P: int, numel: dict) -> StepWork:
    count = sympy.sympify(step.count)
    return StepWork(count * DTYPE_BYTES[step.dtype], sympy.Integer(4), ZERO, count)


def _send(step: cp.SendStep, P: int, numel: dict) -> StepWork:
    part = sympy.sympify(step.count) * DTYPE_BYTES[step.dtype]
    return StepWork(read_bytes=part, link_bytes=part)


def _overlap(step: cp.OverlapStep, P: int, numel: dict) -> StepWork:
    return step_work(step.producer, P, numel) + step_work(step.consumer, P, numel)


def _copy_engines(step: cp.CopyEngineStep, P: int, numel: dict) -> StepWork:
    work = step_work(step.kernel, P, numel)
    for c in step.copies:  # every peer's piece, through the copy engines
        size = (P - 1) * sympy.sympify(c.numel) * DTYPE_BYTES[c.dtype]
        work += StepWork(read_bytes=size, write_bytes=size, link_bytes=size)
    return work


def _chunked(step: cp.ChunkedStep, P: int, numel: dict) -> StepWork:
    total = StepWork()
    for s in step.steps:
        total += step_work(s, P, numel)
    return total


def _pipeline(step: cp.PipelineStep, P: int, numel: dict) -> StepWork:
    """A pipelined hierarchy: its legs' work (each leg's chunks add up to the leg)."""
    total = StepWork()
    for leg in step.legs:
        total += step_work(leg, P, numel)
    return total


WORK_RULES = {
    cp.KernelStep: _kernel,
    cp.NcclStep: _nccl,
    cp.GemmStep: _gemm,
    cp.ReduceStep: _reduce,
    cp.SendStep: _send,
    cp.OverlapStep: _overlap,
    cp.CopyEngineStep: _copy_engines,
    cp.ChunkedStep: _chunked,
    cp.PipelineStep: _pipeline,
}
"""One work rule per plan step class, as LOWERING_RULES has one lowering per op class."""
