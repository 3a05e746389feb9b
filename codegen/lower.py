"""Lower a (scheduled) program to a Plan: device buffers, where each value lives, and the steps
that compute it (generated kernels and NCCL collectives), for a group of P ranks.

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

import re
from dataclasses import dataclass, field, replace

import numpy as np
import sympy

from codegen.cprinter import c_index
from codegen.spec import THREADS, Assign, KernelSpec, Load, NormAcc, Param, Push, Store, mangle
from workbench import ir
from workbench.errors import RuntimeFault
from workbench.types import LocalLayout, ReplicatedLayout, Sliced, TensorType

RANK = sympy.Symbol("rank", integer=True, nonnegative=True)
ELEM = sympy.Symbol("e", integer=True, nonnegative=True)
# Chunk index of an overlapped consumer kernel (a kernel parameter, one launch per chunk).
CHUNK = sympy.Symbol("chunk", integer=True, nonnegative=True)
# The other rank of a copy-engine copy (PeerCopy offsets).
PEER = sympy.Symbol("peer", integer=True, nonnegative=True)


@dataclass(frozen=True)
class BufferSpec:
    """A device buffer on every rank of group `group`: `numel` elements of `dtype` (sympy,
    sizes unbound); `peer` buffers are mapped into other ranks (CUDA IPC): the ranks of the
    same group for fused collectives, the same local rank of the next or previous stage for a
    fused Send."""

    name: str
    dtype: str
    numel: sympy.Expr
    peer: bool = False
    holds_input: str = ""
    group: int = 0  # the stage whose ranks hold it (pipelines)


@dataclass(frozen=True)
class Loc:
    """Where a value lives on a rank: `numel` elements at `offset` of `buffer`. `whole_offset`
    is set when the value is this rank's slice of a whole tensor held in the same buffer."""

    buffer: str
    offset: sympy.Expr
    numel: sympy.Expr
    whole_offset: sympy.Expr | None = None


@dataclass(frozen=True)
class KernelStep:
    """Launch one generated kernel; `flags` names its barrier-flag buffer (collectives)."""

    spec: KernelSpec
    stmts: tuple[str, ...]
    flags: str = ""
    extent: sympy.Expr = sympy.Integer(0)  # elements per rank (sizes unbound)


@dataclass(frozen=True)
class NcclStep:
    """One NCCL collective on buffers: count is elements per rank (send count for all_gather,
    receive count for reduce_scatter)."""

    op: str
    reduce: str
    src: Loc
    dst: Loc
    count: sympy.Expr
    dtype: str
    stmt: str
    root: int = 0


@dataclass(frozen=True)
class GemmStep:
    """c = a @ b on this rank's local blocks, row-major: a is m x k, b is k x n, c is m x n
    (cuBLAS through a maintained library; the runtime picks it). All sizes unbound."""

    a: Loc
    b: Loc
    c: Loc
    m: sympy.Expr
    k: sympy.Expr
    n: sympy.Expr
    dtype: str
    stmt: str


@dataclass(frozen=True)
class SendStep:
    """An unfused Send through NCCL point-to-point: rank r of stage `src_group` sends `count`
    elements at `src` to rank r of stage `dst_group`, which receives them at `dst`."""

    src: Loc
    dst: Loc
    count: sympy.Expr
    dtype: str
    stmt: str
    src_group: int
    dst_group: int


@dataclass(frozen=True)
class OverlapStep:
    """CoCoNet's overlap: the producer and the consumer run as `chunks` pieces along the rows
    of the producer's output, on two streams: consumer chunk i waits for producer chunk i
    only, so chunk i's communication runs beside chunk i+1's computation.

    The producer is a GemmStep (a MatMul, chunked by rows) or an NcclStep (one NCCL call per
    chunk of count / chunks). The consumer is a fused collective or fused Send KernelStep whose
    spec takes a `chunk` parameter (launched once per chunk), or an NcclStep."""

    chunks: int
    producer: GemmStep | NcclStep
    consumer: KernelStep | NcclStep
    stmt: str
    rows: sympy.Expr = sympy.Integer(0)  # NCCL producer: rows of the chunked tensor
    per: int = 1  # ... which must divide into this many equal parts (check_chunk_rows)


@dataclass(frozen=True)
class PeerCopy:
    """Copy-engine copies between this rank and every other rank k of its stage, of `numel`
    elements of `dtype`, cut into the pieces of a CopyEngineStep. A pull copies rank k's
    `src` region into this rank's `dst` region; a push copies this rank's `src` region into
    rank k's `dst` region. Offsets are element offsets, expressions of RANK (this rank) and
    PEER (rank k), with sizes unbound."""

    src: str
    src_offset: sympy.Expr
    dst: str
    dst_offset: sympy.Expr
    numel: sympy.Expr
    dtype: str
    pull: bool


@dataclass(frozen=True)
class CopyEngineStep:
    """A fused collective whose bytes copy engines move (ir.Fused.engine == "copy"): a
    barrier kernel (every rank's inputs are complete), then piece by piece on three streams
    the pulls of piece i, the kernel on window i of this rank's slice once they are done, the
    pushes of its results once it is done; then a barrier kernel after every push (every
    peer's pushes into this rank have landed). The SMs move no data over NVLink."""

    start: KernelStep
    kernel: KernelStep
    end: KernelStep
    copies: tuple[PeerCopy, ...]
    chunks: int
    stmts: tuple[str, ...]


@dataclass(frozen=True)
class ChunkedStep:
    """`steps` run chunk by chunk on one stream: chunk 0 of each step in order, then chunk 1,
    and so on. Kernel steps take the chunk as their `chunk` parameter; an NcclStep runs on its
    count / chunks part of chunk i. A pipeline's stages overlap this way: stage 0 sends chunk
    i+1 while stage 1 gathers chunk i (each waits only for its own chunk's flag)."""

    chunks: int
    steps: tuple
    stmt: str
    rows: sympy.Expr = sympy.Integer(0)  # rows of the chunked tensor (sizes unbound) ...
    per: int = 1  # ... which must divide into this many equal parts (check_chunk_rows)


@dataclass(frozen=True)
class Plan:
    """A program lowered for groups of P ranks: buffers, value locations, and steps in order.

    `groups` names the stages in order (one name for a program of one group); step k runs on
    the ranks of the groups in `step_groups[k]` (a Send on both of its stages)."""

    program: ir.Program
    P: int
    buffers: tuple[BufferSpec, ...]
    locs: dict = field(hash=False, compare=False)
    steps: tuple = ()
    groups: tuple[str, ...] = ("world",)
    step_groups: tuple[tuple[int, ...], ...] = ()

    @property
    def world(self) -> int:
        """Ranks of the whole program: P per stage."""
        return self.P * len(self.groups)

    def steps_of(self, group: int) -> tuple:
        """The steps that the ranks of stage `group` run, in order."""
        groups = self.step_groups or ((0,),) * len(self.steps)
        return tuple(s for s, g in zip(self.steps, groups) if group in g)

    def kernels(self) -> tuple[KernelSpec, ...]:
        flat = []
        for s in self.steps:
            if isinstance(s, OverlapStep):
                flat.append(s.consumer)
            elif isinstance(s, CopyEngineStep):
                flat += [s.start, s.kernel]
            elif isinstance(s, ChunkedStep):
                flat += s.steps
            else:
                flat.append(s)
        return tuple(s.spec for s in flat if isinstance(s, KernelStep))


def stage_order(program: ir.Program) -> tuple:
    """The program's groups in pipeline order: every Send goes from a stage to the next one.
    A program of one group gives that group."""
    groups = list(program.groups())
    types = {v.name: v.type for v in program.all_values()}
    nxt = {}
    for leaf in program.leaves():
        for v in leaf.outs:
            types[v.name] = v.type
        if isinstance(leaf.op, ir.Send):
            nxt[types[leaf.op.x].group] = leaf.op.dst
    firsts = [g for g in groups if g not in nxt.values()]
    if len(groups) > 1 and len(firsts) != 1:
        raise _fault(f"a pipeline's stages must form one chain of Sends, got groups "
                     f"{', '.join(g.name for g in groups)} with Sends "
                     f"{', '.join(f'{a.name}->{b.name}' for a, b in nxt.items()) or 'none'}; "
                     "Send each stage's result to the next one")
    order = [firsts[0]] if firsts else groups[:1]
    while order[-1] in nxt and nxt[order[-1]] not in order:
        order.append(nxt[order[-1]])
    if len(order) != len(groups):
        raise _fault(f"a pipeline's stages must form one chain of Sends, got the chain "
                     f"{' -> '.join(g.name for g in order)} missing "
                     f"{', '.join(g.name for g in groups if g not in order)}")
    return tuple(order)


# Max blocks of a fused collective: its flag buffer holds [2][MAX_BLOCKS][P] u32.
MAX_BLOCKS = 1024

_C_TYPES = {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16"}
# Element types of buffers no program value has: f64 partial sums of squares, u32 flags.
_BUF_C_TYPES = {**_C_TYPES, "f64": "double", "u32": "uint32_t"}
_REDUCE = {ir.ReduceOp.Sum: "add", ir.ReduceOp.Max: "max", ir.ReduceOp.Min: "min",
           ir.ReduceOp.Prod: "mul"}


def _ident(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _fault(what: str) -> RuntimeFault:
    return RuntimeFault(what)


def _numel(shape) -> sympy.Expr:
    return sympy.Mul(*shape) if shape else sympy.Integer(1)


def _c_type(t: TensorType) -> str:
    if t.dtype.name not in _C_TYPES:
        raise _fault(f"codegen element type must be one of {sorted(_C_TYPES)}, got {t.dtype}")
    return _C_TYPES[t.dtype.name]


def _costly(e: ir.Expr) -> bool:
    """Whether computing `e` takes more than a register or a literal: worth hoisting."""
    return any(isinstance(x, (ir.Unary, ir.Binary)) for x in ir.expr_nodes(e))


def _float_literal(x: float) -> str:
    # The decimal repr of the f32 value: the compiler's rounding then gives exactly that f32,
    # which is what the interpreter's np.float32(v) holds.
    return repr(float(np.float32(x))) + "f"


# ---------------------------------------------------------------- storage


class _Planner:
    def __init__(self, program: ir.Program, P: int):
        self.program = program
        self.P = P
        self.psub = {g.size: P for g in program.groups()}
        self.stages = stage_order(program)
        self.stage_of = {g: i for i, g in enumerate(self.stages)}
        self.group = 0  # stage of the statement being lowered (its extra buffers live there)
        self.types: dict[str, TensorType] = {v.name: v.type for v in program.all_values()}
        for s in program.leaves():
            for v in s.outs:
                self.types[v.name] = v.type
        self.buffers: dict[str, BufferSpec] = {}
        self.locs: dict[str, Loc] = {}
        self.kernel_of: dict[str, int] = {}
        self.uses: dict[str, set[int]] = {}
        # Values a fused region computes in one launch and reads in a later one (a norm sits
        # between them): they need memory although one statement computes and uses them.
        self.spill: set[str] = set()
        self._use_order: dict[str, list[int]] = {}

    def sub(self, expr) -> sympy.Expr:
        return sympy.sympify(expr).subs(self.psub)

    def local_numel(self, name: str) -> sympy.Expr:
        return self.sub(_numel(self.types[name].local_shape()))

    def new_buffer(self, name: str, numel, holds_input: str = "") -> Loc:
        bname = _ident(name)
        while bname in self.buffers:
            bname += "_"
        t = self.types[name]
        self.buffers[bname] = BufferSpec(bname, t.dtype.name, self.sub(numel),
                                         holds_input=holds_input, group=self.stage_of[t.group])
        return Loc(bname, sympy.Integer(0), self.sub(numel))

    def add_buffer(self, name: str, dtype: str, numel, peer: bool = False,
                   group: int | None = None) -> None:
        """A buffer no program value has (flags, partial sums, staging), in the stage of the
        statement being lowered unless `group` says another."""
        self.buffers[name] = BufferSpec(name, dtype, self.sub(numel), peer=peer,
                                        group=self.group if group is None else group)

    def mark_peer(self, buffer: str) -> None:
        self.buffers[buffer] = replace(self.buffers[buffer], peer=True)

    def stage(self, stmt: ir.Stmt) -> int:
        """The stage a statement runs in: that of the values its first leaf reads (a Send
        reads in its source stage), or of its first value when it reads none."""
        leaf = next(stmt.leaves())
        names = [n for n in leaf.op.operands() if n in self.types] or [leaf.outs[0].name]
        return self.stage_of[self.types[names[0]].group]

    def analyse_uses(self) -> None:
        for k, stmt in enumerate(self.program.stmts):
            for leaf in stmt.leaves():
                for v in leaf.outs:
                    self.kernel_of[v.name] = k
        order = 0
        for k, stmt in enumerate(self.program.stmts):
            for leaf in stmt.leaves():
                for name in leaf.op.operands():
                    self.uses.setdefault(name, set()).add(k)
                    self._use_order.setdefault(name, []).append(order)
                order += 1

    def needs_memory(self, name: str) -> bool:
        if name in self.spill or any(v.name == name for v in self.program.outputs):
            return True
        k = self.kernel_of.get(name)
        return any(u != k for u in self.uses.get(name, ()))

    def last_use(self, name: str, leaf_index: int) -> bool:
        """No statement after leaf `leaf_index` reads `name`, and it is no program output."""
        later = [o for o in self._use_order.get(name, []) if o > leaf_index]
        return not later and not any(v.name == name for v in self.program.outputs)

    def check_inplace(self, target: str, leaf_index: int, what: str) -> None:
        later = [o for o in self._use_order.get(target, []) if o > leaf_index]
        if later or any(v.name == target for v in self.program.outputs):
            raise _fault(f"{what}: an in-place Update must be the last use of its target "
                         f"'{target}', got later uses; Compute a new value instead")


# Vectors per thread per iteration in fused collectives (more NVLink loads in flight).
COLLECTIVE_UNROLL = 1


COLLECTIVE_MODES = ("pull", "push")


def lower(program: ir.Program, P: int, collective_unroll: int = COLLECTIVE_UNROLL,
          collective_mode: str = "pull") -> Plan:
    """Lower `program` for groups of P ranks (P per stage of a pipeline, whose ranks are
    numbered stage-major); raises RuntimeFault for ops the GPU backend does not generate yet
    (the message names the op and the statement).

    collective_mode: how a fused collective reduce-scatters. pull: each rank loads its slice
    from every peer's buffer over NVLink. push: each rank stores every peer's slice into that
    peer's staging buffer, then reduces locally (all NVLink traffic is stores)."""
    if collective_mode not in COLLECTIVE_MODES:
        raise _fault(f"collective mode must be one of {COLLECTIVE_MODES}, got {collective_mode!r}")
    pl = _Planner(program, P)
    pl.analyse_uses()
    for v in program.inputs:
        pl.locs[v.name] = pl.new_buffer(v.name, pl.local_numel(v.name), holds_input=v.name)
    steps: list[tuple[object, tuple[int, ...]]] = []
    leaf_index = 0
    for stmt in program.stmts:
        leaves = list(stmt.leaves())
        first = leaf_index
        leaf_index += len(leaves)
        op = stmt.op
        what = f"statement {stmt.name} ({op})"
        pl.group = pl.stage(stmt)
        here = (pl.group,)
        if isinstance(op, ir.Overlapped):
            steps += _overlap_steps(pl, stmt, first, collective_unroll, collective_mode)
        elif isinstance(op, ir.MatMul):
            steps.append((_gemm_step(pl, stmt, what), here))
        elif isinstance(op, ir.Fused) and op.engine == "copy":
            steps.append((_copy_engine_step(pl, stmt, first), here))
        elif isinstance(op, ir.Fused) and op.kind in ("allreduce", "reducescatter", "allgather"):
            steps += [(s, here) for s in _fused_collective_steps(
                pl, stmt, first, collective_unroll, collective_mode)]
        elif isinstance(op, ir.Fused) and op.kind == "send":
            steps += _send_steps(pl, stmt, first, collective_unroll, collective_mode)
        elif isinstance(op, ir.Send):
            steps.append(_p2p_step(pl, stmt))
        elif isinstance(op, ir.Slice):
            pl.locs[stmt.out.name] = _slice_loc(pl, stmt, what)
        elif isinstance(op, ir.Norm):
            steps += [(s, here) for s in _norm_steps(pl, stmt, first)]
        elif isinstance(op, ir.Fused) and op.kind == "compute" or isinstance(
                op, ir.ELEMENTWISE_OPS):
            steps.append((_elementwise_kernel(pl, stmt, first), here))
        elif isinstance(op, (ir.AllReduce, ir.ReduceScatter, ir.AllGather, ir.Broadcast)):
            steps.append((_nccl_step(pl, stmt, first), here))
        else:
            raise _fault(f"the GPU backend must support every op of {program.name}, got {what}, "
                         "which it does not generate yet; measure a schedule without it")
    return Plan(program, P, tuple(pl.buffers.values()), dict(pl.locs),
                tuple(s for s, _ in steps), tuple(g.name for g in pl.stages),
                tuple(g for _, g in steps))


def _result_loc(pl: _Planner, leaf: ir.Stmt, index: int, what: str) -> Loc | None:
    """Location of a leaf's value (None: registers only)."""
    out = leaf.out
    op = leaf.op
    if isinstance(op, ir.Update):
        pl.check_inplace(op.target, index, what)
        tl = pl.locs.get(op.target)
        if tl is None:
            raise _fault(f"{what}: the target of an Update must live in memory, got "
                         f"'{op.target}' in registers")
        tt, rt = pl.types[op.target], out.type
        if tt.layout == rt.layout:
            return tl
        if (isinstance(rt.layout, Sliced) and rt.layout.dim == 0
                and isinstance(tt.layout, (ReplicatedLayout, LocalLayout))):
            s = pl.local_numel(out.name)
            return Loc(tl.buffer, tl.offset + RANK * s, s, whole_offset=tl.offset)
        raise _fault(f"{what}: an Update from {tt.layout} to {rt.layout} must slice dim 0, "
                     f"got {rt.layout}")
    if isinstance(op, ir.AllGather):
        src = pl.locs.get(op.x)
        if src is not None and src.whole_offset is not None:
            return Loc(src.buffer, src.whole_offset, pl.local_numel(out.name))
        return pl.new_buffer(out.name, pl.local_numel(out.name))
    if pl.needs_memory(out.name):
        return pl.new_buffer(out.name, pl.local_numel(out.name))
    return None


# ---------------------------------------------------------------- NCCL steps


def _gemm_step(pl: _Planner, stmt: ir.Stmt, what: str) -> GemmStep:
    """MatMul(a, b) on local blocks: [M, K] @ [K, N] -> a fresh [M, N] buffer (the MatMul's
    output always gets memory: cuBLAS writes it, whoever reads it)."""
    op, out = stmt.op, stmt.out
    ta, tb = pl.types[op.a], pl.types[op.b]
    la, lb = ta.local_shape(), tb.local_shape()
    if len(la) != 2 or len(lb) != 2:
        raise _fault(f"{what}: a MatMul on GPUs must multiply 2-D blocks, got local shapes "
                     f"{list(la)} @ {list(lb)}; flatten the leading dims into one")
    a, b = pl.locs.get(op.a), pl.locs.get(op.b)
    for name, loc in ((op.a, a), (op.b, b)):
        if loc is None:
            raise _fault(f"{what}: MatMul operands must live in memory, got '{name}' in "
                         "registers")
    dtype = out.type.dtype.name
    _c_type(out.type)
    c = pl.new_buffer(out.name, pl.local_numel(out.name))
    pl.locs[out.name] = c
    return GemmStep(a, b, c, pl.sub(la[0]), pl.sub(la[1]), pl.sub(lb[1]), dtype, out.name)


def _overlap_steps(pl: _Planner, stmt: ir.Stmt, first: int, unroll: int,
                   mode: str) -> list[tuple[object, tuple[int, ...]]]:
    """Overlapped(chunks){producer; consumer} as (step, stages) pairs:

    - MatMul; fused AllReduce or AllReduce of its output: one OverlapStep (chunks along the
      MatMul's output rows);
    - AllReduce (NCCL); FusedSend of what reads it: an OverlapStep in the source stage (NCCL
      chunk i, then the fused Send of chunk i) and the receiver's chunked flag wait;
    - FusedSend; AllGather (NCCL) of what it sent: the chunked fused kernel in the source
      stage, and in the destination stage, per chunk, the flag wait and the AllGather of the
      chunk (the stages overlap: chunk i is gathered while chunk i+1 is computed and sent)."""
    op: ir.Overlapped = stmt.op
    what = f"statement {stmt.name} ({op})"
    prod, cons = op.body
    n_prod = len(list(prod.leaves()))
    pop, cop = prod.op, cons.op
    cwhat = f"statement {cons.name} ({cop})"
    here = (pl.group,)
    if isinstance(pop, ir.MatMul):
        gemm = _gemm_step(pl, prod, f"statement {prod.name} ({pop})")
        if isinstance(cop, ir.Fused) and cop.kind == "allreduce":
            steps = _fused_collective_steps(pl, cons, first + n_prod, unroll, mode, op.chunks)
            if len(steps) != 1:
                raise _fault(f"{cwhat}: an overlapped fused collective must be one launch, got "
                             f"{len(steps)} (a norm splits it); overlap a schedule without "
                             "norms")
            consumer = steps[0]
        elif isinstance(cop, ir.AllReduce) and cop.x == prod.out.name:
            consumer = _nccl_step(pl, cons, first + n_prod)
        else:
            raise _fault(f"{what}: the GPU backend overlaps a MatMul with a fused AllReduce or "
                         f"an AllReduce of its output, got {cop}; measure a schedule without "
                         "it")
        return [(OverlapStep(op.chunks, gemm, consumer, stmt.name), here)]
    if (isinstance(pop, ir.AllReduce) and isinstance(cop, ir.Fused) and cop.kind == "send"):
        nccl = _nccl_step(pl, prod, first)
        sent = _send_steps(pl, cons, first + n_prod, unroll, mode, op.chunks)
        (sender, src), (waiter, dst) = sent
        rows, per = _chunk_rows(pl, next(cons.leaves()).out.type, op.chunks)
        return [(OverlapStep(op.chunks, nccl, sender.steps[0], stmt.name, rows, per), src),
                (waiter, dst)]
    if (isinstance(pop, ir.Fused) and pop.kind == "send" and isinstance(cop, ir.AllGather)
            and cop.x == prod.outs[-1].name):
        (sender, src), (waiter, dst) = _send_steps(pl, prod, first, unroll, mode, op.chunks)
        pl.group = dst[0]
        gather = _nccl_step(pl, cons, first + n_prod)
        return [(sender, src), (replace(waiter, steps=(*waiter.steps, gather)), dst)]
    raise _fault(f"{what}: the GPU backend overlaps a MatMul with an AllReduce, an AllReduce "
                 f"with a fused Send, or a fused Send with an AllGather of what it sent, got "
                 f"{pop} then {cop}; measure a schedule without this overlap")


def check_overlap_rows(step: OverlapStep, rows: int, P: int) -> None:
    """Raise unless `rows` (the MatMul's output rows, sizes bound) split into the step's
    chunks, and each chunk evenly over the P ranks when a fused collective consumes it."""
    per = step.chunks * (P if isinstance(step.consumer, KernelStep) else 1)
    check_chunk_rows(step.stmt, rows, per, step.chunks, rows_are="the MatMul's {} output rows",
                     action="overlap in")


def check_chunk_rows(stmt: str, rows: int, per: int, chunks: int,
                     rows_are: str = "the {} rows", action: str = "run in") -> None:
    """Raise unless `rows` (sizes bound) split into `per` equal parts: `chunks` per tensor,
    times P when each chunk is split again over the ranks of a stage."""
    if rows % per:
        raise _fault(f"statement {stmt}: {rows_are.format(rows)} must be a multiple of "
                     f"{'chunks x ranks = ' if per != chunks else 'chunks = '}{per} to "
                     f"{action} {chunks} chunks; pick sizes that divide, or fewer chunks")


def _chunk_rows(pl: _Planner, t: TensorType, chunks: int) -> tuple[sympy.Expr, int]:
    """Rows of a chunked kernel's whole tensor and the parts they must divide into."""
    return pl.sub(t.shape[0]), chunks * (pl.P if _sliced0(t) else 1)


def _nccl_step(pl: _Planner, stmt: ir.Stmt, index: int) -> NcclStep:
    op, out = stmt.op, stmt.out
    what = f"statement {out.name} ({op})"
    src = pl.locs[op.x]
    if isinstance(op, ir.AllGather):
        dst = _result_loc(pl, stmt, index, what)
    elif isinstance(op, ir.AllReduce) and pl.last_use(op.x, index):
        # In place, as data-parallel training reduces its gradients (NCCL's in-place form);
        # the gradient is dead afterwards, so the program's meaning is unchanged.
        dst = src
    else:
        dst = pl.new_buffer(out.name, pl.local_numel(out.name))
    pl.locs[out.name] = dst
    dtype = out.type.dtype.name
    if isinstance(op, ir.ReduceScatter) and op.dim != 0:
        raise _fault(f"{what}: ReduceScatter must scatter dim 0 on GPUs, got dim {op.dim}")
    if isinstance(op, ir.AllGather) and pl.types[op.x].layout != Sliced(0):
        raise _fault(f"{what}: AllGather must gather dim 0 on GPUs, got "
                     f"{pl.types[op.x].layout}")
    if isinstance(op, ir.AllReduce):
        return NcclStep("all_reduce", _REDUCE[op.op], src, dst, dst.numel, dtype, out.name)
    if isinstance(op, ir.ReduceScatter):
        return NcclStep("reduce_scatter", _REDUCE[op.op], src, dst, dst.numel, dtype, out.name)
    if isinstance(op, ir.AllGather):
        return NcclStep("all_gather", "", src, dst, src.numel, dtype, out.name)
    return NcclStep("broadcast", "", src, dst, dst.numel, dtype, out.name, root=op.root)


# ---------------------------------------------------------------- kernels


class _KernelBuilder:
    """Collects the params, loads, statements and stores of one kernel over a domain."""

    def __init__(self, pl: _Planner, domain: TensorType, what: str, chunks: int = 1):
        self.pl = pl
        self.domain = domain
        self.what = what
        self.chunks = chunks
        self.domain_numel = pl.sub(_numel(domain.local_shape()))
        # Elements per rank of one launch. Chunked (an overlapped consumer): launch `chunk`
        # covers rows [chunk * rows/chunks, (chunk+1) * rows/chunks) of the whole tensor and
        # rank r its r-th part of those rows, so `slice_index` counts parts of that size.
        # A chunked kernel over a whole (Replicated or Local) tensor, the fused Send of an
        # overlap, covers the chunk's rows on every rank: its parts are counted by chunk alone.
        self.extent = self.domain_numel / chunks
        self.sliced = isinstance(domain.layout, Sliced) and domain.layout.dim == 0
        self.slice_index = (RANK if chunks == 1 else
                            CHUNK * pl.P + RANK if self.sliced else CHUNK)
        if chunks > 1 and isinstance(domain.layout, Sliced) and not self.sliced:
            raise _fault(f"{what}: an overlapped kernel must compute on dim-0 slices or whole "
                         f"tensors, got {domain.layout}")
        self.params: dict[str, Param] = {}
        self.loads: dict[str, Load] = {}
        self.scalars: dict[str, Load] = {}
        self.assigns: list[Assign] = []
        self.stores: list[Store] = []
        self.regs: dict[str, str] = {}
        self.symbols: set[sympy.Symbol] = set()
        self.dropout = False
        self.pushes: list[Push] = []
        self.norms: list[NormAcc] = []
        self.pending: list[tuple[str, str, bool]] = []  # (norm, partials buffer, cross-rank)

    # -- parameters

    @property
    def slice_base(self) -> sympy.Expr:
        """Whole-tensor element index of this rank's first element in this launch."""
        return self.slice_index * self.extent

    def _c(self, expr) -> str:
        expr = self.pl.sub(expr)
        self.symbols |= {s for s in expr.free_symbols if s not in (RANK, ELEM, CHUNK)}
        return c_index(expr)

    def _unchunked(self, thing: str) -> None:
        """Raise for what an overlapped (chunked) kernel cannot do: `thing` says what."""
        if self.chunks > 1:
            raise _fault(f"{self.what}: an overlapped fused collective must read whole tensors "
                         f"and keep what it computes in registers, got {thing}; measure this "
                         "schedule without the overlap")

    def buf_param(self, buffer: str, const: bool) -> str:
        name = f"p_{buffer}"
        b = self.pl.buffers[buffer]
        decl = f"{'const ' if const else ''}{_BUF_C_TYPES[b.dtype]}* __restrict__ {name}"
        old = self.params.get(name)
        if old is None or (old.c_decl.startswith("const") and not const):
            self.params[name] = Param(name, decl, "buf", buffer)
        return name

    def remote_param(self, buffer: str, group: int, c_type: str = "") -> str:
        """The pointer to `buffer` on this local rank of stage `group` (a fused Send's
        destination, mapped through CUDA IPC)."""
        self.pl.mark_peer(buffer)
        ctype = c_type or _BUF_C_TYPES[self.pl.buffers[buffer].dtype]
        name = f"p_{buffer}_remote"
        self.params[name] = Param(name, f"{ctype}* {name}", "remote", buffer, group)
        return name

    def peer_params(self, buffer: str, const: bool) -> tuple[str, ...]:
        self.pl.mark_peer(buffer)
        ctype = _C_TYPES[self.pl.buffers[buffer].dtype]
        names = []
        for k in range(self.pl.P):
            name = f"p_{buffer}_peer{k}"
            # No __restrict__: a rank's own entry aliases its local pointer.
            self.params[name] = Param(name, f"{'const ' if const else ''}{ctype}* {name}",
                                      "peer", buffer, k)
            names.append(name)
        return tuple(names)

    # -- reading operands

    def operand(self, name: str) -> tuple[str, bool]:
        """C text of a value inside an expression, and whether it is per-element."""
        if name in self.regs:
            return self.regs[name], True
        t = self.pl.types[name]
        loc = self.pl.locs.get(name)
        if loc is None:
            raise _fault(f"{self.what}: value '{name}' must be in memory or computed in this "
                         "kernel, got neither")
        ctype = _c_type(t)
        if t.rank == 0:
            var = f"s_{_ident(name)}"
            if var not in self.scalars:
                ptr = self.buf_param(loc.buffer, const=True)
                self.scalars[var] = Load(var, ctype, "scalar", ptr, self._c(loc.offset))
            return var, False
        var = f"a_{_ident(name)}"
        if var not in self.loads:
            ptr = self.buf_param(loc.buffer, const=True)
            self.loads[var] = self._read(var, name, t, loc, ctype, ptr)
        return var, True

    def _read(self, var, name, t, loc, ctype, ptr) -> Load:
        d = self.domain
        same_local = (len(t.shape) == len(d.shape) and all(
            ir.proven_equal(self.pl.sub(a), self.pl.sub(b))
            for a, b in zip(t.local_shape(), d.local_shape())))
        if same_local and self.chunks > 1 and not isinstance(d.layout, Sliced):
            # A whole-tensor domain in chunks: this launch's rows of an operand of its shape.
            return Load(var, ctype, "contig", ptr, self._c(loc.offset + self.slice_base))
        if same_local and (t.layout == d.layout or not isinstance(d.layout, Sliced)):
            self._unchunked(f"'{name}', a slice held per rank")
            return Load(var, ctype, "contig", ptr, self._c(loc.offset))
        whole = len(t.shape) == len(d.shape) and all(
            ir.proven_equal(self.pl.sub(a), self.pl.sub(b)) for a, b in zip(t.shape, d.shape))
        if (whole and isinstance(d.layout, Sliced) and d.layout.dim == 0
                and not isinstance(t.layout, Sliced)):
            # A whole tensor read by a computation on slices: rank r's slice of it.
            return Load(var, ctype, "contig", ptr, self._c(loc.offset + self.slice_base))
        return Load(var, ctype, "gather", ptr, self._c(loc.offset),
                    index=self._c(self._gather_index(t)))

    def _gather_index(self, t: TensorType) -> sympy.Expr:
        """Element index of a broadcast operand for domain element `e` (numpy broadcasting)."""
        d = self.domain
        dl = [self.pl.sub(x) for x in d.local_shape()]
        dl[0] = dl[0] / self.chunks  # rows of one launch
        tl = [self.pl.sub(x) for x in t.local_shape()]
        coords = []
        stride = sympy.Integer(1)
        for k in reversed(range(len(dl))):
            coords.append(sympy.Mod(sympy.floor(ELEM / stride), dl[k]))
            stride = stride * dl[k]
        coords.reverse()
        index = sympy.Integer(0)
        ostride = sympy.Integer(1)
        for k in reversed(range(len(tl))):
            dk = k + len(dl) - len(tl)
            if tl[k] != 1:
                c = coords[dk]
                if (isinstance(d.layout, Sliced) and d.layout.dim == dk
                        and not isinstance(t.layout, Sliced)):
                    c = c + self.slice_index * dl[dk]
                elif self.chunks > 1 and dk == 0 and not isinstance(d.layout, Sliced):
                    c = c + self.slice_index * dl[dk]  # the chunk's rows of a whole tensor
                index = index + c * ostride
            ostride = ostride * tl[k]
        return index

    # -- expressions

    def expr(self, e: ir.Expr, env_types, hoist: bool = True) -> str:
        """C text of an elementwise expression; the largest costly parts that read only
        scalars (Adam's 1 - beta1 ** step) are hoisted out of the loop (`_hoist`)."""
        if hoist and self._uniform(e) and _costly(e):
            return self._hoist(self._expr(e, env_types, hoist=False))
        return self._expr(e, env_types, hoist)

    def _uniform(self, e: ir.Expr) -> bool:
        """Whether `e` reads only scalars held in memory (no per-element value, no dropout,
        no cast), so it has one value per kernel launch."""
        if any(isinstance(x, (ir.Dropout, ir.Cast)) for x in ir.expr_nodes(e)):
            return False
        return all(name not in self.regs and self.pl.types[name].rank == 0
                   for name in ir.expr_refs(e))

    def _hoist(self, text: str) -> str:
        """A register computed once per thread before the loop, holding C expression `text`
        (of scalars only); the same text gets the same register."""
        for load in self.scalars.values():
            if load.mode == "hoisted" and load.expr == text:
                return load.var
        var = f"h_{sum(1 for x in self.scalars.values() if x.mode == 'hoisted')}"
        self.scalars[var] = Load(var, "float", "hoisted", "", expr=text)
        return var

    def _expr(self, e: ir.Expr, env_types, hoist: bool = True) -> str:
        match e:
            case ir.Ref(name):
                var, vec = self.operand(name)
                return f"{var}[j]" if vec else var
            case ir.Const(v):
                return _float_literal(v)
            case ir.Binary(op, a, b):
                x, y = self.expr(a, env_types, hoist), self.expr(b, env_types, hoist)
                if op in ("add", "sub", "mul", "div"):
                    return f"({x} {ir.BINARY_OPS[op]} {y})"
                return {"pow": f"wb::pow_ref({x}, {y})", "max": f"fmaxf({x}, {y})",
                        "min": f"fminf({x}, {y})"}[op]
            case ir.Unary(fn, a):
                x = self.expr(a, env_types, hoist)
                return {"neg": f"(-{x})", "sqrt": f"sqrtf({x})", "rsqrt": f"(1.0f / sqrtf({x}))",
                        "exp": f"expf({x})", "log": f"logf({x})", "abs": f"fabsf({x})"}[fn]
            case ir.Cast(dtype, a):
                return f"wb::round_to<{_C_TYPES[dtype.name]}>({self.expr(a, env_types, hoist)})"
            case ir.Dropout(p, seed, a):
                self.dropout = True
                t = ir.expr_type(a, env_types, self.what)
                gidx = ELEM
                if isinstance(t.layout, Sliced):
                    if t.layout.dim != 0:
                        raise _fault(f"{self.what}: Dropout on slices must slice dim 0, got "
                                     f"{t.layout}")
                    gidx = ELEM + self.slice_base
                elif self.chunks > 1 and not isinstance(self.domain.layout, Sliced):
                    gidx = ELEM + self.slice_base  # the chunk's rows of a whole tensor
                else:
                    self._unchunked("a Dropout of a whole tensor")
                scale = _float_literal(float(np.float32(1.0 / (1.0 - p))))
                x = self.expr(a, env_types, hoist)
                return (f"wb::dropout({x}, {int(seed) & 0xFFFFFFFF}u, "
                        f"static_cast<unsigned long long>({self._c(gidx)}), "
                        f"{_float_literal(p)}, {scale})")
        raise _fault(f"{self.what}: expression must be elementwise, got {e!r}")

    def compute(self, leaf: ir.Stmt, index: int) -> None:
        out = leaf.out
        what = f"statement {out.name} ({leaf.op})"
        if not ir.proven_equal(self.pl.sub(_numel(out.type.local_shape())), self.domain_numel):
            raise _fault(f"{what}: a fused computation must have the kernel's domain of "
                         f"{self.domain_numel} elements per rank, got {out.type}")
        text = self.expr(leaf.op.expr, self.pl.types)
        var = f"r_{_ident(out.name)}"
        self.assigns.append(Assign(var, _c_type(out.type), text))
        self.regs[out.name] = var
        loc = _result_loc(self.pl, leaf, index, what)
        if loc is not None:
            self._unchunked(f"'{out.name}' stored in memory")
            self.pl.locs[out.name] = loc
            ptr = self.buf_param(loc.buffer, const=False)
            self.stores.append(Store(var, _c_type(out.type), ptr, self._c(loc.offset)))

    def gathered(self, leaf: ir.Stmt, index: int) -> tuple[Loc, bool]:
        """A fused AllGather of a value computed in the kernel: where the gathered tensor
        lives, and whether this rank's slice is already there (an Update wrote it in place)."""
        lop = leaf.op
        if lop.x not in self.regs:
            raise _fault(f"{self.what}: a fused AllGather must gather a value computed in the "
                         f"kernel, got '{lop.x}'")
        src_loc = self.pl.locs.get(lop.x)
        dst = _result_loc(self.pl, leaf, index, self.what)
        self.pl.locs[leaf.out.name] = dst
        self.regs[leaf.out.name] = self.regs[lop.x]
        return dst, src_loc is not None and src_loc.whole_offset is not None

    def reduced(self, leaf: ir.Stmt, index: int, load: Load) -> None:
        """A ReduceScatter's slice loaded (and combined) by `load`, held in registers, and
        stored where the program needs it in memory."""
        self.loads[load.var] = load
        rvar = f"r_{_ident(leaf.out.name)}"
        self.assigns.append(Assign(rvar, _c_type(leaf.out.type), f"{load.var}[j]"))
        self.regs[leaf.out.name] = rvar
        loc = _result_loc(self.pl, leaf, index, self.what)
        if loc is not None:
            self._unchunked(f"'{leaf.out.name}' stored in memory")
            self.pl.locs[leaf.out.name] = loc
            ptr = self.buf_param(loc.buffer, const=False)
            self.stores.append(Store(rvar, _c_type(leaf.out.type), ptr, self._c(loc.offset)))

    def spec(self, kind: str, template: str, P: int, extra: list[Param], comment: str,
             vec_types: list[str], unroll: int = 1, window: bool = False) -> KernelSpec:
        extent = self._c(self.extent)
        params = list(self.params.values())
        params += [Param(s.name, f"long long {s.name}", "size", s.name)
                   for s in sorted(self.symbols, key=lambda s: s.name)]
        params.append(Param("rank", "int rank", "rank"))
        if self.chunks > 1:
            params.append(Param("chunk", "long long chunk", "chunk"))
        if window:
            params += [Param("win_first", "long long win_first", "win_first"),
                       Param("win_count", "long long win_count", "win_count")]
        params += extra
        sizes = [{"float": 4, "__half": 2, "__nv_bfloat16": 2}[c] for c in vec_types]
        vec = 16 // min(sizes) if sizes else 4
        spec = KernelSpec(kind, template, P, vec, extent, tuple(params),
                          tuple(self.loads.values()), tuple(self.assigns), tuple(self.stores),
                          tuple(self.scalars.values()), self.dropout, unroll=unroll,
                          pushes=tuple(self.pushes), elem_bytes=tuple(sorted(set(sizes))),
                          norms=tuple(self.norms), window=window, comment=comment)
        return mangle(spec)

    def norm(self, leaf: ir.Stmt) -> None:
        """First phase of Norm(x) in this kernel: per-block f64 sums of squares of x into a
        partials buffer; the norm's value exists only after a finishing step (_finish_step)."""
        out, x = leaf.out, leaf.op.x
        what = f"statement {out.name} ({leaf.op})"
        self._unchunked(f"the norm {out.name}")
        if not ir.proven_equal(self.pl.local_numel(x), self.extent):
            raise _fault(f"{what}: a norm in a kernel must cover the kernel's domain of "
                         f"{self.extent} elements per rank, got {self.pl.types[x]}")
        var, vec = self.operand(x)
        if not vec:
            raise _fault(f"{what}: Norm must reduce a tensor, got the scalar '{x}'")
        cross = isinstance(self.pl.types[x].layout, Sliced)
        partials = f"partials_{_ident(out.name)}"
        self.pl.add_buffer(partials, "f64", sympy.Integer(MAX_BLOCKS), peer=cross)
        ptr = self.buf_param(partials, const=False)
        self.norms.append(NormAcc(var, (ptr,), MAX_BLOCKS))
        self.pl.locs[out.name] = self.pl.new_buffer(out.name, 1)
        self.pending.append((out.name, partials, cross))

    def vec_types(self) -> list[str]:
        return ([ld.c_type for ld in self.loads.values() if ld.mode in ("contig", "reduce")]
                + [s.c_type for s in self.stores])


def _elementwise_kernel(pl: _Planner, stmt: ir.Stmt, first: int) -> KernelStep:
    leaves = list(stmt.leaves())
    kb = _KernelBuilder(pl, leaves[0].out.type, f"statement {stmt.name} ({stmt.op})")
    for k, leaf in enumerate(leaves):
        if not isinstance(leaf.op, ir.ELEMENTWISE_OPS):
            raise _fault(f"a fused compute kernel must hold only Compute/Update, got {leaf.op}")
        kb.compute(leaf, first + k)
    spec = kb.spec("elementwise", "elementwise.cu.j2", pl.P, [],
                   "; ".join(f"{s.name} = {s.op}" for s in leaves), kb.vec_types())
    return KernelStep(spec, tuple(s.name for s in leaves), extent=kb.extent)


def _slice_loc(pl: _Planner, leaf: ir.Stmt, what: str) -> Loc:
    """Slice(x): rank r's slice of a whole tensor in memory, a view at an offset (no step)."""
    op = leaf.op
    loc = pl.locs.get(op.x)
    if loc is None:
        raise _fault(f"{what}: the tensor a Slice views must live in memory, got '{op.x}' in "
                     "registers")
    t = pl.types[op.x]
    if t.layout == Sliced(op.dim):
        return loc  # already this rank's slice (sliced state): the view is the value itself
    if op.dim != 0:
        raise _fault(f"{what}: Slice must slice dim 0 on GPUs, got dim {op.dim}")
    n = pl.local_numel(leaf.out.name)
    return Loc(loc.buffer, loc.offset + RANK * n, n)


def _norm_steps(pl: _Planner, stmt: ir.Stmt, first: int) -> list[KernelStep]:
    """An unfused Norm(x): a streaming kernel of per-block sums of squares, then the finishing
    kernel (cross-rank through peer loads of the partials when x is Sliced)."""
    x = stmt.op.x
    kb = _KernelBuilder(pl, pl.types[x], f"statement {stmt.name} ({stmt.op})")
    kb.norm(stmt)
    spec = kb.spec("elementwise", "elementwise.cu.j2", pl.P, [],
                   f"{stmt.name} = {stmt.op}: per-block sums of squares", kb.vec_types())
    return [KernelStep(spec, (stmt.name,), extent=kb.extent), _finish_step(pl, kb.pending)]


def _finish_step(pl: _Planner, pending) -> KernelStep:
    """One block that turns partial sums of squares into norms: sqrt(sum over ranks and
    blocks); peers' partials are read through their IPC pointers between two barriers."""
    params, norms = [], []
    for name, partials, cross in pending:
        if cross:
            ptrs = []
            for k in range(pl.P):
                pname = f"p_{partials}_peer{k}"
                params.append(Param(pname, f"const double* {pname}", "peer", partials, k))
                ptrs.append(pname)
        else:
            pname = f"p_{partials}"
            params.append(Param(pname, f"const double* __restrict__ {pname}", "buf", partials))
            ptrs = [pname]
        out = pl.locs[name]
        oname = f"p_{out.buffer}"
        params.append(Param(oname, f"float* __restrict__ {oname}", "buf", out.buffer))
        norms.append(NormAcc("", tuple(ptrs), MAX_BLOCKS, oname))
    params.append(Param("rank", "int rank", "rank"))
    if any(cross for _, _, cross in pending):
        flags_name = f"flags_{_ident(pending[0][0])}"
        pl.add_buffer(flags_name, "u32", sympy.Integer(2 * MAX_BLOCKS * pl.P), peer=True)
        params += [Param(f"flags{k}", f"uint32_t* flags{k}", "flags", flags_name, k)
                   for k in range(pl.P)]
        params.append(Param("epoch", "uint32_t epoch", "epoch"))
    else:
        flags_name = ""
    names = tuple(n for n, _, _ in pending)
    spec = mangle(KernelSpec("finish", "norm_finish.cu.j2", pl.P, 1, "1LL", tuple(params), (),
                             (), (), norms=tuple(norms),
                             comment=f"finish {', '.join(names)} = sqrt(sum of squares)"))
    return KernelStep(spec, names, flags_name, sympy.Integer(1))


def _phases(leaves: list[ir.Stmt]) -> list[int]:
    """Launch index of each leaf of a fused region: a leaf that reads a norm runs one launch
    after the norm's partial sums (the grid-wide, cross-GPU reduction sits in between)."""
    phase, norms, out = {}, set(), []
    for leaf in leaves:
        p = max([phase[n] + (n in norms) for n in leaf.op.operands() if n in phase],
                default=0)
        for v in leaf.outs:
            phase[v.name] = p
        if isinstance(leaf.op, ir.Norm):
            norms.add(leaf.out.name)
        out.append(p)
    return out


def _fused_collective_steps(pl: _Planner, stmt: ir.Stmt, first: int, unroll: int,
                            mode: str, chunks: int = 1) -> list[KernelStep]:
    """A fused collective region as launches: one kernel per phase (see _phases), each
    followed by the finishing kernel of the norms it accumulated. Without norms: one kernel."""
    leaves = list(stmt.leaves())
    phases = _phases(leaves)
    what = f"statement {stmt.name} ({stmt.op})"
    if phases != sorted(phases):
        raise _fault(f"{what}: a fused region must compute each norm's users after every "
                     f"statement the norm does not wait for, got launch order {phases}")
    names = {leaf.out.name: p for leaf, p in zip(leaves, phases)}
    for leaf, p in zip(leaves, phases):
        for n in leaf.op.operands():
            if n in names and names[n] < p:
                pl.spill.add(n)
    steps = []
    for p in range(phases[-1] + 1):
        part = [(first + k, leaf) for k, (leaf, q) in enumerate(zip(leaves, phases)) if q == p]
        step, pending = _collective_kernel(pl, stmt, part, unroll, mode,
                                           tag=f"_{p}" if p else "", chunks=chunks)
        steps.append(step)
        if pending:
            steps.append(_finish_step(pl, pending))
    return steps


def _collective_kernel(pl: _Planner, stmt: ir.Stmt, part, unroll: int, mode: str = "pull",
                       tag: str = "", chunks: int = 1) -> tuple[KernelStep, list]:
    """FusedAllReduce / FusedReduceScatter / FusedAllGather / FusedSend: ReduceScatter by
    peer loads, the computation on this rank's slice in registers, AllGather by peer stores
    or a Send by stores into the next stage's buffer, one kernel; `part` is the (leaf index,
    leaf) list of one launch of the region. Also the norms' pending finishing work."""
    op: ir.Fused = stmt.op
    leaves = [leaf for _, leaf in part]
    what = f"statement {stmt.name} ({op})"
    domain = leaves[0].out.type
    collective = any(isinstance(leaf.op, (ir.ReduceScatter, ir.AllGather)) for leaf in leaves)
    if collective and not (isinstance(domain.layout, Sliced) and domain.layout.dim == 0):
        raise _fault(f"{what}: a fused collective must compute on dim-0 slices, got "
                     f"{domain.layout}")
    kb = _KernelBuilder(pl, domain, what, chunks)
    for index, leaf in part:
        lop = leaf.op
        if isinstance(lop, ir.ReduceScatter):
            if lop.dim != 0:
                raise _fault(f"{what}: ReduceScatter must scatter dim 0, got {lop.dim}")
            src = pl.locs[lop.x]
            var = f"a_{_ident(leaf.out.name)}"
            ctype = _c_type(pl.types[lop.x])
            off = kb._c(src.offset + kb.slice_base)
            if mode == "pull":
                srcs = tuple(f"{p} + ({off})" for p in kb.peer_params(src.buffer, const=True))
            else:
                gptr = kb.buf_param(src.buffer, const=True)
                stage = f"stage_{_ident(lop.x)}"
                pl.add_buffer(stage, pl.types[lop.x].dtype.name, pl.P * kb.extent, peer=True)
                speers = kb.peer_params(stage, const=False)
                # Read the local staging buffer through a plain pointer: peers write it during
                # this launch (before the barrier), so no __restrict__ / read-only-cache path.
                local = f"p_{stage}_local"
                kb.params[local] = Param(local, f"const {ctype}* {local}", "buf", stage)
                n = kb._c(kb.extent)
                srcs = tuple(f"(rank == {k} ? {gptr} + ({off}) : {local} + {k}LL * ({n}))"
                             for k in range(pl.P))
                # This launch's rows of the source: rank q's part starts q * extent later.
                chunk_base = kb.slice_base.subs(RANK, 0)
                kb.pushes.append(Push(ctype, f"{gptr} + ({kb._c(src.offset + chunk_base)})",
                                      speers))
            kb.reduced(leaf, index, Load(var, ctype, "reduce", "", off, peers=srcs,
                                         reduce=_REDUCE[lop.op]))
        elif isinstance(lop, ir.AllGather):
            dst, self_stored = kb.gathered(leaf, index)
            peers = kb.peer_params(dst.buffer, const=False)
            kb.stores.append(Store(kb.regs[lop.x], _c_type(leaf.out.type), "",
                                   kb._c(dst.offset + kb.slice_base), peers, self_stored))
        elif isinstance(lop, ir.ELEMENTWISE_OPS):
            kb.compute(leaf, index)
        elif isinstance(lop, ir.Slice):
            if lop.x in kb.regs:
                raise _fault(f"{what}: a fused Slice must view a tensor in memory, got "
                             f"'{lop.x}' computed in the kernel")
            pl.locs[leaf.out.name] = _slice_loc(pl, leaf, what)
        elif isinstance(lop, ir.Norm):
            kb.norm(leaf)
        elif isinstance(lop, ir.Send) and op.kind == "send":
            _send_store(kb, leaf, what)
        else:
            raise _fault(f"{what}: a fused collective may hold ReduceScatter, Compute, Update, "
                         f"Slice, Norm and AllGather (and a fused Send its Send), got {lop}")
    extra, flags_name = [], ""
    if collective:
        flags_name = f"flags_{_ident(stmt.name.split(',')[0])}{tag}"
        pl.add_buffer(flags_name, "u32", sympy.Integer(2 * MAX_BLOCKS * pl.P), peer=True)
        extra = [Param(f"flags{k}", f"uint32_t* flags{k}", "flags", flags_name, k)
                 for k in range(pl.P)]
        extra.append(Param("epoch", "uint32_t epoch", "epoch"))
    kind, template = "collective", "fused_collective.cu.j2"
    if op.kind == "send":
        kind, template = "send", "fused_send.cu.j2"
        extra += _send_signal_params(kb, leaves, what)
    spec = kb.spec(kind, template, pl.P, extra,
                   f"Fused{op.kind.capitalize()}: " + "; ".join(
                       f"{s.name} = {s.op}" for s in leaves), kb.vec_types(), unroll)
    return KernelStep(spec, tuple(s.name for s in leaves), flags_name, kb.extent), kb.pending


# ---------------------------------------------------------------- copy engines


def _copy_engine_step(pl: _Planner, stmt: ir.Stmt, first: int) -> CopyEngineStep:
    """A fused collective moved by copy engines (transforms.CopyEngines): the kernel of its
    computation on a window of this rank's slice, reading the reduce-scatter's pieces from
    the peers' staging slots in a local buffer (filled by pulls) and storing its results
    locally; pushes copy the gathered results' slice into every peer."""
    op: ir.Fused = stmt.op
    what = f"statement {stmt.name} ({op})"
    leaves = list(stmt.leaves())
    domain = leaves[0].out.type
    if not (isinstance(domain.layout, Sliced) and domain.layout.dim == 0):
        raise _fault(f"{what}: a fused collective must compute on dim-0 slices, got "
                     f"{domain.layout}")
    kb = _KernelBuilder(pl, domain, what)
    n = kb.extent  # elements of this rank's slice
    mine = RANK * n
    copies = []
    for index, leaf in enumerate(leaves, first):
        lop = leaf.op
        if isinstance(lop, ir.ReduceScatter):
            if lop.dim != 0:
                raise _fault(f"{what}: ReduceScatter must scatter dim 0, got {lop.dim}")
            src = pl.locs[lop.x]
            pl.mark_peer(src.buffer)  # peers pull their slices of it
            dtype = pl.types[lop.x].dtype.name
            stage = f"stage_{_ident(lop.x)}"
            pl.add_buffer(stage, dtype, pl.P * n)
            copies.append(PeerCopy(src.buffer, src.offset + mine, stage, PEER * n, n, dtype,
                                   pull=True))
            var = f"a_{_ident(leaf.out.name)}"
            gptr = kb.buf_param(src.buffer, const=True)
            local = kb.buf_param(stage, const=True)
            off = kb._c(src.offset + kb.slice_base)
            # slot k of the staging buffer holds rank k's piece once the pulls are done;
            # this rank's own part is read in place
            srcs = tuple(f"(rank == {k} ? {gptr} + ({off}) : {local} + {k}LL * n)"
                         for k in range(pl.P))
            kb.reduced(leaf, index, Load(var, _c_type(pl.types[lop.x]), "reduce", "", off,
                                         peers=srcs, reduce=_REDUCE[lop.op]))
        elif isinstance(lop, ir.AllGather):
            dst, self_stored = kb.gathered(leaf, index)
            pl.mark_peer(dst.buffer)  # peers push their slices into it
            if not self_stored:
                # the slice is not yet in the gathered buffer (an Update put it there in place)
                ptr = kb.buf_param(dst.buffer, const=False)
                kb.stores.append(Store(kb.regs[lop.x], _c_type(leaf.out.type), ptr,
                                       kb._c(dst.offset + kb.slice_base)))
            at = dst.offset + mine
            copies.append(PeerCopy(dst.buffer, at, dst.buffer, at, n,
                                   leaf.out.type.dtype.name, pull=False))
        elif isinstance(lop, ir.ELEMENTWISE_OPS):
            kb.compute(leaf, index)
        elif isinstance(lop, ir.Slice):
            pl.locs[leaf.out.name] = _slice_loc(pl, leaf, what)
        else:
            raise _fault(f"{what}: a fused collective moved by copy engines may hold "
                         f"ReduceScatter, Compute, Update, Slice and AllGather, got {lop}")
    comment = "Fused" + op.kind.capitalize() + " (copy engines): " + "; ".join(
        f"{s.name} = {s.op}" for s in leaves)
    kernel = kb.spec("piece", "elementwise.cu.j2", pl.P, [], comment, kb.vec_types(),
                     window=True)
    flags = f"flags_{_ident(stmt.name.split(',')[0])}"
    pl.add_buffer(flags, "u32", sympy.Integer(2 * MAX_BLOCKS * pl.P), peer=True)
    names = tuple(s.name for s in leaves)
    start, end = (KernelStep(_barrier_spec(pl.P, flags, f"{stmt.name}: {when}"), names, flags,
                             sympy.Integer(1))
                  for when in ("the peers' inputs are complete",
                               "every peer's pushes into this rank have landed"))
    return CopyEngineStep(start, KernelStep(kernel, names, "", n), end, tuple(copies),
                          op.chunks, names)


def _barrier_spec(P: int, flags: str, comment: str) -> KernelSpec:
    """A one-block kernel that meets every rank of the stage (barrier.cu.j2)."""
    params = [Param(f"flags{k}", f"uint32_t* flags{k}", "flags", flags, k) for k in range(P)]
    params += [Param("rank", "int rank", "rank"), Param("epoch", "uint32_t epoch", "epoch")]
    return mangle(KernelSpec("barrier", "barrier.cu.j2", P, 4, "1", tuple(params), (), (), (),
                             comment=comment))


# ---------------------------------------------------------------- Send (pipelines)


def _p2p_step(pl: _Planner, stmt: ir.Stmt) -> tuple[SendStep, tuple[int, int]]:
    """An unfused Send: NCCL send on the source stage, recv into a fresh buffer on the next."""
    op, out = stmt.op, stmt.out
    what = f"statement {out.name} ({op})"
    src = pl.locs.get(op.x)
    if src is None:
        raise _fault(f"{what}: the value a Send sends must live in memory, got '{op.x}' in "
                     "registers")
    dst = pl.new_buffer(out.name, pl.local_numel(out.name))
    pl.locs[out.name] = dst
    _c_type(out.type)
    g0, g1 = pl.stage_of[pl.types[op.x].group], pl.stage_of[op.dst]
    return SendStep(src, dst, dst.numel, out.type.dtype.name, out.name, g0, g1), (g0, g1)


def _send_names(out: str) -> tuple[str, str, str]:
    """Buffers of a fused Send of `out`: the receiver's flags (one per chunk), the sender's
    count of finished blocks (one per chunk), and the sender's ack from the receiver."""
    return f"sendflags_{_ident(out)}", f"sendcount_{_ident(out)}", f"sendack_{_ident(out)}"


def _send_store(kb: _KernelBuilder, leaf: ir.Stmt, what: str) -> None:
    """The Send leaf of a fused Send: store the value (registers, or loaded) straight into a
    fresh buffer of the destination stage on this local rank, at this launch's part of it
    (parts in chunk order: an overlapped Send of slices leaves chunk c's part at c * extent)."""
    pl, op, out = kb.pl, leaf.op, leaf.out
    if not ir.proven_equal(pl.local_numel(out.name), kb.domain_numel):
        raise _fault(f"{what}: a fused Send must send the kernel's domain of "
                     f"{kb.domain_numel} elements per rank, got {out.type}")
    var, vec = kb.operand(op.x)
    if not vec:
        raise _fault(f"{what}: a fused Send must send a tensor, got the scalar '{op.x}'")
    dst = pl.new_buffer(out.name, pl.local_numel(out.name))
    pl.locs[out.name] = dst
    ptr = kb.remote_param(dst.buffer, pl.stage_of[op.dst])
    offset = dst.offset + (CHUNK * kb.extent if kb.chunks > 1 else 0)
    kb.stores.append(Store(var, _c_type(out.type), ptr, kb._c(offset)))
    kb.regs[out.name] = var


def _send_signal_params(kb: _KernelBuilder, leaves, what: str) -> list[Param]:
    """Parameters of a fused Send's handshake: the receiver's flag array (remote), the
    sender's block counter and ack (local), and the run's sequence number."""
    sends = [leaf for leaf in leaves if isinstance(leaf.op, ir.Send)]
    if len(sends) != 1 or sends[0] is not leaves[-1]:
        raise _fault(f"{what}: a fused Send must end with its one Send, got "
                     f"{len(sends)} Sends in {', '.join(s.name for s in leaves)}")
    pl, send = kb.pl, sends[0]
    flags, count, ack = _send_names(send.out.name)
    dst = pl.stage_of[send.op.dst]
    pl.add_buffer(flags, "u32", kb.chunks, peer=True, group=dst)
    pl.add_buffer(count, "u32", kb.chunks)
    pl.add_buffer(ack, "u32", 1, peer=True)
    return [Param("sendflags", "uint32_t* sendflags", "remote", flags, dst),
            Param("sendcount", "uint32_t* sendcount", "buf", count),
            Param("sendack", "const uint32_t* sendack", "buf", ack),
            Param("seq", "uint32_t seq", "seq")]


def _wait_step(pl: _Planner, send: ir.Stmt, src: int) -> KernelStep:
    """The receiving end of a fused Send (one block, launched per chunk): ack the previous
    run, then wait for the sender's flag of this chunk."""
    flags, _, ack = _send_names(send.out.name)
    params = (Param("sendflags", "const uint32_t* sendflags", "buf", flags),
              Param("sendack", "uint32_t* sendack", "remote", ack, src),
              Param("seq", "uint32_t seq", "seq"),
              Param("chunk", "long long chunk", "chunk"))
    spec = mangle(KernelSpec("wait", "recv_wait.cu.j2", pl.P, 1, "1LL", params, (), (), (),
                             comment=f"receive {send.out.name} = {send.op}: wait for the "
                                     "sender's flag"))
    return KernelStep(spec, (send.out.name,), flags, sympy.Integer(1))


def _send_steps(pl: _Planner, stmt: ir.Stmt, first: int, unroll: int, mode: str,
                chunks: int = 1) -> list[tuple[object, tuple[int, ...]]]:
    """A FusedSend region ([ReduceScatter] C* Send): the fused kernel on the source stage and
    the flag wait on the destination stage, as (step, stages) pairs; chunked (an overlap):
    both as ChunkedSteps of `chunks` launches."""
    leaves = list(stmt.leaves())
    what = f"statement {stmt.name} ({stmt.op})"
    if any(p for p in _phases(leaves)):
        raise _fault(f"{what}: a fused Send must be one launch, got a norm whose users need a "
                     "second one; measure a schedule that does not fuse the norm")
    src = pl.group
    step, _ = _collective_kernel(pl, stmt, list(enumerate(leaves, start=first)), unroll,
                                 mode, chunks=chunks)
    send = leaves[-1]
    if chunks > 1 and _sliced0(send.out.type):
        uses = pl.uses.get(send.out.name, set()) - {pl.kernel_of[send.out.name]}
        if uses or any(v.name == send.out.name for v in pl.program.outputs):
            raise _fault(f"{what}: an overlapped Send of slices leaves its parts in chunk "
                         f"order, so only an AllGather in the same overlap may read "
                         f"'{send.out.name}', got other uses; overlap it with its AllGather")
    dst = pl.stage_of[send.op.dst]
    wait = _wait_step(pl, send, src)
    if chunks > 1:
        rows, per = _chunk_rows(pl, leaves[0].out.type, chunks)
        return [(ChunkedStep(chunks, (step,), stmt.name, rows, per), (src,)),
                (ChunkedStep(chunks, (wait,), stmt.name, rows, per), (dst,))]
    return [(step, (src,)), (wait, (dst,))]


def _sliced0(t: TensorType) -> bool:
    """Whether a value is sliced along dim 0 (the layout chunked kernels split further)."""
    return isinstance(t.layout, Sliced) and t.layout.dim == 0


__all__ = ["BufferSpec", "CHUNK", "ChunkedStep", "GemmStep", "KernelStep", "Loc", "MAX_BLOCKS",
           "NcclStep", "OverlapStep", "Plan", "RANK", "SendStep", "THREADS", "check_chunk_rows",
           "check_overlap_rows", "lower", "stage_order"]
