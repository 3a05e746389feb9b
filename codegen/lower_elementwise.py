"""Lowering computation to generated kernels: elementwise statements and compute regions, the
Slice view, and norms (a kernel of partial sums and the finishing kernel that combines them).
"""

from __future__ import annotations

import sympy

from codegen.kernel_builder import KernelBuilder
from codegen.plan import MAX_BLOCKS, RANK, KernelStep, Loc, fault
from codegen.planner import Planner, c_ident
from codegen.spec import KernelSpec, NormAcc, Param, mangle
from workbench import ir
from workbench.types import Sliced


def elementwise_kernel(pl: Planner, stmt: ir.Stmt, first: int) -> KernelStep:
    leaves = list(stmt.leaves())
    kb = KernelBuilder(pl, leaves[0].out.type, f"statement {stmt.name} ({stmt.op})")
    for k, leaf in enumerate(leaves):
        if not isinstance(leaf.op, ir.ELEMENTWISE_OPS):
            raise fault(f"a fused compute kernel must hold only Compute/Update, got {leaf.op}")
        kb.compute(leaf, first + k)
    spec = kb.spec("elementwise", "elementwise.cu.j2", pl.P, [],
                   "; ".join(f"{s.name} = {s.op}" for s in leaves), kb.vec_types())
    return KernelStep(spec, tuple(s.name for s in leaves), extent=kb.extent)


def slice_loc(pl: Planner, leaf: ir.Stmt, what: str) -> Loc:
    """Slice(x): rank r's slice of a whole tensor in memory, a view at an offset (no step)."""
    op = leaf.op
    loc = pl.locs.get(op.x)
    if loc is None:
        raise fault(f"{what}: the tensor a Slice views must live in memory, got '{op.x}' in "
                     "registers")
    t = pl.types[op.x]
    if t.layout == Sliced(op.dim):
        return loc  # already this rank's slice (sliced state): the view is the value itself
    if op.dim != 0:
        raise fault(f"{what}: Slice must slice dim 0 on GPUs, got dim {op.dim}")
    n = pl.local_numel(leaf.out.name)
    return Loc(loc.buffer, loc.offset + RANK * n, n)


def norm_steps(pl: Planner, stmt: ir.Stmt, first: int) -> list[KernelStep]:
    """An unfused Norm(x): a streaming kernel of per-block sums of squares, then the finishing
    kernel (cross-rank through peer loads of the partials when x is Sliced)."""
    x = stmt.op.x
    kb = KernelBuilder(pl, pl.types[x], f"statement {stmt.name} ({stmt.op})")
    kb.norm(stmt)
    spec = kb.spec("elementwise", "elementwise.cu.j2", pl.P, [],
                   f"{stmt.name} = {stmt.op}: per-block sums of squares", kb.vec_types())
    return [KernelStep(spec, (stmt.name,), extent=kb.extent), finish_step(pl, kb.pending)]


def finish_step(pl: Planner, pending) -> KernelStep:
    """One block that turns partial sums of squares into norms: sqrt(sum over ranks and
    blocks); peers' partials are read through their IPC pointers between two barriers."""
    params, norms = [], []
    for name, partials, cross in pending:
        if cross:
            ptrs = []
            for k in range(pl.P):
                pname = f"p_{partials}_peer{k}"
                params.append(Param(pname, f"const double* {pname}", "peer", partials, k))
                ptrs.append(pname)
        else:
            pname = f"p_{partials}"
            params.append(Param(pname, f"const double* __restrict__ {pname}", "buf", partials))
            ptrs = [pname]
        out = pl.locs[name]
        oname = f"p_{out.buffer}"
        params.append(Param(oname, f"float* __restrict__ {oname}", "buf", out.buffer))
        norms.append(NormAcc("", tuple(ptrs), MAX_BLOCKS, oname))
    params.append(Param("rank", "int rank", "rank"))
    if any(cross for _, _, cross in pending):
        flags_name = f"flags_{c_ident(pending[0][0])}"
        pl.add_buffer(flags_name, "u32", sympy.Integer(2 * MAX_BLOCKS * pl.P), peer=True)
        params += [Param(f"flags{k}", f"uint32_t* flags{k}", "flags", flags_name, k)
                   for k in range(pl.P)]
        params.append(Param("epoch", "uint32_t epoch", "epoch"))
    else:
        flags_name = ""
    names = tuple(n for n, _, _ in pending)
    spec = mangle(KernelSpec("finish", "norm_finish.cu.j2", pl.P, 1, "1LL", tuple(params), (),
                             (), (), norms=tuple(norms),
                             comment=f"finish {', '.join(names)} = sqrt(sum of squares)"))
    return KernelStep(spec, names, flags_name, sympy.Integer(1))

