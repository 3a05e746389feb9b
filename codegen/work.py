"""What each plan step does, as the cost model would price it: a `StepWork` record per step
(this rank's HBM bytes read and written, bytes it moves over links, flops, and the groups that
run it), read from the plan alone: the buffers, counts and kernel specs lowering made.

This is the first part of pricing plan steps instead of IR statements (issue 22's "one plan,
four readers"; decision 104 says what changed since). Sizes stay expressions, as the
plan's. What a record counts:

- a generated kernel: each vector load and store of `extent` elements per rank (a row kernel:
  rows x cols), by its C type's size; a reduce-scatter load (`Load.peers`) reads P slices, the
  P - 1 remote ones over the link; a gathering store (`Store.peers`) writes P - 1 remote copies
  over the link; a push (push mode) stores P - 1 slices into the peers' staging buffers.
  Scalars (a hyperparameter, a norm) are one element each, an operand broadcast along rows
  (`rowvec`) one row, another broadcast operand (`gather`, a bias) its buffer once (it stays
  in cache); its flops and dropout masks are the step's own fields (KernelStep.flops,
  counted once by lowering from its statements: `kernel_math`). The whole AllReduce at the
  head of a row kernel (`spec.RowAllReduce`: two-shot, pipelined, one-shot, Lamport, design
  note 58) by its algorithm (`_row_allreduce`);
- a fused Send: its stores into the next stage's buffer move over the link and land in that
  GPU's HBM (not counted here); its receiver's wait kernel does no work;
- an NCCL call: the bytes it reads and writes on this rank, and its payload (the per-rank
  buffer that the algorithm moves; the algorithm's factor, 2 (P - 1) / P for a ring
  AllReduce, is the cost model's: `link_bytes` is the payload, not the wire bytes);
- a GEMM: 2 m k n flops, its operands read and its product written; a library reduction: its
  input read; a Send: the payload, read on the sender;
- composite steps (overlap, copy engines, chunked): the sum of their parts (a kernel launched
  once per chunk, on one chunk's extent, counted `chunks` times: `per_chunk`); copy engines'
  peer copies move their bytes over the link.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import sympy

from codegen import plan as cp
from codegen.spec import ComputedPush
from workbench import ir

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
    # of read_bytes and write_bytes, those of 2-byte elements (f16, bf16), which the GPU
    # streams at its own measured rates (cost_model.specs.GPU.hbm_time_s)
    f16_read_bytes: sympy.Expr = ZERO
    f16_write_bytes: sympy.Expr = ZERO

    def __add__(self, other: StepWork) -> StepWork:
        return StepWork(*(getattr(self, f.name) + getattr(other, f.name)
                          for f in dataclasses.fields(self)))


def expr_flops(expr: ir.Expr) -> int:
    """Arithmetic operations per element of an elementwise expression."""
    match expr:
        case ir.Ref() | ir.Const() | ir.SizeValue():
            return 0
        case ir.Binary(_, a, b):
            return 1 + expr_flops(a) + expr_flops(b)
        case ir.Where(c, a, b):
            return 1 + expr_flops(c) + expr_flops(a) + expr_flops(b)
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
        case ir.Where(c, a, b):
            return expr_dropouts(c) + expr_dropouts(a) + expr_dropouts(b)
        case ir.Unary(_, a) | ir.Cast(_, a):
            return expr_dropouts(a)
    return 0


# Kernel kinds that only synchronize (no statement's arithmetic): no flops of their own.
SYNC_KINDS = ("barrier", "finish", "wait")


def kernel_math(leaves, local_numel, iteration_numel) -> tuple[sympy.Expr, sympy.Expr, str]:
    """(flops, dropout masks, the flops' dtype) of one launch of a kernel computing the leaf
    statements `leaves` on one rank: an elementwise statement's or axis reduction's
    expression per element it iterates over (`iteration_numel(stmt)`; an axis reduction also
    combines each element into its row), 2 flops an element of a norm's or reduction's input
    (`local_numel(name)`), k comparisons an element of a top-k's input; the dtype of the last
    streaming statement's result (f32 if none). What lowering stores on the KernelStep (sizes
    unbound), as the IR-level `cost_model.ops.elementwise_work` counts a statement."""
    flops, dropouts, dtype = ZERO, ZERO, "f32"
    for s in leaves:
        if isinstance(s.op, (ir.Compute, ir.Update, ir.ReduceAxis)):
            elements = iteration_numel(s)
            combine = 1 if isinstance(s.op, ir.ReduceAxis) else 0
            flops += (expr_flops(s.op.expr) + combine) * elements
            dropouts += expr_dropouts(s.op.expr) * elements
            dtype = s.out.type.dtype.name
    for s in leaves:
        if isinstance(s.op, (ir.Norm, ir.ReduceTensor)):
            flops += 2 * local_numel(s.op.x)
        if isinstance(s.op, ir.TopK):  # k comparisons an input element (decision 106)
            flops += s.op.k * local_numel(s.op.x)
    return flops, dropouts, dtype


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


def _io(c_type: str, read=ZERO, write=ZERO, link=ZERO) -> StepWork:
    """Reads, writes and link bytes of elements of C type `c_type` (2-byte ones also counted
    as such)."""
    half = C_BYTES.get(c_type, 4) == 2
    return StepWork(read, write, link, ZERO, read if half else ZERO, write if half else ZERO)


def _kernel_io(step: cp.KernelStep):
    """(elements each vector load and store covers, the loads, the stores) of a kernel step."""
    spec = step.spec
    n = sympy.sympify(step.extent)
    if spec.row is not None:  # extent counts rows: each load and store covers rows x cols
        n = n * sympy.sympify(step.cols)
        loads = {ld.var: ld for p in spec.row.passes for ld in p.loads}.values()
        stores = [st for p in spec.row.passes for st in p.stores]
        return n, tuple(loads), tuple(stores)
    return n, spec.loads, spec.stores


def is_rooted(spec) -> bool:
    """Whether a fused collective kernel computes on its root only (a fused Reduce or
    Broadcast: codegen.lower_collective gives the other ranks an extent of 0, so their blocks
    only serve or receive)."""
    return spec.extent.startswith("(rank == ")


def peer_bytes(step: cp.KernelStep, P: int) -> tuple[sympy.Expr, sympy.Expr]:
    """(bytes of the whole buffers a fused collective kernel reduce-scatters by peer loads,
    or by pushes in push mode; bytes of those it gathers by peer stores), P slices of each:
    what the cost model's peer-access formulas take (cost_model.ops.fused.FusedParts)."""
    n, loads, stores = _kernel_io(step)
    pushes = step.spec.pushes
    rs = sum((P * n * C_BYTES.get(x.c_type, 4) for x in pushes or
              [ld for ld in loads if ld.mode == "reduce"]), ZERO)
    # an AllToAll by peer loads or by stores into its blocks' owners (design note 79): one
    # local tensor's worth, (P - 1) / P of it remote, as the cost model's fused AllToAll
    rs += sum((n * C_BYTES.get(ld.c_type, 4) for ld in loads if ld.mode == "exchange"), ZERO)
    ag = sum(((1 if st.block else len(st.peers)) * n * C_BYTES.get(st.c_type, 4)
              for st in stores if st.peers), ZERO)
    ar = step.spec.allreduce
    if ar is not None and ar.algorithm != "one-shot":  # one-shot's loads are "reduce" loads
        whole = n * C_BYTES.get(ar.c_type, 4)  # every row, on every rank
        if ar.algorithm in ("two-shot", "pipelined"):  # a reduce-scatter and an all-gather
            rs, ag = rs + whole, ag + whole
        else:  # Lamport: my rows stored into every rank's receive buffer
            ag += P * whole
    return rs, ag


def _row_allreduce(ar, n, P: int) -> StepWork:
    """The whole AllReduce at the head of a row kernel beyond its passes' loads (design note
    58): two-shot reduces this rank's 1/P of the rows from every rank's input (its own input
    served to the P ranks, once in total) and stores the sums into every rank's buffer (the
    P - 1 peers' stores land in mine); Lamport stores my rows into every rank's receive
    buffer (P parts land in mine, which I spin-read and re-poison for two launches ahead);
    one-shot's peer loads are the passes' "reduce" load. Pipelined moves two-shot's bytes."""
    phase = _row_allreduce_moves(ar, n, P)
    if ar.algorithm == "lamport":  # the spin-reads and re-poisoning, after phase one
        whole = n * C_BYTES.get(ar.c_type, 4)
        return phase + _io(ar.c_type, read=P * whole, write=P * whole)
    return phase if phase is not None else StepWork()


def _row_allreduce_phase_one(ar, n, P: int) -> StepWork | None:
    """Phase one of a row kernel's whole AllReduce when the passes wait for it (design note
    97): two-shot's reduce-scatter and peer stores before its barrier (my input served once,
    the summed rows landing in my buffer), Lamport's stores before the spin-reads (my input
    read, P parts landing in my receive buffer), with the bytes they move over the links;
    None for one-shot, whose passes reduce as they load, and for pipelined, whose passes
    compute each row group beside the moves of the next (the whole kernel overlaps its link
    traffic, design note 108)."""
    if ar.algorithm == "pipelined":
        return None
    return _row_allreduce_moves(ar, n, P)


def _row_allreduce_moves(ar, n, P: int) -> StepWork | None:
    """The phase one of a row kernel's whole AllReduce (two-shot's and pipelined's reduce-scatter
    and peer stores, Lamport's stores), None for one-shot: its HBM bytes and link bytes."""
    whole = n * C_BYTES.get(ar.c_type, 4)
    if ar.algorithm in ("two-shot", "pipelined"):
        return _io(ar.c_type, read=whole, write=whole, link=2 * (P - 1) * whole / P)
    if ar.algorithm == "lamport":
        return _io(ar.c_type, read=whole, write=P * whole, link=(P - 1) * whole)
    return None


def link_phase_work(step, P: int) -> StepWork | None:
    """The work of a kernel step's phase that its link traffic overlaps, when the rest of the
    kernel waits for it (a row kernel's two-shot or Lamport AllReduce: design note 97), or
    None when the whole kernel overlaps its link traffic."""
    if not isinstance(step, cp.KernelStep) or step.spec.allreduce is None:
        return None
    n, _, _ = _kernel_io(step)
    return _row_allreduce_phase_one(step.spec.allreduce, n, P)


def _remote(spec) -> set:
    """Parameters of a kernel that point into another stage's buffer (a fused Send's)."""
    return {p.name for p in spec.params if p.kind == "remote"}


def send_bytes(step: cp.KernelStep) -> sympy.Expr:
    """Bytes a fused Send kernel stores into the next stage's buffer (its payload)."""
    n, _, stores = _kernel_io(step)
    remote = _remote(step.spec)
    return sum((n * C_BYTES.get(st.c_type, 4) for st in stores if st.ptr in remote), ZERO)


def _index_kernel(step: cp.KernelStep) -> StepWork:
    """A gather or top-k kernel (spec.IndexPlan): it walks `extent` elements, rows x cols.
    A gather reads each row's id and (at most) the table row it names, and writes every
    element; a top-k reads every element and writes k a row."""
    plan = step.spec.index
    n = sympy.sympify(step.extent)
    rows = n / sympy.sympify(step.cols)
    if plan.op == "gather":
        return (_io("int", read=rows * C_BYTES["int"])
                + _io(plan.src_type, read=n * C_BYTES.get(plan.src_type, 4))
                + _io(plan.dst_type, write=n * C_BYTES.get(plan.dst_type, 4)))
    return (_io(plan.src_type, read=n * C_BYTES.get(plan.src_type, 4))
            + _io(plan.dst_type, write=rows * plan.k * C_BYTES.get(plan.dst_type, 4)))


def _kernel(step: cp.KernelStep, P: int, numel: dict) -> StepWork:
    spec = step.spec
    if spec.index is not None:
        return _index_kernel(step)
    n, loads, stores = _kernel_io(step)
    remote_ptrs = _remote(spec)
    rooted = is_rooted(spec)
    work = StepWork()
    computed = [p for p in spec.pushes if isinstance(p, ComputedPush)]
    for ld in (*loads, *spec.scalars):
        b = C_BYTES.get(ld.c_type, 4)
        size = n * b
        if ld.mode == "scalar":  # one element (a hyperparameter, a norm), read once
            work += _io(ld.c_type, read=sympy.Integer(b))
        elif ld.mode == "rowvec":  # one row's worth (a norm's weight), read once from HBM
            work += _io(ld.c_type, read=sympy.sympify(step.cols) * b)
        elif ld.mode == "gather":  # a broadcast operand (a bias): its buffer, read once
            ref = next((p.ref for p in spec.params if p.name == ld.ptr), "")
            if ref in numel:
                work += _io(ld.c_type, read=numel[ref] * b)
        elif ld.mode == "reduce" and computed:  # the P parts of the local staging buffer
            work += _io(ld.c_type, read=P * size)
        elif ld.mode == "exchange":  # an AllToAll by peer loads: P - 1 of P blocks remote
            work += _io(ld.c_type, read=size, link=(P - 1) * size / P)
        elif ld.mode == "reduce":  # every rank's slice, P - 1 of them remote
            # symmetric (a reduce-scatter): this HBM serves its slice to each of P ranks;
            # rooted (a Reduce): the root's HBM serves its own input, the peers' theirs
            read = size if rooted else P * size
            work += _io(ld.c_type, read=read, link=(P - 1) * size)
        elif ld.mode == "contig":
            work += _io(ld.c_type, read=size)
    for st in stores:
        size = n * C_BYTES.get(st.c_type, 4)
        if st.ptr in remote_ptrs:  # a fused Send's store: over the link, into the next stage
            work += _io(st.c_type, link=size)
            continue
        if st.block:  # an AllToAll by peer stores: P - 1 of P blocks remote
            work += _io(st.c_type, write=size, link=(P - 1) * size / P)
            continue
        remote = (len(st.peers) - 1) if st.peers else 0
        own = 0 if st.skip_self else 1
        # a rooted store (a Broadcast's) lands in every rank's HBM once, the root's included
        mine = own if rooted else own + remote
        work += _io(st.c_type, write=mine * size, link=remote * size)
    if spec.allreduce is not None:
        work += _row_allreduce(spec.allreduce, n, P)
    if spec.row is not None:  # a row's reduction stored for later: one value per row
        for red in (r for p in spec.row.passes for r in p.reductions if r.ptr):
            work += _io(red.c_type, write=sympy.sympify(step.extent) * C_BYTES.get(red.c_type, 4))
    work += StepWork(flops=sympy.sympify(step.flops))
    for push in computed:  # computation before the reduce-scatter (design note 78)
        work += _computed_push(push, n, P)
    for push in spec.pushes:  # phase one of push mode: P - 1 slices into the peers' staging
        if push in computed:
            continue
        size = n * C_BYTES.get(push.c_type, 4)
        work += _io(push.c_type, read=(P - 1) * size, write=(P - 1) * size,
                    link=(P - 1) * size)
    return work


def _computed_push(push: ComputedPush, n, P: int) -> StepWork:
    """Phase one of a FusedReduceScatter with computation before it: this rank's whole
    contribution (P slices of n) computed from its loads, the values kept in memory stored,
    and each slice stored into its owner's staging buffer (P - 1 of them remote)."""
    work = StepWork()
    for ld in push.loads:
        work += _io(ld.c_type, read=P * n * C_BYTES.get(ld.c_type, 4))
    for st in push.stores:
        work += _io(st.c_type, write=P * n * C_BYTES.get(st.c_type, 4))
    pushed = n * C_BYTES.get(push.c_type, 4)
    return work + _io(push.c_type, write=P * pushed, link=(P - 1) * pushed)


def _nccl(step: cp.NcclStep, P: int, numel: dict) -> StepWork:
    part = sympy.sympify(step.count) * DTYPE_BYTES[step.dtype]
    # the side of reduce_scatter / all_gather that holds every rank's part is P parts
    c = step.collective
    read, write = c.counts(part, P)
    payload = write if c.whole_dst else read  # a reduce-scatter's or gather's whole buffer
    half = DTYPE_BYTES[step.dtype] == 2
    return StepWork(read, write, payload, ZERO, read if half else ZERO, write if half else ZERO)


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


def per_chunk(step) -> bool:
    """Whether a part of an overlap or a chunked step is launched once per chunk, on one
    chunk's extent (a generated kernel taking the `chunk` parameter); NCCL calls and GEMMs
    hold the whole count and the runtime cuts them."""
    return isinstance(step, cp.KernelStep) and any(p.kind == "chunk" for p in step.spec.params)


def _part(step, chunks: int, P: int, numel: dict) -> StepWork:
    """The work of one part of a chunked step over all its chunks."""
    w = step_work(step, P, numel)
    if not per_chunk(step):
        return w
    return StepWork(*(chunks * getattr(w, f.name) for f in dataclasses.fields(w)))


def _overlap(step: cp.OverlapStep, P: int, numel: dict) -> StepWork:
    return (_part(step.producer, step.chunks, P, numel)
            + _part(step.consumer, step.chunks, P, numel))


def _copy_engines(step: cp.CopyEngineStep, P: int, numel: dict) -> StepWork:
    work = step_work(step.kernel, P, numel)
    for c in step.copies:  # every peer's piece, through the copy engines
        size = (P - 1) * sympy.sympify(c.numel) * DTYPE_BYTES[c.dtype]
        work += StepWork(read_bytes=size, write_bytes=size, link_bytes=size)
    return work


def _chunked(step: cp.ChunkedStep, P: int, numel: dict) -> StepWork:
    total = StepWork()
    for s in step.steps:
        total += _part(s, step.chunks, P, numel)
    return total


def _pipeline(step: cp.PipelineStep, P: int, numel: dict) -> StepWork:
    """A pipelined hierarchy: its legs' work (each leg's chunks add up to the leg)."""
    total = StepWork()
    for leg in step.legs:
        total += step_work(leg, P, numel)
    return total


def _ring_fused(step: cp.RingFusedStep, P: int, numel: dict) -> StepWork:
    """A ring-fused collective: its peers-form kernel's work (the ring's wire bytes are NCCL's
    plan's, cost_model.ops.network_fused)."""
    return step_work(step.kernel, P, numel)


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
    cp.RingFusedStep: _ring_fused,
}
"""One work rule per plan step class, as LOWERING_RULES has one lowering per op class."""
