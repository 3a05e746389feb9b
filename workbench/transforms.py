"""Semantics-preserving transforms: pure functions Program -> Program.

Each transform is a frozen dataclass with a kebab-case `name` and its parameters as fields, and
    check(program) -> Legality    ok, or the reason it does not apply (never raises)
    apply(program) -> Program     the rewritten, verified program (raises IllegalTransform)
Parameters refer to values by name, so a transform serialises to JSON (`to_json`) and replays.

The CoCoNet set, on SGD (`g1 = AllReduce(Sum, g); w1 = Update(w, w - lr * g1)`):

    split(g1)                 g1_rs = ReduceScatter(Sum, g)      ; Sliced(0)
                              g1 = AllGather(g1_rs)
                              w1 = Update(w, w - lr * g1)
    reorder(w1, before=g1)    g1_rs = ReduceScatter(Sum, g)
                              w1_s = Update(w, w - lr * g1_rs)   ; the update runs on slices
                              w1 = AllGather(w1_s)
    fuse(g1_rs, w1_s, w1)     g1_rs, w1_s, w1 = FusedAllreduce { ...the three above... }

plus as-slice (state that each rank only needs a slice of), overlap (producer/consumer at chunk
granularity) and dead-code elimination. Every transform is checked against the reference
interpreter in tests/test_transforms.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import ClassVar

from workbench import ir
from workbench.errors import IllegalTransform, WorkbenchError
from workbench.types import LocalLayout, Replicated, ReplicatedLayout, Sliced
from workbench.verify import fused_kind_of, verify

# ---------------------------------------------------------------- shared helpers


@dataclass(frozen=True, slots=True)
class Legality:
    """Whether a transform applies; `reason` says why not (which op, which precondition)."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def _fresh(program: ir.Program, base: str, taken: set[str] | None = None) -> str:
    names = {v.name for v in program.all_values()} | {v.name for s in program.leaves()
                                                      for v in s.outs}
    names |= taken or set()
    name, i = base, 1
    while name in names:
        i += 1
        name = f"{base}{i}"
    return name


def _top_index(program: ir.Program, name: str, who: str) -> int:
    for i, s in enumerate(program.stmts):
        if any(v.name == name for v in s.outs):
            return i
    if any(v.name == name for v in program.inputs):
        raise IllegalTransform(f"{who}: '{name}' must be a statement, got a program input")
    raise IllegalTransform(f"{who}: '{name}' must be a value of program {program.name}, got no "
                           f"such value")


def _plain(program: ir.Program, name: str, who: str) -> tuple[int, ir.Stmt]:
    """Index and statement of a plain (not yet fused) top-level statement defining `name`."""
    i = _top_index(program, name, who)
    stmt = program.stmts[i]
    if isinstance(stmt.op, ir.REGION_OPS):
        raise IllegalTransform(f"{who}: '{name}' must be a plain statement, got it inside "
                               f"{stmt.op}; apply this transform before fusing")
    return i, stmt


def _readers(stmts, name: str) -> list[int]:
    return [i for i, s in enumerate(stmts) if name in s.op.operands()]


def _retype(stmt: ir.Stmt, env: dict, name: str | None = None) -> ir.Stmt:
    """The statement with its result type re-inferred (after its operands changed layout)."""
    out = stmt.out
    t = stmt.op.infer(env, f"{out.name} = {stmt.op}")
    return ir.Stmt((ir.Value(name or out.name, t),), stmt.op, stmt.loc)


def _env_before(program: ir.Program, index: int) -> dict:
    env = {v.name: v.type for v in program.inputs}
    for s in program.stmts[:index]:
        for leaf in s.leaves():
            env[leaf.out.name] = leaf.out.type
    return env


def dead_code_eliminated(program: ir.Program) -> ir.Program:
    """Drop top-level statements whose values nothing reads (regions only when wholly dead)."""
    live = {v.name for v in program.outputs}
    kept = []
    for stmt in reversed(program.stmts):
        if any(v.name in live for v in stmt.outs):
            kept.append(stmt)
            live.update(stmt.op.operands())
    return program.with_stmts(reversed(kept))


class Transform:
    """Base of every transform: `check` is `apply` with the exception turned into a reason."""

    name: ClassVar[str]

    def rewrite(self, program: ir.Program) -> ir.Program:  # pragma: no cover - abstract
        raise NotImplementedError

    def apply(self, program: ir.Program) -> ir.Program:
        """The rewritten program, verified; raises IllegalTransform when a precondition fails."""
        try:
            out = self.rewrite(program)
        except IllegalTransform:
            raise
        except WorkbenchError as e:  # a type rule refused the rewritten statement
            raise IllegalTransform(f"{self.name}: {e}") from None
        return verify(out)

    def check(self, program: ir.Program) -> Legality:
        """ok, or the reason this transform does not apply to `program`."""
        try:
            self.apply(program)
        except WorkbenchError as e:
            return Legality(False, str(e).split("\n\nin program:")[0])
        return Legality(True)

    def results(self, before: ir.Program, after: ir.Program):
        """What a Scheduler call returns after this transform (names of new values)."""
        return None

    def to_json(self) -> dict:
        return {"transform": self.name, **asdict(self)}

    def __str__(self) -> str:
        args = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"{self.name}({args})"


# ---------------------------------------------------------------- split


@dataclass(frozen=True, slots=True)
class Split(Transform):
    """AllReduce -> ReduceScatter + AllGather.

    Preconditions: `allreduce` names a plain AllReduce whose input has a dim provably divisible
    by the group size (the first such dim is scattered).

        g1 = AllReduce(Sum, g)     ==>   g1_rs = ReduceScatter(Sum, g)   : Sliced(0)
                                         g1 = AllGather(g1_rs)           : Replicated
    """

    allreduce: str
    name: ClassVar[str] = "split"

    def rewrite(self, program):
        who = f"split({self.allreduce})"
        i, stmt = _plain(program, self.allreduce, who)
        if not isinstance(stmt.op, ir.AllReduce):
            raise IllegalTransform(f"{who}: '{self.allreduce}' must be an AllReduce, got {stmt.op}")
        x = program.value(stmt.op.x)
        dims = [d for d, n in enumerate(x.type.shape)
                if ir.proven_divisible(n, x.type.group.size, program.facts)]
        if not dims:
            raise IllegalTransform(
                f"{who}: a dim of {x.name} {list(x.type.shape)} must be provably divisible by the "
                f"group size {x.type.group.size} to scatter it, got none; declare a size with "
                "Size(..., multiple_of=P)")
        rs_name = _fresh(program, f"{self.allreduce}_rs")
        rs_op = ir.ReduceScatter(stmt.op.op, x.name, dims[0])
        env = _env_before(program, i)
        rs = ir.Stmt((ir.Value(rs_name, rs_op.infer(env, who)),), rs_op, stmt.loc)
        env[rs_name] = rs.out.type
        ag = _retype(ir.Stmt(stmt.outs, ir.AllGather(rs_name), stmt.loc), env)
        return program.with_stmts(program.stmts[:i] + (rs, ag) + program.stmts[i + 1:])

    def results(self, before, after):
        ag = after.stmts[_top_index(after, self.allreduce, "split")]
        return ag.op.x, self.allreduce


# ---------------------------------------------------------------- reorder


_REORDERABLE = (ir.Compute, ir.Update, ir.Norm, ir.ReduceTensor, ir.Send)


@dataclass(frozen=True, slots=True)
class Reorder(Transform):
    """Move computations that read an AllGather's output ahead of the gather, onto slices.

    Each statement in `values` (in program order) is rewritten to read the sliced values
    instead of gathered ones, and Replicated operands are read on the rank's own slice. An
    elementwise result is gathered right where it is first needed, keeping its name, so the
    program's outputs do not change; a norm over slices all-reduces its partial sums instead;
    a Send sends the slice and the gather runs in the receiving group. The first AllGather
    becomes dead and is removed.

        g1_rs = ReduceScatter(Sum, g)          g1_rs = ReduceScatter(Sum, g)
        g1 = AllGather(g1_rs)           ==>    w1_s = Update(w, w - lr * g1_rs) : Sliced(0)
        w1 = Update(w, w - lr * g1)            w1 = AllGather(w1_s)

    Preconditions: `before` is a plain AllGather; each value is a plain Compute, Update, Norm,
    ReduceTensor or Send; none reads a Local tensor (it has no slice to take); together they
    read `before`.
    """

    values: tuple[str, ...]
    before: str
    name: ClassVar[str] = "reorder"

    def rewrite(self, program):
        who = f"reorder({', '.join(self.values)}, before={self.before})"
        _, ag = _plain(program, self.before, who)
        if not isinstance(ag.op, ir.AllGather):
            raise IllegalTransform(f"{who}: '{self.before}' must be an AllGather (split the "
                                   f"AllReduce first), got {ag.op}")
        gathered = {self.before: ag.op.x}  # gathered name -> its sliced source
        sliced_dim = program.value(ag.op.x).type.layout.dim
        stmts = list(program.stmts)
        read_before = False
        for name in self.values:
            i = _top_index(program.with_stmts(stmts), name, who)
            stmt = stmts[i]
            if isinstance(stmt.op, ir.REGION_OPS) or not isinstance(stmt.op, _REORDERABLE):
                raise IllegalTransform(f"{who}: '{name}' must be a plain elementwise "
                                       f"computation, norm or Send, got {stmt.op}")
            read_before |= any(o in gathered for o in stmt.op.operands())
            new, extra = self._on_slices(program.with_stmts(stmts), i, gathered, sliced_dim, who)
            stmts[i:i + 1] = new
            for gname, src in extra:  # place each new gather just before its first reader
                gstmt = self._gather(program.with_stmts(stmts), gname, src)
                readers = _readers(stmts, gname)
                stmts.insert(readers[0] if readers else len(stmts), gstmt)
                gathered[gname] = src
        if not read_before:
            raise IllegalTransform(f"{who}: the statements must read the gathered value "
                                   f"'{self.before}', got none that does")
        return dead_code_eliminated(program.with_stmts(stmts))

    @staticmethod
    def _gather(program, gname, src):
        t = program.value(src).type.with_(layout=Replicated)
        return ir.Stmt((ir.Value(gname, t),), ir.AllGather(src),
                       program.stmt_defining(src).loc)

    def _on_slices(self, program, i, gathered, dim, who):
        """The statement at i rewritten on slices: (new statements, [(gathered name, src)])."""
        stmt = program.stmts[i]
        env = _env_before(program, i)
        mapping = {}
        for o in stmt.op.operands():
            t = env[o]
            if o in gathered:
                mapping[o] = gathered[o]
            elif isinstance(t.layout, LocalLayout) and t.rank > 0:
                raise IllegalTransform(
                    f"{who}: {stmt.name} = {stmt.op} reads '{o}', which is Local: a per-rank "
                    "tensor has no slice to take; reduce it (ReduceScatter) first")
        op = stmt.op.rename(mapping)
        out = stmt.out
        if isinstance(op, (ir.Norm, ir.ReduceTensor)):
            x = env[op.x]
            if isinstance(x.layout, ReplicatedLayout):
                view = _fresh(program, f"{op.x}_slice")
                slice_op = ir.Slice(op.x, dim)
                env[view] = slice_op.infer(env, who)
                op = op.rename({op.x: view})
                view_stmt = ir.Stmt((ir.Value(view, env[view]),), slice_op, stmt.loc)
                return [view_stmt, _retype(ir.Stmt(stmt.outs, op, stmt.loc), env)], []
            return [_retype(ir.Stmt(stmt.outs, op, stmt.loc), env)], []
        sliced_name = _fresh(program, f"{out.name}_s")
        new = _retype(ir.Stmt(stmt.outs, op, stmt.loc), env, name=sliced_name)
        if not isinstance(new.out.type.layout, Sliced):
            raise IllegalTransform(f"{who}: {stmt.name} = {stmt.op} must run on slices after "
                                   f"the rewrite, got layout {new.out.type.layout}")
        # Gathered under the old name where first needed; for a Send, the receiving group
        # gathers the slices it was sent.
        return [new], [(out.name, sliced_name)]

    def results(self, before, after):
        """The sliced value of each moved statement, named as `rewrite` names it (a norm keeps
        its name: it stays Replicated)."""
        out = []
        for v in self.values:
            op = before.stmt_defining(v).op
            out.append(v if isinstance(op, (ir.Norm, ir.ReduceTensor)) else _fresh(before,
                                                                                 f"{v}_s"))
        return tuple(out)


# ---------------------------------------------------------------- as-slice


@dataclass(frozen=True, slots=True)
class AsSlice(Transform):
    """Keep optimizer state Sliced: each rank stores and updates only its own slice.

    For each input tensor named in `tensors` (Replicated), the input becomes Sliced(0) and every
    output that is an in-place Update chain of it is returned as its slice instead of being
    gathered (the gather becomes dead). Logical values are unchanged, so the program computes
    the same function; what changes is that no rank holds the whole state (ZeRO-style).

        in  m: f32[N] Replicated             in  m: f32[N] Sliced(0)
        m1_s = Update(m, ...) : Sliced(0)    m1_s = Update(m, ...) : Sliced(0)
        m1 = AllGather(m1_s)           ==>   out ..., m1_s, ...
        out ..., m1, ...

    Preconditions: each tensor is a Replicated input whose dim 0 is provably divisible by the
    group size, and every statement that reads it still type-checks when it is Sliced.
    """

    tensors: tuple[str, ...]
    name: ClassVar[str] = "as-slice"

    def rewrite(self, program):
        who = f"as-slice({', '.join(self.tensors)})"
        inputs = list(program.inputs)
        outputs = list(program.outputs)
        by_name = {v.name: k for k, v in enumerate(inputs)}
        for name in self.tensors:
            if name not in by_name:
                raise IllegalTransform(f"{who}: '{name}' must be a program input, got none")
            v = inputs[by_name[name]]
            if not isinstance(v.type.layout, ReplicatedLayout) or v.type.rank == 0:
                raise IllegalTransform(f"{who}: '{name}' must be a Replicated tensor, got "
                                       f"{v.type}")
            inputs[by_name[name]] = ir.Value(name, v.type.with_(layout=Sliced(0)))
        # Outputs that gather an Update chain of a sliced tensor are returned as the slice.
        for k, out in enumerate(outputs):
            stmt = _defining_leaf(program, out.name)
            if isinstance(stmt.op, ir.AllGather):
                src = _defining_leaf(program, stmt.op.x)
                if isinstance(src.op, ir.Update) and _update_root(program, src) in self.tensors:
                    outputs[k] = src.out
        stmts = _retyped_all(program, inputs, who)
        new = program.with_stmts(stmts, outputs=[_find(stmts, inputs, o.name)
                                                 for o in outputs], inputs=inputs)
        return dead_code_eliminated(new)


def _defining_leaf(program, name):
    for s in program.leaves():
        if any(v.name == name for v in s.outs):
            return s
    return ir.Stmt((program.value(name),), ir.Compute(ir.Ref(name)))  # an input: no rule


def _update_root(program, stmt):
    """The input an in-place Update chain starts from."""
    while isinstance(stmt.op, ir.Update):
        target = stmt.op.target
        if any(v.name == target for v in program.inputs):
            return target
        stmt = _defining_leaf(program, target)
    return None


def _retyped_all(program, inputs, who):
    """Re-infer every statement's type in order (inputs changed layout)."""
    env = {v.name: v.type for v in inputs}

    def redo(stmt):
        if isinstance(stmt.op, ir.REGION_OPS):
            body = tuple(redo(s) for s in stmt.op.body)
            op = (ir.Fused(stmt.op.kind, body) if isinstance(stmt.op, ir.Fused)
                  else ir.Overlapped(stmt.op.chunks, body))
            return ir.Stmt(tuple(v for s in body for v in s.outs), op, stmt.loc)
        try:
            new = _retype(stmt, env)
        except WorkbenchError as e:
            raise IllegalTransform(f"{who}: {e}") from None
        env[new.out.name] = new.out.type
        return new

    return [redo(s) for s in program.stmts]


def _find(stmts, inputs, name):
    for v in inputs:
        if v.name == name:
            return v
    for s in stmts:
        for leaf in s.leaves():
            if leaf.out.name == name:
                return leaf.out
    raise KeyError(name)


# ---------------------------------------------------------------- fuse


@dataclass(frozen=True, slots=True)
class Fuse(Transform):
    """Fuse statements into one kernel; the kind follows from the pattern (see ir.Fused):
    ReduceScatter + computation + AllGather becomes a FusedAllreduce, consecutive elementwise
    statements one FusedCompute, computation + Send one FusedSend, and so on.

    Statements in between that neither read nor feed the fused ones are moved out of the way;
    otherwise the fusion is illegal. Fused computation must share one iteration space (the
    same local shape), since one kernel walks it once.
    """

    values: tuple[str, ...]
    kind: str | None = None
    name: ClassVar[str] = "fuse"

    def rewrite(self, program):
        who = f"fuse({', '.join(self.values)})"
        if len(self.values) < 2:
            raise IllegalTransform(f"{who}: fusion needs at least 2 statements, got "
                                   f"{len(self.values)}")
        idx = {_plain(program, v, who)[0] for v in self.values}
        # Slice views that feed a member ride along: they are offsets, not kernels.
        read = {o for i in idx for o in program.stmts[i].op.operands()}
        idx |= {k for k in range(min(idx), max(idx))
                if isinstance(program.stmts[k].op, ir.Slice) and program.stmts[k].out.name in read}
        idx = sorted(idx)
        members = [program.stmts[i] for i in idx]
        stmts = self._make_contiguous(program, idx, who)
        kind = fused_kind_of(members)
        if kind is None:
            ops = ", ".join(type(s.op).__name__ for s in members)
            raise IllegalTransform(
                f"{who}: statements [{ops}] match no fused kernel; fuse ReduceScatter + "
                "computation + AllGather, consecutive elementwise statements, or computation + "
                "Send (see ir.Fused)")
        if self.kind is not None and self.kind != kind:
            raise IllegalTransform(f"{who}: the statements form a fused {kind}, got kind="
                                   f"{self.kind!r}")
        self._check_iteration_space(members, who)
        first = stmts.index(members[0])
        region = ir.Stmt(tuple(v for s in members for v in s.outs), ir.Fused(kind, tuple(members)),
                         members[0].loc)
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
    def _check_iteration_space(members, who):
        shapes = {}
        for s in members:
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


# ---------------------------------------------------------------- overlap


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
    are moved aside; the consumer reads the producer's output and communicates; chunks >= 2.
    """

    producer: str
    consumer: str
    chunks: int = 4
    name: ClassVar[str] = "overlap"

    def rewrite(self, program):
        who = f"overlap({self.producer}, {self.consumer}, chunks={self.chunks})"
        if self.chunks < 2:
            raise IllegalTransform(f"{who}: chunks must be >= 2, got {self.chunks}")
        i = _top_index(program, self.producer, who)
        j = _top_index(program, self.consumer, who)
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
        if not any(isinstance(s.op, ir.COMMUNICATION_OPS) for s in cons.leaves()):
            raise IllegalTransform(f"{who}: the consumer must communicate, got {cons.op}")
        stmts = Fuse._make_contiguous(program, [i, j], who)
        k = stmts.index(prod)
        region = ir.Stmt(prod.outs + cons.outs, ir.Overlapped(self.chunks, (prod, cons)),
                         prod.loc)
        return program.with_stmts(stmts[:k] + [region] + stmts[k + 2:])

    def results(self, before, after):
        return self.producer


# ---------------------------------------------------------------- copy engines


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
        if not isinstance(self.chunks, int) or self.chunks < 1:
            raise IllegalTransform(f"{who}: chunks must be a positive integer, got "
                                   f"{self.chunks!r}")
        i = _top_index(program, self.region, who)
        stmt = program.stmts[i]
        op = stmt.op
        if not (isinstance(op, ir.Fused) and op.kind in ("allreduce", "reducescatter",
                                                         "allgather")):
            raise IllegalTransform(f"{who}: the statement must be a fused collective "
                                   f"(FusedAllreduce, FusedReducescatter, FusedAllgather), got "
                                   f"{op}; fuse it first (s.fuse)")
        reductions = [s.name for s in op.body
                      if isinstance(s.op, (ir.Norm, ir.ReduceTensor))]
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


# ---------------------------------------------------------------- dead code


@dataclass(frozen=True, slots=True)
class DeadCodeElimination(Transform):
    """Remove statements whose values no output needs.  Precondition: none (always legal)."""

    name: ClassVar[str] = "dce"

    def rewrite(self, program):
        return dead_code_eliminated(program)


TRANSFORMS = {t.name: t for t in (Split, Reorder, AsSlice, Fuse, Overlap, CopyEngines,
                                  DeadCodeElimination)}


def transform_from_json(data: dict) -> Transform:
    """Rebuild a transform from `to_json()` output (tuples come back from JSON lists)."""
    data = dict(data)
    name = data.pop("transform", None)
    if name not in TRANSFORMS:
        raise WorkbenchError(f"transform must be one of {sorted(TRANSFORMS)}, got {name!r}")
    cls = TRANSFORMS[name]
    args = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    try:
        return cls(**args)
    except TypeError as e:
        raise WorkbenchError(f"transform {name} record must have fields "
                             f"{[f.name for f in fields(cls)]}, got {sorted(data)}: {e}") from None
