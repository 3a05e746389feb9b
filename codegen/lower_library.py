"""Lowering to library calls: a MatMul to a cuBLAS GEMM step, a collective to an NCCL step.
"""

from __future__ import annotations

from codegen.plan import GemmStep, NcclStep, fault
from codegen.planner import REDUCE_NAMES, Planner, c_type_of, result_loc
from workbench import ir
from workbench.types import Sliced


def gemm_step(pl: Planner, stmt: ir.Stmt, what: str) -> GemmStep:
    """MatMul(a, b) on local blocks: [M, K] @ [K, N] -> a fresh [M, N] buffer (the MatMul's
    output always gets memory: cuBLAS writes it, whoever reads it)."""
    op, out = stmt.op, stmt.out
    ta, tb = pl.types[op.a], pl.types[op.b]
    la, lb = ta.local_shape(), tb.local_shape()
    if len(la) != 2 or len(lb) != 2:
        raise fault(f"{what}: a MatMul on GPUs must multiply 2-D blocks, got local shapes "
                    f"{list(la)} @ {list(lb)}; flatten the leading dims into one")
    a, b = pl.locs.get(op.a), pl.locs.get(op.b)
    for name, loc in ((op.a, a), (op.b, b)):
        if loc is None:
            raise fault(f"{what}: MatMul operands must live in memory, got '{name}' in "
                        "registers")
    dtype = out.type.dtype.name
    c_type_of(out.type)
    c = pl.new_buffer(out.name, pl.local_numel(out.name))
    pl.locs[out.name] = c
    return GemmStep(a, b, c, pl.sub(la[0]), pl.sub(la[1]), pl.sub(lb[1]), dtype, out.name)


def nccl_step(pl: Planner, stmt: ir.Stmt, index: int) -> NcclStep:
    """An unfused collective as one NCCL call; an AllReduce of a value read nowhere later
    reduces in place."""
    op, out = stmt.op, stmt.out
    what = f"statement {out.name} ({op})"
    src = pl.locs[op.x]
    if isinstance(op, ir.AllGather):
        dst = result_loc(pl, stmt, index, what)
    elif isinstance(op, ir.AllReduce) and pl.last_use(op.x, index):
        # In place, as data-parallel training reduces its gradients (NCCL's in-place form);
        # the gradient is dead afterwards, so the program's meaning is unchanged.
        dst = src
    else:
        dst = pl.new_buffer(out.name, pl.local_numel(out.name))
    pl.locs[out.name] = dst
    dtype = out.type.dtype.name
    if isinstance(op, ir.ReduceScatter) and op.dim != 0:
        raise fault(f"{what}: ReduceScatter must scatter dim 0 on GPUs, got dim {op.dim}")
    if isinstance(op, ir.AllGather) and pl.types[op.x].layout != Sliced(0):
        raise fault(f"{what}: AllGather must gather dim 0 on GPUs, got "
                    f"{pl.types[op.x].layout}")
    if isinstance(op, ir.AllReduce):
        # over inter (a node view's AllReduce across nodes): the slice, on the communicator
        # of this local rank's peers on the other nodes
        comm = "inter" if op.sub is not None else "group"
        return NcclStep("all_reduce", REDUCE_NAMES[op.op], src, dst, dst.numel, dtype, out.name,
                        comm=comm)
    if isinstance(op, ir.ReduceScatter):
        return NcclStep("reduce_scatter", REDUCE_NAMES[op.op], src, dst, dst.numel, dtype, out.name)
    if isinstance(op, ir.AllGather):
        return NcclStep("all_gather", "", src, dst, src.numel, dtype, out.name)
    return NcclStep("broadcast", "", src, dst, dst.numel, dtype, out.name, root=op.root)

