"""Lowering to library calls: a MatMul to a cuBLAS GEMM step, a collective to an NCCL step,
a ReduceTensor to a library reduction (and an NCCL AllReduce of the partials over slices).
"""

from __future__ import annotations

from codegen.lower_elementwise import elementwise_kernel
from codegen.plan import GemmStep, NcclStep, ReduceStep, fault
from codegen.planner import REDUCE_NAMES, Planner, c_type_of, result_loc
from workbench import ir
from workbench.types import Sliced


def gemm_step(pl: Planner, stmt: ir.Stmt, what: str, into: ir.Stmt | None = None,
              epilogue: ir.LibraryEpilogue | None = None) -> GemmStep:
    """MatMul(a, b) on local blocks: [M, K] @ [K, N] -> a fresh [M, N] buffer (the MatMul's
    output always gets memory: cuBLAS writes it, whoever reads it). With a library
    `epilogue`, the GEMM writes the epilogue statement `into`'s value instead."""
    op = stmt.op
    out = stmt.out if into is None else into.out
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
    if epilogue is None:
        return GemmStep(a, b, c, pl.sub(la[0]), pl.sub(la[1]), pl.sub(lb[1]), dtype, out.name)
    bias = pl.locs.get(epilogue.bias)
    if bias is None:
        raise fault(f"{what}: a GEMM epilogue's bias must live in memory, got "
                    f"'{epilogue.bias}' in registers")
    return GemmStep(a, b, c, pl.sub(la[0]), pl.sub(la[1]), pl.sub(lb[1]), dtype, out.name,
                    epilogue.kind, bias)


def matmul_epilogue_steps(pl: Planner, stmt: ir.Stmt, first: int) -> list:
    """A fused MatMul + epilogue region (ir.Fused kind "matmul"): one GEMM whose library runs
    the epilogue (ir.library_epilogue: bias, bias + ReLU, bias + GeLU-tanh; the product never
    reaches memory), else the GEMM and one generated kernel computing every epilogue
    statement from the product (design note 46)."""
    mm, *epilogue = stmt.op.body
    what = f"statement {stmt.name} ({stmt.op})"
    lib = ir.library_epilogue(stmt.op.body, pl.types)
    if lib is not None:
        return [gemm_step(pl, mm, what, into=epilogue[0], epilogue=lib)]
    gemm = gemm_step(pl, mm, what)
    rest = ir.Stmt(tuple(v for s in epilogue for v in s.outs), ir.Fused("compute", tuple(
        epilogue)), epilogue[0].loc)
    return [gemm, elementwise_kernel(pl, rest, first + 1)]


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
    if isinstance(op, ir.AllToAll) and op.dim != 0:
        raise fault(f"{what}: an AllToAll on GPUs must exchange blocks of dim 0 (contiguous "
                    f"rows), got dim {op.dim}; put the exchanged dim first")
    # NCCL's function from the one name table (ir.COLLECTIVES); the count is per rank: what
    # each rank sends for a gather or an exchange, what it receives otherwise
    c = ir.collective_of(op)
    reduce = REDUCE_NAMES[op.op] if hasattr(op, "op") else ""
    count = src.numel if c.whole_dst or c.op is ir.AllToAll else dst.numel
    # over inter (a node view's AllReduce across nodes): the slice, on the communicator of
    # this local rank's peers on the other nodes; a Reduce's result is meaningful on the root
    # only (OnRoot)
    sub = getattr(op, "sub", None)
    comm = "inter" if sub is not None and sub.axis == "inter" else "group"
    return NcclStep(c.nccl, reduce, src, dst, count, dtype, out.name,
                    root=getattr(op, "root", 0), comm=comm)



def reduce_tensor_steps(pl: Planner, stmt: ir.Stmt) -> list[ReduceStep | NcclStep]:
    """ReduceTensor(op, x): this rank's elements reduced to one f32 by a library reduction;
    over a Sliced x the per-rank partials are then combined by an NCCL AllReduce of one
    element (the interpreter combines them in rank order; for Sum the order differs, within
    f32 rounding of the partials)."""
    op, out = stmt.op, stmt.out
    what = f"statement {out.name} ({op})"
    src = pl.locs.get(op.x)
    if src is None:
        raise fault(f"{what}: a ReduceTensor must read a tensor in memory, got '{op.x}' in "
                    "registers")
    dst = pl.new_buffer(out.name, 1)
    pl.locs[out.name] = dst
    steps: list[ReduceStep | NcclStep] = [
        ReduceStep(src, dst, pl.local_numel(op.x), REDUCE_NAMES[op.op],
                   pl.types[op.x].dtype.name, out.name)]
    if isinstance(pl.types[op.x].layout, Sliced):
        steps.append(NcclStep(ir.collective_of(ir.AllReduce).nccl, REDUCE_NAMES[op.op], dst,
                              dst, dst.numel, out.type.dtype.name, out.name))
    return steps
