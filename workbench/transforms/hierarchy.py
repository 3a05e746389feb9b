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
    node-level); per_node >= 1 (1: a GPU per node, the node legs are copies); the group
    size is a multiple of per_node (a numeric size is
    checked, a symbolic one becomes a fact of the program: `program ... where P % 8 == 0`,
    which binding sizes checks); a dim of the input is then provably divisible by per_node.
    """

    allreduce: str
    per_node: int
    name: ClassVar[str] = "hierarchical-split"

    def rewrite(self, program):
        who = f"hierarchical-split({self.allreduce}, per_node={self.per_node})"
        if not isinstance(self.per_node, int) or self.per_node < 1:
            raise IllegalTransform(f"{who}: per_node must be an int >= 1 (the GPUs of one "
                                   f"node; 1 where a node has one GPU), got {self.per_node!r}")
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


@dataclass(frozen=True, slots=True)
class PipelineHierarchy(Transform):
    """Run the three legs of a hierarchical split chunk by chunk, overlapped: chunk k+1's node
    ReduceScatter while chunk k crosses the network while chunk k-1 is updated and gathered
    (the pipelined hierarchical schedule; design note 71).

        g1_rs = ReduceScatter(Sum, g, over=intra(8))    g1_rs, ... = Overlapped(chunks=4) {
        g1_ar = AllReduce(Sum, g1_rs, over=inter(8)) ==>   g1_rs = ReduceScatter(...)
        ..., w1 = FusedAllgather { ...; AllGather }        g1_ar = AllReduce(...)
                                                           ..., w1 = FusedAllgather {...}
                                                         }

    Each leg's chunk c is its c-th of `chunks` equal pieces (each rank's node slice cut in
    `chunks`): the legs move the same bytes as before, and meaning is unchanged (a region's
    meaning is its body in order). The legs hold different resources (NVLink for the node
    legs, the NIC for the leg across nodes), which is what overlapping them buys.

    Preconditions: `allreduce` names the AllReduce across nodes of a hierarchical split (a
    plain statement over inter); the statement before it is the node ReduceScatter it reads,
    the one after it the node AllGather (plain, or a fused update + AllGather) that is its only
    reader; chunks is an int >= 2 that divides a rank's node slice (checked here when the size
    is a number, else by the verifier when a cluster binds the sizes: exit 2 naming chunks).
    """

    allreduce: str
    chunks: int
    name: ClassVar[str] = "pipeline-hierarchy"

    def rewrite(self, program):
        who = f"pipeline-hierarchy({self.allreduce}, chunks={self.chunks})"
        if not isinstance(self.chunks, int) or isinstance(self.chunks, bool) or self.chunks < 2:
            raise IllegalTransform(f"{who}: chunks must be an int >= 2 (pieces of each rank's "
                                   f"node slice), got {self.chunks!r}; e.g. chunks=4")
        i, ar = plain_stmts(program, self.allreduce, who)
        sub = getattr(ar.op, "sub", None)
        if not isinstance(ar.op, ir.AllReduce) or sub is None or sub.axis != "inter":
            raise IllegalTransform(f"{who}: '{self.allreduce}' must be the AllReduce across "
                                   f"nodes of a hierarchical split, got {ar.op}; apply "
                                   f"hierarchical_split first and pass its second name")
        rs = program.stmts[i - 1] if i > 0 else None
        if (rs is None or rs.out.name != ar.op.x or not isinstance(rs.op, ir.ReduceScatter)
                or rs.op.sub != SubGroup("intra", sub.per_node)):
            raise IllegalTransform(f"{who}: the statement before '{self.allreduce}' must be the "
                                   f"node ReduceScatter it reads ({ar.op.x}), got "
                                   f"{rs.name + ' = ' + str(rs.op) if rs else 'none'}")
        if i + 1 >= len(program.stmts):
            raise IllegalTransform(f"{who}: a node gather must follow '{self.allreduce}', "
                                   f"got the end of the program")
        gather = program.stmts[i + 1]
        last = list(gather.leaves())[-1].op
        is_gather = (isinstance(last, ir.AllGather) and last.sub is not None
                     and last.sub.axis == "intra"
                     and (not isinstance(gather.op, ir.REGION_OPS)
                          or (isinstance(gather.op, ir.Fused) and gather.op.kind == "allgather")))
        if not is_gather or self.allreduce not in gather.op.operands():
            raise IllegalTransform(
                f"{who}: the statement after '{self.allreduce}' must be the node AllGather that "
                f"reads it, plain or fused with the update (s.fuse(update..., gather)), got "
                f"{gather.name} = {gather.op}; reorder the update before the gather and fuse "
                f"them first")
        others = [s.name for s in program.stmts[i + 2:] if self.allreduce in s.op.operands()]
        if others:
            raise IllegalTransform(f"{who}: the node gather must be the only reader of "
                                   f"'{self.allreduce}', got also {others}; fuse them into it")
        x = program.value(rs.op.x)
        slice_n = sympy.sympify(x.type.shape[rs.op.dim]) / sub.per_node
        if slice_n.is_Integer and int(slice_n) % self.chunks:
            raise IllegalTransform(f"{who}: chunks must divide a rank's node slice of "
                                   f"{int(slice_n)} elements, got chunks={self.chunks}")
        region = ir.Stmt(rs.outs + ar.outs + gather.outs,
                         ir.Overlapped(self.chunks, (rs, ar, gather)), rs.loc)
        return program.with_stmts(program.stmts[:i - 1] + (region,) + program.stmts[i + 2:])

    def results(self, before, after):
        """The pipelined region's last value (the gathered output)."""
        stmt = after.stmts[top_index(after, self.allreduce, "pipeline-hierarchy")]
        return stmt.outs[-1].name


@dataclass(frozen=True, slots=True)
class RingFuse(Transform):
    """CoCoNet's own fused collective across nodes: a fused AllReduce whose bytes NCCL's ring
    over the whole group carries (network included), the computation applied to each chunk of
    the rank's slice as the ring's reduce-scatter half delivers it, and the results sent on by
    the ring's all-gather half (ir.Fused.engine "ring").

        g1_rs, ..., w1 = FusedAllreduce {...}  ==>  g1_rs, ..., w1 = FusedAllreduce[NCCL ring] {...}

    Meaning unchanged (time only). The cost model and the simulator price it on NCCL's ring
    plan (cost_model.ops.network_fused); no backend generates it yet: the GPU would need a
    collective whose network steps a kernel drives with computation between them (NCCL's
    device API does not give that across nodes today: decision 72), so
    `workbench simulate` says "simulated only: needs a fused network collective" and never
    marks it best.

    Preconditions: `region` names a FusedAllreduce over the whole group (not node-level, not
    moved by copy engines) with no norm or reduction over slices (their cross-rank scalar step
    between the kernel's phases has no place in a ring).
    """

    region: str
    name: ClassVar[str] = "ring-fuse"

    def rewrite(self, program):
        who = f"ring-fuse({self.region})"
        i = top_index(program, self.region, who)
        stmt = program.stmts[i]
        op = stmt.op
        if not isinstance(op, ir.Fused) or op.kind != "allreduce" or op.engine != "sm":
            raise IllegalTransform(f"{who}: '{self.region}' must be a FusedAllreduce whose "
                                   f"kernel moves its bytes, got {op}; fuse ReduceScatter + "
                                   f"update + AllGather first")
        subs = [leaf.op.sub for leaf in stmt.leaves() if getattr(leaf.op, "sub", None)]
        if subs:
            raise IllegalTransform(f"{who}: the fused collective must run over the whole group, "
                                   f"got node-level collectives ({subs[0]}); ring-fuse the "
                                   f"flat fused AllReduce")
        scalar = [leaf.name for leaf in stmt.leaves()
                  if isinstance(leaf.op, (ir.Norm, ir.ReduceTensor))]
        if scalar:
            raise IllegalTransform(f"{who}: a ring-fused collective must hold no norm or "
                                   f"reduction, got {scalar}; fuse an update without norms")
        region = ir.Stmt(stmt.outs, ir.Fused(op.kind, op.body, "ring", 1, op.algorithm), stmt.loc)
        return program.with_stmts(program.stmts[:i] + (region,) + program.stmts[i + 1:])

    def results(self, before, after):
        """The region's name (unchanged)."""
        return self.region
