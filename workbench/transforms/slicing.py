"""The transforms that put computation on slices: split (AllReduce -> ReduceScatter +
AllGather), reorder (computation moves ahead of the AllGather, onto slices), and as-slice
(state each rank keeps only a slice of).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from workbench import ir
from workbench.errors import IllegalTransform, WorkbenchError
from workbench.transforms.base import (
    Transform,
    dead_code_eliminated,
    env_before,
    fresh_name,
    plain_stmts,
    readers_of,
    retyped,
    top_index,
)
from workbench.types import LocalLayout, NodeSliced, Replicated, ReplicatedLayout, Sliced


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
        i, stmt = plain_stmts(program, self.allreduce, who)
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
        rs_name = fresh_name(program, f"{self.allreduce}_rs")
        rs_op = ir.ReduceScatter(stmt.op.op, x.name, dims[0])
        env = env_before(program, i)
        rs = ir.Stmt((ir.Value(rs_name, rs_op.infer(env, who)),), rs_op, stmt.loc)
        env[rs_name] = rs.out.type
        ag = retyped(ir.Stmt(stmt.outs, ir.AllGather(rs_name), stmt.loc), env)
        return program.with_stmts(program.stmts[:i] + (rs, ag) + program.stmts[i + 1:])

    def results(self, before, after):
        ag = after.stmts[top_index(after, self.allreduce, "split")]
        return ag.op.x, self.allreduce


REORDERABLE = (ir.Compute, ir.Update, ir.Norm, ir.ReduceTensor, ir.ReduceAxis, ir.Send)


@dataclass(frozen=True, slots=True)
class Reorder(Transform):
    """Move computations that read an AllGather's output ahead of the gather, onto slices.

    Each statement in `values` (in program order) is rewritten to read the sliced values
    instead of gathered ones, and Replicated operands are read on the rank's own slice. An
    elementwise result (or a per-row reduction, ReduceAxis over an axis other than the
    Sliced one: each rank reduces its own rows) is gathered right where it is first needed,
    keeping its name, so the
    program's outputs do not change; a norm over slices all-reduces its partial sums instead;
    a Send sends the slice and the gather runs in the receiving group. The first AllGather
    becomes dead and is removed.

        g1_rs = ReduceScatter(Sum, g)          g1_rs = ReduceScatter(Sum, g)
        g1 = AllGather(g1_rs)           ==>    w1_s = Update(w, w - lr * g1_rs) : Sliced(0)
        w1 = Update(w, w - lr * g1)            w1 = AllGather(w1_s)

    Preconditions: `before` is a plain AllGather; each value is a plain Compute, Update, Norm,
    ReduceTensor, ReduceAxis (not over the Sliced dim) or Send; none reads a Local tensor (it
    has no slice to take); together they read `before`.
    """

    values: tuple[str, ...]
    before: str
    name: ClassVar[str] = "reorder"

    def rewrite(self, program):
        who = f"reorder({', '.join(self.values)}, before={self.before})"
        _, ag = plain_stmts(program, self.before, who)
        if not isinstance(ag.op, ir.AllGather):
            raise IllegalTransform(f"{who}: '{self.before}' must be an AllGather (split the "
                                   f"AllReduce first), got {ag.op}")
        gathered = {self.before: ag.op.x}  # gathered name -> its sliced source
        sliced_dim = program.value(ag.op.x).type.layout.dim
        stmts = list(program.stmts)
        read_before = False
        for name in self.values:
            i = top_index(program.with_stmts(stmts), name, who)
            stmt = stmts[i]
            if isinstance(stmt.op, ir.REGION_OPS) or not isinstance(stmt.op, REORDERABLE):
                raise IllegalTransform(f"{who}: '{name}' must be a plain elementwise "
                                       f"computation, norm, axis reduction or Send, got "
                                       f"{stmt.op}")
            read_before |= any(o in gathered for o in stmt.op.operands())
            hidden = _left_behind(stmts, stmt, gathered, set(self.values))
            if hidden:
                names = ", ".join(hidden)
                order = [v for s in stmts for v in (s.outs[0].name,)
                         if v in set(self.values) | set(hidden)]
                raise IllegalTransform(
                    f"{who}: {stmt.name} reads {names}, computed from the gathered value "
                    f"after it and not moved (the gather would stay for them); name them "
                    f"too: reorder({', '.join(order)}, before={self.before})")
            new, extra = self._on_slices(program.with_stmts(stmts), i, gathered, sliced_dim, who)
            stmts[i:i + 1] = new
            for gname, src in extra:  # place each new gather just before its first reader
                gstmt = self._gather(program.with_stmts(stmts), gname, src, ag.op.sub)
                readers = readers_of(stmts, gname)
                stmts.insert(readers[0] if readers else len(stmts), gstmt)
                gathered[gname] = src
        if not read_before:
            raise IllegalTransform(f"{who}: the statements must read the gathered value "
                                   f"'{self.before}', got none that does")
        return dead_code_eliminated(program.with_stmts(stmts))

    @staticmethod
    def _gather(program, gname, src, sub=None):
        """The gather of `src` under `gname`, over the sub-group the first gather ran on (a
        node-level split gathers inside each node)."""
        t = program.value(src).type.with_(layout=Replicated)
        return ir.Stmt((ir.Value(gname, t),), ir.AllGather(src, sub),
                       program.stmt_defining(src).loc)

    def _on_slices(self, program, i, gathered, dim, who):
        """The statement at i rewritten on slices: (new statements, [(gathered name, src)])."""
        stmt = program.stmts[i]
        env = env_before(program, i)
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
        if isinstance(op, ir.ReduceAxis) and op.input_type(env, who).layout == Sliced(op.axis):
            # on slices of the reduced dim each rank would reduce part of every row: a partial,
            # not the row's value (the program reduces whole rows)
            raise IllegalTransform(
                f"{who}: {stmt.name} = {stmt.op} must not move onto slices of the dim it reduces "
                f"(axis {op.axis}: each rank would hold a partial of every row), got a split "
                f"that scatters dim {op.axis}; leave {stmt.name} after the gather")
        if isinstance(op, (ir.Norm, ir.ReduceTensor)):
            x = env[op.x]
            if isinstance(x.layout, NodeSliced) or any(
                    isinstance(env[o].layout, NodeSliced) for o in gathered.values()):
                raise IllegalTransform(f"{who}: {stmt.name} = {stmt.op} must not move onto "
                                       "node-level slices (a norm over them would need a "
                                       "reduction inside each node); reorder only "
                                       "elementwise statements after a hierarchical split")
            if isinstance(x.layout, ReplicatedLayout):
                view = fresh_name(program, f"{op.x}_slice")
                slice_op = ir.Slice(op.x, dim)
                env[view] = slice_op.infer(env, who)
                op = op.rename({op.x: view})
                view_stmt = ir.Stmt((ir.Value(view, env[view]),), slice_op, stmt.loc)
                return [view_stmt, retyped(ir.Stmt(stmt.outs, op, stmt.loc), env)], []
            return [retyped(ir.Stmt(stmt.outs, op, stmt.loc), env)], []
        if out.type.rank == 0 and not any(o in gathered for o in stmt.op.operands()):
            # A scalar (a clip factor from a norm that now runs on slices): nothing to slice,
            # it stays where it is, Replicated, under its name.
            return [retyped(ir.Stmt(stmt.outs, op, stmt.loc), env)], []
        sliced_name = fresh_name(program, f"{out.name}_s")
        new = retyped(ir.Stmt(stmt.outs, op, stmt.loc), env, name=sliced_name)
        if not isinstance(new.out.type.layout, (Sliced, NodeSliced)):
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
            stmt = before.stmt_defining(v)
            stays = (isinstance(stmt.op, (ir.Norm, ir.ReduceTensor)) or after is not None
                     and any(s.outs[0].name == v and s.out.type.rank == 0
                             for s in after.leaves() if len(s.outs) == 1))
            out.append(v if stays else fresh_name(before, f"{v}_s"))
        return tuple(out)


def _left_behind(stmts, stmt, gathered, named: set) -> list[str]:
    """Operands of `stmt` that a plain statement computes from a gathered value (directly or
    through others) and that the reorder does not move: layer_norm's statistics, a softmax's
    maximum (`t0`, `t1`), or a scalar that reads a gathered tensor."""
    producer = {s.outs[0].name: s for s in stmts
                if len(s.outs) == 1 and not isinstance(s.op, ir.REGION_OPS)}
    memo: dict[str, bool] = {}

    def from_gathered(name: str) -> bool:
        if name in gathered:
            return True
        if name not in memo:
            memo[name] = False  # straight-line SSA: no cycles, this only guards the recursion
            s = producer.get(name)
            memo[name] = (s is not None and isinstance(s.op, REORDERABLE)
                          and any(from_gathered(o) for o in s.op.operands()))
        return memo[name]

    return [o for o in dict.fromkeys(stmt.op.operands())
            if o not in named and o not in gathered and from_gathered(o)]


@dataclass(frozen=True, slots=True)
class AsSlice(Transform):
    """Keep optimizer state Sliced: each rank stores and updates only its own slice.

    For each input tensor named in `tensors` (Replicated), the input becomes Sliced(0) (or the
    NodeSliced layout its first Update has after a hierarchical split) and every
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
            inputs[by_name[name]] = ir.Value(name, v.type.with_(
                layout=_state_layout(program, name)))
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


def _state_layout(program, name):
    """The slice a rank keeps of state input `name`: the layout of the first Update of it
    (NodeSliced after a hierarchical split: each rank keeps 1/per_node, the same on every
    node), Sliced(0) otherwise."""
    for s in program.leaves():
        if isinstance(s.op, ir.Update) and s.op.target == name:
            if isinstance(s.out.type.layout, NodeSliced) and s.out.type.layout.dim == 0:
                return s.out.type.layout
            break
    return Sliced(0)


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
            new = retyped(stmt, env)
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

