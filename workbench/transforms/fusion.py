"""The transforms that make kernels: fuse (consecutive statements into one kernel, computation
into a collective), overlap (producer and consumer chunk by chunk), copy engines (a fused
collective's bytes moved by copy engines), and dead-code elimination.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from workbench import ir
from workbench.errors import IllegalTransform
from workbench.transforms.base import Transform, dead_code_eliminated, plain_stmts, top_index
from workbench.verify import fused_kind_of


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
        idx = {plain_stmts(program, v, who)[0] for v in self.values}
        # Slice views that feed a member ride along: they are offsets, not kernels.
        read = {o for i in idx for o in program.stmts[i].op.operands()}
        idx |= {k for k in range(min(idx), max(idx))
                if isinstance(program.stmts[k].op, ir.Slice) and program.stmts[k].out.name in read}
        idx = sorted(idx)
        members = [program.stmts[i] for i in idx]
        stmts = self._make_contiguous(program, idx, who)
        first = stmts.index(members[0])
        members = self._gathers_last(members)
        stmts[first:first + len(members)] = members
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
    def _gathers_last(members):
        """The members with the AllGathers that no computation member reads moved to the end
        (program order kept otherwise): a gather placed before an unrelated update (reorder
        puts each gather before the first statement that read the value) may run after it,
        which the fused patterns need (computation, then gathers)."""
        gathers = [s for s in members if isinstance(s.op, ir.AllGather)]
        others = [s for s in members if not isinstance(s.op, ir.AllGather)]
        gathered = {s.out.name for s in gathers}
        if any(gathered & set(s.op.operands()) for s in others):
            return members
        return others + gathers

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
        if not any(isinstance(s.op, ir.COMMUNICATION_OPS) for s in cons.leaves()):
            raise IllegalTransform(f"{who}: the consumer must communicate, got {cons.op}")
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
        if not isinstance(self.chunks, int) or self.chunks < 1:
            raise IllegalTransform(f"{who}: chunks must be a positive integer, got "
                                   f"{self.chunks!r}")
        i = top_index(program, self.region, who)
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


@dataclass(frozen=True, slots=True)
class DeadCodeElimination(Transform):
    """Remove statements whose values no output needs.  Precondition: none (always legal)."""

    name: ClassVar[str] = "dce"

    def rewrite(self, program):
        return dead_code_eliminated(program)

