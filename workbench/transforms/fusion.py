"""The transforms that make kernels: fuse (consecutive statements into one kernel, computation
into a collective), overlap (producer and consumer chunk by chunk), copy engines (a fused
collective's bytes moved by copy engines), and dead-code elimination.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from workbench import ir
from workbench.errors import IllegalTransform
from workbench.transforms.base import Transform, dead_code_eliminated, plain_stmts, top_index
from workbench.types import OnRoot, Sliced
from workbench.verify import fused_kind_of, prologue_length

# Pieces an overlap or a copy-engine region is cut into: far more than any schedule gains from,
# and it bounds the plan (a million chunks took 2.3 GB to price).
MAX_CHUNKS = 1024


def gathers_last(members: list[ir.Stmt]) -> list[ir.Stmt]:
    """The statements with every AllGather that no later one reads moved to the end: a fused
    collective gathers all its outputs (the normalized rows and the residual of AllReduce +
    residual + RMSNorm) after computing them, whatever order reorder left the gathers in.
    Moving one is legal because nothing after it in the kernel reads it."""
    head, tail = [], []
    for k, s in enumerate(members):
        later = {o for m in members[k + 1:] for o in m.op.operands()}
        is_last_gather = isinstance(s.op, ir.AllGather) and not later & {s.out.name}
        (tail if is_last_gather else head).append(s)
    return head + tail


@dataclass(frozen=True, slots=True)
class Fuse(Transform):
    """Fuse statements into one kernel; the kind follows from the pattern (see ir.Fused):
    ReduceScatter + computation + AllGather becomes a FusedAllreduce, consecutive elementwise
    statements one FusedCompute, computation + Send one FusedSend, and so on.

    Statements in between that neither read nor feed the fused ones are moved out of the way;
    otherwise the fusion is illegal. Fused computation must share one iteration space (the
    same local shape), since one kernel walks it once; a scalar Compute among the fused
    statements that only they read (a clip factor, `clip = minimum(1, c / (norm + eps))`) is
    inlined into its readers, as if the program had written it inline (same rounding).
    """

    values: tuple[str, ...]
    kind: str | None = None
    name: ClassVar[str] = "fuse"

    def rewrite(self, program):
        who = f"fuse({', '.join(self.values)})"
        if len(self.values) < 2:
            raise IllegalTransform(f"{who}: fusion needs at least 2 statements, got "
                                   f"{len(self.values)}")
        program, values = _inline_scalars(program, self.values)
        idx = {plain_stmts(program, v, who)[0] for v in values}
        # Slice views that feed a member ride along: they are offsets, not kernels.
        read = {o for i in idx for o in program.stmts[i].op.operands()}
        idx |= {k for k in range(min(idx), max(idx))
                if isinstance(program.stmts[k].op, ir.Slice) and program.stmts[k].out.name in read}
        idx = sorted(idx)
        stmts = self._make_contiguous(program, idx, who)
        members = gathers_last([program.stmts[i] for i in idx])
        kind = fused_kind_of(members)
        if (kind is None and isinstance(members[0].op, ir.AllReduce)
                and members[0].op.sub is None
                and all(isinstance(m.op, ir.ELEMENTWISE_OPS) for m in members[1:])):
            # A whole AllReduce fuses with rows (a norm or softmax: every rank needs the whole
            # row reduced); an elementwise epilogue runs on slices between the ReduceScatter
            # and the AllGather of the split, where it does a Pth of the work.
            ar, rest = members[0].name, [m.name for m in members[1:]]
            raise IllegalTransform(
                f"{who}: a whole AllReduce fuses with computation that reduces along rows (a "
                "norm or softmax: ReduceAxis statements), got "
                f"[{', '.join(type(s.op).__name__ for s in members)}]; for an elementwise "
                f"epilogue split it first: rs, ag = s.split({ar}); moved = s.reorder("
                f"{', '.join(rest)}, before=ag); s.fuse(rs, *moved, {', '.join(rest)})")
        index = [m.name for m in members if isinstance(m.op, ir.INDEX_OPS)]
        if kind is None and index:
            raise IllegalTransform(
                f"{who}: an index op (Gather, TopK) must run as its own kernel, got "
                f"{', '.join(index)} in the region; fuse the statements around it without it "
                "(design decision 106)")
        if kind is None:
            ops = ", ".join(type(s.op).__name__ for s in members)
            raise IllegalTransform(
                f"{who}: statements [{ops}] match no fused kernel; fuse ReduceScatter + "
                "computation + AllGather, consecutive elementwise statements, computation + "
                "Send, or a MatMul then its elementwise epilogue (see ir.Fused)")
        if self.kind is not None and self.kind != kind:
            raise IllegalTransform(f"{who}: the statements form a fused {kind}, got kind="
                                   f"{self.kind!r}")
        if kind == "matmul":
            self._check_epilogue(program, members, who)
        if kind in ("reduce", "broadcast", "reducebroadcast"):
            self._check_rooted(program, members, who)
        if kind == "alltoall":
            self._check_exchange(program, members, who)
        self._check_iteration_space(members, who)
        if kind in ("allreduce", "reducescatter", "allgather"):
            self._check_collective_rows(program, members, who)
        first = min(stmts.index(m) for m in members)
        fused = ir.Fused(kind, tuple(members))
        if isinstance(members[0].op, ir.AllReduce) and members[0].op.op != ir.ReduceOp.Sum:
            # two-shot and Lamport sum; a whole AllReduce of Max or Min is combined by each
            # rank from every peer's rows (the same meaning, the one algorithm that runs it)
            fused = replace(fused, algorithm="one-shot")
        region = ir.Stmt(tuple(v for s in members for v in s.outs), fused, members[0].loc)
        return program.with_stmts(stmts[:first] + [region] + stmts[first + len(members):])

    @staticmethod
    def _make_contiguous(program, idx, who):
        """Move statements that sit between fused ones out of the way, if dataflow allows."""
        member_set = set(idx)
        before, group, after = [], [], []
        defined_in_group: set[str] = set()
        for i in range(idx[0], idx[-1] + 1):
            s = program.stmts[i]
            if i in member_set:
                needs = set(s.op.operands())
                blocked = [a for a in after if needs & {v.name for v in a.outs}]
                if blocked:
                    raise IllegalTransform(
                        f"{who}: {s.name} reads {blocked[0].name}, which must run after "
                        f"{group[0].name if group else s.name} because it reads a fused value; "
                        "they cannot be one kernel")
                group.append(s)
                defined_in_group |= {v.name for v in s.outs}
            elif set(s.op.operands()) & defined_in_group:
                after.append(s)
            else:
                before.append(s)
        return (list(program.stmts[:idx[0]]) + before + group + after
                + list(program.stmts[idx[-1] + 1:]))

    @staticmethod
    def _check_epilogue(program, members, who):
        """A MatMul's epilogue: elementwise over the GEMM's output (each statement has its
        local shape, so one thread per output element computes the whole epilogue) and the
        only reader of that output (else it must reach memory anyway and nothing is saved)."""
        mm, epilogue = members[0], members[1:]
        out = mm.out
        if out.name not in epilogue[0].op.operands():
            raise IllegalTransform(f"{who}: the epilogue must read the MatMul's output "
                                   f"{out.name}, got {epilogue[0].name} = {epilogue[0].op}")
        shape = tuple(out.type.local_shape())
        for s in epilogue:
            local = tuple(s.out.type.local_shape())
            if len(local) != len(shape) or not all(
                    ir.proven_equal(a, b) for a, b in zip(local, shape)):
                raise IllegalTransform(
                    f"{who}: an epilogue must be elementwise over the MatMul's output "
                    f"{out.name} (local shape {list(shape)}), got {s.name} over {list(local)}")
        inside = {v.name for s in members for v in s.outs}
        readers = [s.name for s in program.leaves() if s.out.name not in inside
                   and out.name in s.op.operands()]
        if readers or any(v.name == out.name for v in program.outputs):
            raise IllegalTransform(
                f"{who}: the MatMul's output {out.name} must be read only by its epilogue, got "
                + (f"a use by {readers[0]}" if readers else "it as a program output")
                + "; fuse those readers into the epilogue, or leave the MatMul unfused")
        types = {v.name: v.type for v in program.all_values()}
        if len(epilogue) == 1 and ir.library_epilogue(members, types) is None:
            # What the library does not run is one generated kernel after the GEMM, which a
            # single statement is already: the fuse would change nothing that runs.
            (e,) = epilogue
            raise IllegalTransform(
                f"{who}: a MatMul's epilogue must be one the GEMM library runs (bias, bias + "
                "ReLU or bias + GeLU-tanh, in the MatMul's dtype) or several statements to "
                f"make one kernel, got {e.name} = {_short(e.op)}, one statement that already "
                "runs as one kernel after the GEMM (the fuse would change nothing); leave it "
                "unfused, or write gelu_tanh(mm + b) for cuBLASLt's GeLU epilogue (the tanh "
                "approximation)")

    @staticmethod
    def _check_rooted(program, members, who):
        """Computation fused into a Reduce or before a Broadcast runs on the root alone (the
        kernel's other ranks only serve their inputs or receive): one root for the region, and
        every value computed there is either meaningful on the root only (OnRoot) or read by
        nothing outside the region, which the other ranks would then lack."""
        roots = {s.op.root for s in members if isinstance(s.op, (ir.Reduce, ir.Broadcast))}
        if len(roots) > 1:
            raise IllegalTransform(f"{who}: a fused Reduce and Broadcast must share one root, "
                                   f"got roots {sorted(roots)}")
        (root,) = roots
        inside = {v.name for s in members for v in s.outs}
        for s in members:
            if not isinstance(s.op, ir.ELEMENTWISE_OPS) or s.out.type.layout == OnRoot(root):
                continue
            readers = [r.name for r in program.leaves() if r.out.name not in inside
                       and s.out.name in r.op.operands()]
            if readers or any(v.name == s.out.name for v in program.outputs):
                raise IllegalTransform(
                    f"{who}: {s.name} would be computed on the root only, but its "
                    f"{s.out.type.layout} value is read outside the fused kernel, got "
                    + (f"a use by {readers[0]}" if readers else "it as a program output")
                    + "; leave it out of the fusion")

    @staticmethod
    def _check_exchange(program, members, who):
        """Computation fused before an AllToAll runs on the source rank's rows as the receiver
        loads them (design note 79): its values exist in the receiver's registers only, so
        nothing outside the kernel may read them."""
        k = next(i for i, s in enumerate(members) if isinstance(s.op, ir.AllToAll))
        before = {s.out.name for s in members[:k]}
        inside = {s.out.name for s in members}
        for s in program.leaves():
            if s.out.name not in inside and before & set(s.op.operands()):
                name = sorted(before & set(s.op.operands()))[0]
                raise IllegalTransform(f"{who}: a value computed before a fused AllToAll must "
                                       f"be read only by the kernel, got '{name}' read by "
                                       f"{s.name}; leave {name} out of the fusion")
        out = [v.name for v in program.outputs if v.name in before]
        if out:
            raise IllegalTransform(f"{who}: a value computed before a fused AllToAll must be "
                                   f"read only by the kernel, got '{out[0]}' as a program "
                                   f"output; leave {out[0]} out of the fusion")

    @staticmethod
    def _check_collective_rows(program, members, who):
        """A row computation (ReduceAxis) in a fused ReduceScatter / AllGather region reduces
        rows of the collective's dim-0 slices, which the kernel walks (codegen.lower_rows
        refuses any other domain); after a whole AllReduce every rank holds every row."""
        if isinstance(members[0].op, ir.AllReduce):
            return
        env = {v.name: v.type for v in program.all_values()}
        for s in members:
            if not isinstance(s.op, ir.ReduceAxis):
                continue
            t = s.op.input_type(env, who)
            if t.layout != Sliced(0):
                raise IllegalTransform(
                    f"{who}: a row reduction in a fused collective must reduce rows of dim-0 "
                    f"slices (those the collective moves), got {s.name} over a {t.layout} "
                    f"value; leave {s.name} out of the region")

    @staticmethod
    def _check_iteration_space(members, who):
        shapes = {}
        # Computation before a ReduceScatter walks the reduced tensor (the verifier checks its
        # shape, verify._check_prologue); the kernel's space is the reduced slice.
        for s in members[prologue_length(members):]:
            if isinstance(s.op, (ir.Compute, ir.Update, ir.ReduceScatter, ir.AllGather,
                                 ir.Send)):
                t = s.out.type
                if isinstance(s.op, ir.AllGather):
                    continue  # gathers the computed slices: same space as their source
                shapes.setdefault(tuple(t.local_shape()), s.name)
        if len(shapes) > 1:
            (a, na), (b, nb) = list(shapes.items())[:2]
            raise IllegalTransform(
                f"{who}: fused statements must share one iteration space, got {na} over "
                f"{list(a)} and {nb} over {list(b)}")

    def results(self, before, after):
        return self.values[0]


@dataclass(frozen=True, slots=True)
class Overlap(Transform):
    """Overlap a producer with the consumer of its output, chunk by chunk.

    The consumer (a collective, a fused collective or a Send) starts on chunk i as soon as the
    producer (a MatMul, a collective, or a fused kernel) has finished chunk i, so communication
    hides behind computation (CoCoNet's MatMul + AllReduce) or behind other communication (an
    AllReduce and the pipeline's Send). Values do not change; time does.

        y = MatMul(x, W)                         y, s_rs, out_s, out = Overlapped(chunks=4) {
        s_rs, ..., out = FusedAllreduce {...} ==>   y = MatMul(x, W)
                                                    s_rs, ..., out = FusedAllreduce {...} }

    Preconditions: both are top-level statements, adjacent once statements that neither reads
    are moved aside; the consumer reads the producer's output; the pair is one of the forms
    every backend runs (overlap_form: communication after computation, or an AllGather before
    the MatMul that reads it); chunks >= 2.
    """

    producer: str
    consumer: str
    chunks: int = 4
    name: ClassVar[str] = "overlap"

    def rewrite(self, program):
        who = f"overlap({self.producer}, {self.consumer}, chunks={self.chunks})"
        if type(self.chunks) is not int or not 2 <= self.chunks <= MAX_CHUNKS:
            raise IllegalTransform(f"{who}: chunks must be an integer >= 2 and <= {MAX_CHUNKS}, "
                                   f"got {self.chunks!r}; e.g. chunks=4")
        i = top_index(program, self.producer, who)
        j = top_index(program, self.consumer, who)
        if i == j:
            raise IllegalTransform(f"{who}: producer and consumer must be different statements")
        if j < i:
            raise IllegalTransform(f"{who}: the consumer must come after the producer")
        prod, cons = program.stmts[i], program.stmts[j]
        if isinstance(prod.op, ir.Overlapped) or isinstance(cons.op, ir.Overlapped):
            raise IllegalTransform(f"{who}: statements must not already be overlapped")
        if not set(cons.op.operands()) & {v.name for v in prod.outs}:
            raise IllegalTransform(f"{who}: {cons.name} must read the output of {prod.name}, "
                                   "got no dependency; there is nothing to pipeline")
        if not any(isinstance(s.op, ir.COMMUNICATION_OPS)
                   for s in (*prod.leaves(), *cons.leaves())):
            raise IllegalTransform(f"{who}: the producer or the consumer must communicate, got "
                                   f"{prod.op} then {cons.op}")
        form = overlap_form(prod, cons)
        if form is None:
            raise IllegalTransform(
                f"{who}: the pair must be one of the overlaps the backends run "
                f"({OVERLAP_FORMS_TEXT}), got {_kind_text(prod)} then {_kind_text(cons)}; "
                "overlap another pair or leave them sequential")
        stmts = Fuse._make_contiguous(program, [i, j], who)
        k = stmts.index(prod)
        region = ir.Stmt(prod.outs + cons.outs, ir.Overlapped(self.chunks, (prod, cons)),
                         prod.loc)
        return program.with_stmts(stmts[:k] + [region] + stmts[k + 2:])

    def results(self, before, after):
        return self.producer


@dataclass(frozen=True, slots=True)
class CopyEngines(Transform):
    """Move a fused collective's bytes by the GPUs' copy engines instead of SM peer stores.

    The fused kernel's reduce-scatter becomes copy-engine copies of every peer's piece of this
    rank's slice into a local staging buffer, its all-gather copy-engine copies of this rank's
    result into every peer; a kernel without communication reduces and computes on each piece
    once it has arrived, `chunks` pieces per slice, so copies and computation overlap and the
    SMs do no NVLink traffic. (2x H200: copy engines reach 391 GB/s per direction both ways,
    SM stores 365, and keep their rate beside an HBM-bound kernel; benchmarks/gpu/link_probe.py.)

        s_rs, ..., out = FusedAllreduce {...}  ==>  s_rs, ..., out = FusedAllreduce[copy
                                                                      engines, chunks=8] {...}

    Preconditions: a FusedAllreduce, FusedReducescatter or FusedAllgather without a norm or
    reduction inside (one kernel: no cross-rank step between its phases); chunks >= 1.
    """

    region: str
    chunks: int = 8
    name: ClassVar[str] = "copy_engines"

    def rewrite(self, program):
        who = f"copy_engines({self.region}, chunks={self.chunks})"
        if type(self.chunks) is not int or not 1 <= self.chunks <= MAX_CHUNKS:
            raise IllegalTransform(f"{who}: chunks must be an integer >= 1 and <= {MAX_CHUNKS}, "
                                   f"got {self.chunks!r}; e.g. chunks=8")
        i = top_index(program, self.region, who)
        stmt = program.stmts[i]
        op = stmt.op
        if not (isinstance(op, ir.Fused) and op.kind in ("allreduce", "reducescatter",
                                                         "allgather")):
            raise IllegalTransform(f"{who}: the statement must be a fused collective "
                                   f"(FusedAllreduce, FusedReducescatter, FusedAllgather), got "
                                   f"{op}; fuse it first (s.fuse)")
        if prologue_length(op.body):
            raise IllegalTransform(f"{who}: a fused ReduceScatter with computation before it "
                                   f"must push its computed values from the SMs, got "
                                   f"{op.body[0].name} before the ReduceScatter; keep this "
                                   "region on the SMs (design note 78)")
        # An axis reduction needs whole rows in one kernel (a row kernel), not pieces.
        reductions = [s.name for s in op.body
                      if isinstance(s.op, (ir.Norm, ir.ReduceTensor, ir.ReduceAxis))]
        if reductions:
            raise IllegalTransform(f"{who}: a fused collective moved by copy engines must be "
                                   f"one kernel, got the reduction {reductions[0]} inside, "
                                   "which needs a cross-rank step between phases; keep this "
                                   "region on the SMs")
        fused = ir.Fused(op.kind, op.body, "copy", self.chunks)
        stmts = list(program.stmts)
        stmts[i] = ir.Stmt(stmt.outs, fused, stmt.loc)
        return program.with_stmts(stmts)

    def results(self, before, after):
        return self.region


@dataclass(frozen=True, slots=True)
class DeadCodeElimination(Transform):
    """Remove statements whose values no output needs.  Precondition: none (always legal)."""

    name: ClassVar[str] = "dce"

    def rewrite(self, program):
        return dead_code_eliminated(program)



def _substitute(expr: ir.Expr, name: str, value: ir.Expr) -> ir.Expr:
    """`expr` with every Ref(name) replaced by `value`."""
    match expr:
        case ir.Ref(n):
            return value if n == name else expr
        case ir.Const() | ir.SizeValue():
            return expr
        case ir.Binary(op, a, b):
            return ir.Binary(op, _substitute(a, name, value), _substitute(b, name, value))
        case ir.Where(c, a, b):
            return ir.Where(*(_substitute(e, name, value) for e in (c, a, b)))
        case ir.Unary(fn, a):
            return ir.Unary(fn, _substitute(a, name, value))
        case ir.Cast(dtype, a):
            return ir.Cast(dtype, _substitute(a, name, value))
        case ir.Dropout(p, seed, a):
            return ir.Dropout(p, seed, _substitute(a, name, value))
    raise TypeError(f"not an expression: {expr!r}")


def _inline_scalars(program: ir.Program, values: tuple[str, ...]):
    """Inline each scalar Compute among `values` that only other `values` read (and that is no
    output) into its readers: (program without it, the remaining values)."""
    outputs = {v.name for v in program.outputs}
    kept = list(values)
    for v in values:
        try:
            s = program.stmt_defining(v)
        except KeyError:
            continue
        if not (isinstance(s.op, ir.Compute) and len(s.outs) == 1 and s.out.type.rank == 0
                and v not in outputs):
            continue
        readers = [r for r in program.stmts if v in r.op.operands()]
        if not readers or any(isinstance(r.op, ir.REGION_OPS) or r.out.name not in values
                              or not isinstance(r.op, ir.ELEMENTWISE_OPS) for r in readers):
            continue
        inline = s.op.expr if s.out.type.dtype.name == "f32" else ir.Cast(s.out.type.dtype,
                                                                          s.op.expr)
        stmts = []
        for r in program.stmts:
            if r is s:
                continue
            if r in readers:
                op = (ir.Compute(_substitute(r.op.expr, v, inline)) if isinstance(r.op, ir.Compute)
                      else ir.Update(r.op.target, _substitute(r.op.expr, v, inline)))
                r = ir.Stmt(r.outs, op, r.loc)
            stmts.append(r)
        program = program.with_stmts(stmts)
        kept.remove(v)
    return program, tuple(kept)


# ---------------------------------------------------------------- overlap forms
# What an Overlapped region may hold: the pairs every backend runs chunk by chunk (codegen's
# overlap_steps dispatches on the same names, so an overlap that `check` accepts is generated).


def _kind_text(stmt: ir.Stmt) -> str:
    op = stmt.op
    if isinstance(op, ir.Fused):
        return f"a fused {op.kind}" + (" with axis reductions" if _has_rows(stmt) else "")
    return type(op).__name__


def _has_rows(stmt: ir.Stmt) -> bool:
    return any(isinstance(s.op, ir.ReduceAxis) for s in stmt.leaves())


def _elementwise(stmt: ir.Stmt) -> bool:
    """Compute/Update, or a fused compute region of them (one streaming kernel)."""
    op = stmt.op
    if isinstance(op, ir.ELEMENTWISE_OPS):
        return True
    return (isinstance(op, ir.Fused) and op.kind == "compute"
            and all(isinstance(s.op, ir.ELEMENTWISE_OPS) for s in op.body))


def overlap_form(prod: ir.Stmt, cons: ir.Stmt) -> str | None:
    """The name of the overlap a producer/consumer pair makes, or None where no backend
    pipelines it:

    matmul-allreduce        MatMul; AllReduce of its output, or a fused AllReduce (also one
                            holding axis reductions: AllReduce + residual + LayerNorm)
    matmul-reducescatter    MatMul; ReduceScatter of its output over rows (sequence parallel)
    allgather-matmul        AllGather over rows; a MatMul of what it gathered (sequence
                            parallel: the matmul starts on the first rank's rows)
    compute-collective      an elementwise kernel; an AllReduce, Broadcast or Reduce of its
                            output (a parameter server's update and its Broadcast)
    allreduce-send          AllReduce; a fused Send of what reads it (pipeline)
    send-allgather          a fused Send; an AllGather of what it sent (pipeline)
    alltoall-matmul         AllToAll over rows; a MatMul of what it exchanged (an MoE's
                            dispatch and the expert's first GEMM, chunk by chunk)
    matmul-alltoall         MatMul; an AllToAll of its output over rows (the expert's last
                            GEMM and the combine)
    """
    pop, cop = prod.op, cons.op
    outs = {v.name for v in prod.outs}
    if isinstance(pop, ir.MatMul):
        if (isinstance(cop, ir.Fused) and cop.kind == "allreduce" and cop.engine == "sm"
                and isinstance(cop.body[0].op, ir.ReduceScatter)
                and not any(isinstance(s.op, (ir.Norm, ir.ReduceTensor)) for s in cons.leaves())):
            # the reduce-scatter form, chunked by rows (a fused whole AllReduce, one-shot or
            # Lamport, synchronizes the whole tensor at once; a norm needs every chunk before
            # what it scales: neither pipelines)
            return "matmul-allreduce"
        if isinstance(cop, ir.AllReduce) and cop.x in outs and cop.sub is None:
            return "matmul-allreduce"
        if isinstance(cop, ir.ReduceScatter) and cop.x in outs and cop.dim == 0 \
                and cop.sub is None:
            return "matmul-reducescatter"
        if isinstance(cop, ir.AllToAll) and cop.x in outs and cop.dim == 0:
            return "matmul-alltoall"
        return None
    if isinstance(pop, ir.AllToAll) and pop.dim == 0 and isinstance(cop, ir.MatMul) \
            and cop.a in outs:
        return "alltoall-matmul"
    if isinstance(pop, ir.AllGather) and isinstance(cop, ir.MatMul) and cop.a in outs \
            and pop.sub is None:
        return "allgather-matmul"
    if _elementwise(prod) and isinstance(cop, (ir.AllReduce, ir.Broadcast, ir.Reduce)) \
            and cop.x in outs and getattr(cop, "sub", None) is None:
        return "compute-collective"
    if isinstance(pop, ir.AllReduce) and isinstance(cop, ir.Fused) and cop.kind == "send":
        return "allreduce-send"
    if (isinstance(pop, ir.Fused) and pop.kind == "send" and isinstance(cop, ir.AllGather)
            and cop.x == prod.outs[-1].name):
        return "send-allgather"
    return None


OVERLAP_FORMS_TEXT = ("a MatMul then an AllReduce, a fused AllReduce or a ReduceScatter of its "
                      "output; an AllGather then a MatMul of what it gathered; an elementwise "
                      "kernel then an AllReduce, Broadcast or Reduce of its output; an "
                      "AllReduce then a fused Send; a fused Send then an AllGather of what it "
                      "sent; an AllToAll over rows then a MatMul of what it exchanged; a "
                      "MatMul then an AllToAll of its output over rows")


def _short(op, limit: int = 80) -> str:
    """An op as `show` prints it, cut to `limit` characters for a message."""
    text = str(op)
    return text if len(text) <= limit else text[:limit - 3] + "..."
