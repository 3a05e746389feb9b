"""A node's view of a program with node-level collectives (a hierarchical split, design
notes 35 and 36): the group of P = nodes x g ranks is lowered as one node of g ranks. Every
NodeSliced value becomes Sliced over the node (local rank l holds slice l), a ReduceScatter or
AllGather over intra becomes one over the node's ranks (NCCL calls on the node's
communicator, fused kernels with peers on the node's GPUs: inside one NVLink domain), and
the AllReduce over inter stays: lowering makes it an NCCL AllReduce of the slice on the
communicator of one local rank per node (`NcclStep.comm == "inter"`).
"""

from __future__ import annotations

from codegen.plan import fault
from workbench import ir
from workbench.types import NodeSliced, Sliced


def per_node_of(program: ir.Program) -> int:
    """The ranks per node of the program's node-level collectives, 0 when it has none;
    a fault when they disagree or sit beside collectives over the whole group (a plan has
    one view: the node's or the group's)."""
    subs, flat = set(), []
    for leaf in program.leaves():
        if isinstance(leaf.op, ir.COMMUNICATION_OPS):
            sub = getattr(leaf.op, "sub", None)
            if sub is None:
                flat.append(leaf.name)
            else:
                subs.add(sub.per_node)
    if not subs:
        return 0
    if len(subs) > 1 or flat:
        raise fault(f"a program with node-level collectives must have no other collectives and "
                    f"one node size, got node sizes {sorted(subs)} and collectives over the "
                    f"whole group {flat}; split every AllReduce hierarchically, or none")
    return subs.pop()


def _node_type(t):
    if isinstance(t.layout, NodeSliced):
        return t.with_(layout=Sliced(t.layout.dim))
    return t


def _node_stmt(stmt: ir.Stmt) -> ir.Stmt:
    op = stmt.op
    if isinstance(op, ir.Fused):
        op = ir.Fused(op.kind, tuple(_node_stmt(s) for s in op.body), op.engine, op.chunks)
    elif isinstance(op, ir.Overlapped):
        op = ir.Overlapped(op.chunks, tuple(_node_stmt(s) for s in op.body))
    elif isinstance(op, ir.ReduceScatter) and op.sub is not None:
        op = ir.ReduceScatter(op.op, op.x, op.dim)
    elif isinstance(op, ir.AllGather) and op.sub is not None:
        op = ir.AllGather(op.x)
    outs = tuple(ir.Value(v.name, _node_type(v.type)) for v in stmt.outs)
    return ir.Stmt(outs, op, stmt.loc)


def node_view(program: ir.Program) -> ir.Program:
    """The program as one node runs it (see the module docstring). Not a program to verify:
    its AllReduce over inter reads a Sliced value, which only lowering understands."""
    inputs = tuple(ir.Value(v.name, _node_type(v.type)) for v in program.inputs)
    stmts = tuple(_node_stmt(s) for s in program.stmts)
    types = {v.name: v.type for v in inputs}
    for s in stmts:
        for leaf in s.leaves():
            types[leaf.out.name] = leaf.out.type
    outputs = tuple(ir.Value(v.name, types[v.name]) for v in program.outputs)
    return ir.Program(program.name, inputs, stmts, outputs, program.facts,
                      program.input_ranges, program.may_stay_sliced)
