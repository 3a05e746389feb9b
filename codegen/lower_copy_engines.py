"""Lowering a fused collective whose bytes copy engines move (transforms.CopyEngines): the
peer copies, a kernel per piece, and the one-block barrier kernels around them.
"""

from __future__ import annotations

import sympy

from codegen.kernel_builder import KernelBuilder
from codegen.lower_elementwise import slice_loc
from codegen.plan import MAX_BLOCKS, PEER, RANK, CopyEngineStep, KernelStep, PeerCopy, fault
from codegen.planner import REDUCE_NAMES, Planner, c_ident, c_type_of
from codegen.spec import KernelSpec, Load, Param, Store, mangle
from workbench import ir
from workbench.types import Sliced


def copy_engine_step(pl: Planner, stmt: ir.Stmt, first: int) -> CopyEngineStep:
    """A fused collective moved by copy engines (transforms.CopyEngines): the kernel of its
    computation on a window of this rank's slice, reading the reduce-scatter's pieces from
    the peers' staging slots in a local buffer (filled by pulls) and storing its results
    locally; pushes copy the gathered results' slice into every peer."""
    op: ir.Fused = stmt.op
    what = f"statement {stmt.name} ({op})"
    leaves = list(stmt.leaves())
    domain = leaves[0].out.type
    if not (isinstance(domain.layout, Sliced) and domain.layout.dim == 0):
        raise fault(f"{what}: a fused collective must compute on dim-0 slices, got "
                    f"{domain.layout}")
    kb = KernelBuilder(pl, domain, what)
    n = kb.extent  # elements of this rank's slice
    mine = RANK * n
    copies = []
    for index, leaf in enumerate(leaves, first):
        lop = leaf.op
        if isinstance(lop, ir.ReduceScatter):
            if lop.dim != 0:
                raise fault(f"{what}: ReduceScatter must scatter dim 0, got {lop.dim}")
            src = pl.locs[lop.x]
            pl.mark_peer(src.buffer)  # peers pull their slices of it
            dtype = pl.types[lop.x].dtype.name
            stage = f"stage_{c_ident(lop.x)}"
            pl.add_buffer(stage, dtype, pl.P * n)
            copies.append(PeerCopy(src.buffer, src.offset + mine, stage, PEER * n, n, dtype,
                                   pull=True))
            var = f"a_{c_ident(leaf.out.name)}"
            gptr = kb.buf_param(src.buffer, const=True)
            local = kb.buf_param(stage, const=True)
            off = kb._c(src.offset + kb.slice_base)
            # slot k of the staging buffer holds rank k's piece once the pulls are done;
            # this rank's own part is read in place
            srcs = tuple(f"(rank == {k} ? {gptr} + ({off}) : {local} + {k}LL * n)"
                         for k in range(pl.P))
            kb.reduced(leaf, index, Load(var, c_type_of(pl.types[lop.x]), "reduce", "", off,
                                         peers=srcs, reduce=REDUCE_NAMES[lop.op]))
        elif isinstance(lop, ir.AllGather):
            dst, self_stored = kb.gathered(leaf, index)
            pl.mark_peer(dst.buffer)  # peers push their slices into it
            if not self_stored:
                # the slice is not yet in the gathered buffer (an Update put it there in place)
                ptr = kb.buf_param(dst.buffer, const=False)
                kb.stores.append(Store(kb.regs[lop.x], c_type_of(leaf.out.type), ptr,
                                       kb._c(dst.offset + kb.slice_base)))
            at = dst.offset + mine
            copies.append(PeerCopy(dst.buffer, at, dst.buffer, at, n,
                                   leaf.out.type.dtype.name, pull=False))
        elif isinstance(lop, ir.ELEMENTWISE_OPS):
            kb.compute(leaf, index)
        elif isinstance(lop, ir.Slice):
            pl.locs[leaf.out.name] = slice_loc(pl, leaf, what)
        else:
            raise fault(f"{what}: a fused collective moved by copy engines may hold "
                        f"ReduceScatter, Compute, Update, Slice and AllGather, got {lop}")
    comment = "Fused" + op.kind.capitalize() + " (copy engines): " + "; ".join(
        f"{s.name} = {s.op}" for s in leaves)
    kernel = kb.spec("piece", "elementwise.cu.j2", pl.P, [], comment, kb.vec_types(),
                     window=True)
    flags = f"flags_{c_ident(stmt.name.split(',')[0])}"
    pl.add_buffer(flags, "u32", sympy.Integer(2 * MAX_BLOCKS * pl.P), peer=True)
    names = tuple(s.name for s in leaves)
    start, end = (KernelStep(barrier_spec(pl.P, flags, f"{stmt.name}: {when}"), names, flags,
                             sympy.Integer(1))
                  for when in ("the peers' inputs are complete",
                               "every peer's pushes into this rank have landed"))
    return CopyEngineStep(start, KernelStep(kernel, names, "", n), end, tuple(copies),
                          op.chunks, names)


def barrier_spec(P: int, flags: str, comment: str) -> KernelSpec:
    """A one-block kernel that meets every rank of the stage (barrier.cu.j2)."""
    params = [Param(f"flags{k}", f"uint32_t* flags{k}", "flags", flags, k) for k in range(P)]
    params += [Param("rank", "int rank", "rank"), Param("epoch", "uint32_t epoch", "epoch")]
    return mangle(KernelSpec("barrier", "barrier.cu.j2", P, 4, "1", tuple(params), (), (), (),
                             comment=comment))

