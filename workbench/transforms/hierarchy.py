"""The node-level (hierarchical) split of an AllReduce, which carries CoCoNet's fusion across
nodes: a ReduceScatter inside each node, an AllReduce of each slice across nodes, an
AllGather inside each node (design note 35). The intra-node steps may then be fused with
computation (peer loads and stores stay inside the NVLink domain); the step across nodes is
an NCCL AllReduce over the ranks of one local rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import sympy

from workbench import ir
from workbench.errors import IllegalTransform
from workbench.transforms.base import (
    Transform,
    env_before,
    fresh_name,
    plain_stmts,
    retyped,
    top_index,
)
from workbench.types import LocalLayout, SubGroup


@dataclass(frozen=True, slots=True)
class HierarchicalSplit(Transform):
    """AllReduce over nodes x per_node ranks -> ReduceScatter inside each node, AllReduce of
    the slice across nodes, AllGather inside each node.

        g1 = AllReduce(Sum, g)   ==>   g1_rs = ReduceScatter(Sum, g, over=intra(8))
                                              : NodeSliced(0, 8, partial)
                                       g1_ar = AllReduce(Sum, g1_rs, over=inter(8))
                                              : NodeSliced(0, 8)
                                       g1 = AllGather(g1_ar, over=intra(8)) : Replicated

    Local rank l of every node ends with slice l of the whole sum after the second step, so
    `reorder` can move an update between it and the gather (the update runs on 1/per_node of
    the tensor on every node), and `fuse` can put that update into the intra-node gather.

    Preconditions: `allreduce` names a plain AllReduce over the whole group (not already
    node-level); per_node >= 2; the group size is a multiple of per_node (a numeric size is
    checked, a symbolic one becomes a fact of the program: `program ... where P % 8 == 0`,
    which binding sizes checks); a dim of the input is then provably divisible by per_node.
    """

    allreduce: str
    per_node: int
    name: ClassVar[str] = "hierarchical-split"

    def rewrite(self, program):
        who = f"hierarchical-split({self.allreduce}, per_node={self.per_node})"
        if not isinstance(self.per_node, int) or self.per_node < 2:
            raise IllegalTransform(f"{who}: per_node must be an int >= 2 (the GPUs of one "
                                   f"node), got {self.per_node!r}")
        i, stmt = plain_stmts(program, self.allreduce, who)
        if not isinstance(stmt.op, ir.AllReduce) or stmt.op.sub is not None:
            raise IllegalTransform(f"{who}: '{self.allreduce}' must be an AllReduce over the "
                                   f"whole group, got {stmt.op}")
        x = program.value(stmt.op.x)
        if not isinstance(x.type.layout, LocalLayout):
            raise IllegalTransform(f"{who}: the input {x.name} must be Local, got "
                                   f"{x.type.layout}")
        size = sympy.sympify(x.type.group.size)
        facts = program.facts
        if size.is_Integer:
            if int(size) % self.per_node:
                raise IllegalTransform(f"{who}: the group size must be a multiple of per_node "
                                       f"{self.per_node}, got {size}")
        elif not ir.proven_divisible(size, self.per_node, facts):
            if not size.is_Symbol:
                raise IllegalTransform(f"{who}: the group size must be a size symbol or a "
                                       f"number to factor it into nodes, got {size}")
            facts = facts + ((size, sympy.Integer(self.per_node)),)
        dims = [d for d, n in enumerate(x.type.shape)
                if ir.proven_divisible(n, self.per_node, facts)]
        if not dims:
            raise IllegalTransform(
                f"{who}: a dim of {x.name} {list(x.type.shape)} must be provably divisible by "
                f"per_node {self.per_node}, got none; declare a size with "
                f"Size(..., multiple_of=P)")
        intra, inter = SubGroup("intra", self.per_node), SubGroup("inter", self.per_node)
        env = env_before(program, i)
        rs_name = fresh_name(program, f"{self.allreduce}_rs")
        ar_name = fresh_name(program, f"{self.allreduce}_ar", {rs_name})
        rs_op = ir.ReduceScatter(stmt.op.op, x.name, dims[0], intra)
        rs = ir.Stmt((ir.Value(rs_name, rs_op.infer(env, who)),), rs_op, stmt.loc)
        env[rs_name] = rs.out.type
        ar_op = ir.AllReduce(stmt.op.op, rs_name, inter)
        ar = ir.Stmt((ir.Value(ar_name, ar_op.infer(env, who)),), ar_op, stmt.loc)
        env[ar_name] = ar.out.type
        ag = retyped(ir.Stmt(stmt.outs, ir.AllGather(ar_name, intra), stmt.loc), env)
        out = program.with_stmts(program.stmts[:i] + (rs, ar, ag) + program.stmts[i + 1:])
        return ir.Program(out.name, out.inputs, out.stmts, out.outputs, facts,
                          out.input_ranges, out.may_stay_sliced)

    def results(self, before, after):
        """(the intra-node ReduceScatter, the AllReduce across nodes, the gather's name)."""
        ag = after.stmts[top_index(after, self.allreduce, "hierarchical-split")]
        ar = after.stmt_defining(ag.op.x)
        return ar.op.x, ag.op.x, self.allreduce
