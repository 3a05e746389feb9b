"""Lowering norms: an unfused Norm(x) is a streaming kernel of per-block f64 sums of squares and
a one-block finishing kernel that combines them (across ranks when x is sliced); fused
collectives reuse the finishing kernel after each launch that accumulated a norm.
"""

from __future__ import annotations

import sympy

from codegen.kernel_builder import KernelBuilder
from codegen.plan import MAX_BLOCKS, KernelStep
from codegen.planner import Planner, c_ident
from codegen.spec import KernelSpec, NormAcc, Param, mangle
from workbench import ir


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
    for name, partials, cross, acc in pending:
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
        norms.append(NormAcc("", tuple(ptrs), MAX_BLOCKS, oname, acc))
    params.append(Param("rank", "int rank", "rank"))
    if any(cross for _, _, cross, _ in pending):
        flags_name = f"flags_{c_ident(pending[0][0])}"
        pl.add_buffer(flags_name, "u32", sympy.Integer(2 * MAX_BLOCKS * pl.P), peer=True)
        params += [Param(f"flags{k}", f"uint32_t* flags{k}", "flags", flags_name, k)
                   for k in range(pl.P)]
        params.append(Param("epoch", "uint32_t epoch", "epoch"))
    else:
        flags_name = ""
    names = tuple(n for n, _, _, _ in pending)
    spec = mangle(KernelSpec("finish", "norm_finish.cu.j2", pl.P, 1, "1LL", tuple(params), (),
                             (), (), norms=tuple(norms),
                             comment=f"finish {', '.join(names)} = " + (
                                 "sqrt(sum of squares)" if all(p[3] == "norm" for p in pending)
                                 else "the reduction of every block's partial")))
    return KernelStep(spec, names, flags_name, sympy.Integer(1))

