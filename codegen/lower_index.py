"""Lowering the index ops (design decision 106): a Gather to a gather kernel (a grid-stride
loop over the rows it writes, each row looked up by its int32 id, a row of zeros where the id
is outside the table rows this rank holds) and a TopK to a top-k kernel (a warp per row along
the last axis, k small). Each is its own kernel (codegen/cuda/templates/gather.cu.j2,
topk.cu.j2); neither is fused with other statements."""

from __future__ import annotations

from dataclasses import replace

import sympy

from codegen.kernel_builder import KernelBuilder
from codegen.plan import RANK, KernelStep, Loc, fault
from codegen.planner import Planner, c_type_of
from codegen.spec import IndexPlan, mangle
from workbench import ir
from workbench.types import Sliced


def _in_memory(pl: Planner, name: str, what: str) -> Loc:
    loc = pl.locs.get(name)
    if loc is None:
        raise fault(f"{what}: an index op's operands must live in memory, got '{name}' in "
                    "registers")
    return loc


def _index_step(pl: Planner, stmt: ir.Stmt, kb: KernelBuilder, plan: IndexPlan,
                cols: sympy.Expr) -> KernelStep:
    """The KernelStep of an index kernel: its spec (parameters from the builder, the plan),
    its extent (the elements it walks: rows x cols) and its row length."""
    kind = plan.op
    spec = kb.spec(kind, f"{kind}.cu.j2", pl.P, [], f"{stmt.name} = {stmt.op}", [])
    return KernelStep(mangle(replace(spec, index=plan)), (stmt.name,), extent=kb.extent,
                      cols=cols)


def gather_step(pl: Planner, stmt: ir.Stmt, first: int) -> KernelStep:
    """Gather(table, ids): out's fresh buffer, filled row by row from this rank's table rows
    [lo, lo + held) (the whole table, or rank r's vocabulary rows of a table Sliced(0))."""
    op, out = stmt.op, stmt.out
    what = f"statement {stmt.name} ({op})"
    table, ids = _in_memory(pl, op.table, what), _in_memory(pl, op.ids, what)
    tt = pl.types[op.table]
    held, cols = (pl.sub(d) for d in tt.local_shape())
    lo = RANK * held if tt.layout == Sliced(0) else sympy.Integer(0)
    dst = pl.new_buffer(out.name, pl.local_numel(out.name))
    pl.locs[out.name] = dst
    kb = KernelBuilder(pl, out.type, what)
    plan = IndexPlan(
        "gather", kb.buf_param(table.buffer, True), kb._c(table.offset), c_type_of(tt),
        kb.buf_param(dst.buffer, False), kb._c(dst.offset), c_type_of(out.type),
        kb._c(pl.local_numel(op.ids)), kb._c(cols), ids=kb.buf_param(ids.buffer, True),
        ids_offset=kb._c(ids.offset), lo=kb._c(lo), held=kb._c(held))
    return _index_step(pl, stmt, kb, plan, cols)


def topk_step(pl: Planner, stmt: ir.Stmt, first: int) -> KernelStep:
    """TopK(x, k, part): the k values or indices of each row of x's last axis, into out's
    fresh buffer (k a row)."""
    op, out = stmt.op, stmt.out
    what = f"statement {stmt.name} ({op})"
    x = _in_memory(pl, op.x, what)
    tx = pl.types[op.x]
    cols = pl.sub(tx.local_shape()[-1])
    dst = pl.new_buffer(out.name, pl.local_numel(out.name))
    pl.locs[out.name] = dst
    kb = KernelBuilder(pl, tx, what)
    plan = IndexPlan(
        "topk", kb.buf_param(x.buffer, True), kb._c(x.offset), c_type_of(tx),
        kb.buf_param(dst.buffer, False), kb._c(dst.offset), c_type_of(out.type),
        kb._c(sympy.simplify(pl.local_numel(op.x) / cols)), kb._c(cols), k=op.k,
        part=op.part)
    return _index_step(pl, stmt, kb, plan, cols)
