"""Lowering computation fused before a ReduceScatter (`E+ ReduceScatter E*`, a
FusedReduceScatter with a prologue; design note 78): gradient accumulation's scaling and bf16
cast, reduce-scattered by the kernel that computes them.

Each rank computes its whole contribution from its own memory, destination by destination
(slice q of it for rank q), and stores it into rank q's staging buffer at its own part: peer
stores of the computed value in its own dtype (the cast crosses the links as bf16, not the f32
it was computed from). After the barrier, each rank sums the P parts of its staging buffer in
rank order (the interpreter's order) and computes what follows the ReduceScatter on its slice.
Values the program needs in memory (the accumulator's Update) are stored back locally as they
are computed; nothing else of the prologue reaches HBM.
"""

from __future__ import annotations

from codegen.kernel_builder import KernelBuilder
from codegen.plan import fault
from codegen.planner import REDUCE_NAMES, c_ident, c_type_of, result_loc
from codegen.spec import Assign, ComputedPush, Load, Param, Store
from workbench import ir


def prologue_reduce_scatter(kb: KernelBuilder, prologue: list[tuple[int, ir.Stmt]],
                            rs: tuple[int, ir.Stmt]) -> None:
    """Phase one (a ComputedPush) and the reduction from the staging buffer (a "reduce" Load
    held in registers) of a fused ReduceScatter whose input the `prologue` computes."""
    pl = kb.pl
    index, leaf = rs
    what = f"{kb.what}: ReduceScatter {leaf.name}"
    x = leaf.op.x
    loads, regs, assigns = kb.loads, kb.regs, kb.assigns
    kb.loads, kb.regs, kb.assigns = {}, {}, []
    kb.read_hook = lambda var, name, t, loc, ctype: Load(
        var, ctype, "contig", kb.buf_param(loc.buffer, const=True), kb._c(loc.offset))
    stores = []
    for k, stmt in prologue:
        var = f"q_r_{c_ident(stmt.out.name)}"
        kb.assigns.append(Assign(var, c_type_of(stmt.out.type), kb.expr(stmt.op.expr, pl.types)))
        kb.regs[stmt.out.name] = var
        loc = result_loc(pl, stmt, k, what)
        if loc is not None:  # an Update of the accumulator, or a value read later: kept
            pl.locs[stmt.out.name] = loc
            stores.append(Store(var, c_type_of(stmt.out.type),
                                kb.buf_param(loc.buffer, const=False), kb._c(loc.offset)))
    if x not in kb.regs:
        raise fault(f"{what} must reduce a value computed before it in the kernel, got '{x}'")
    ctype = c_type_of(pl.types[x])
    stage = f"stage_{c_ident(x)}"
    pl.add_buffer(stage, pl.types[x].dtype.name, pl.P * kb.extent, peer=True)
    peers = kb.peer_params(stage, const=False)
    push = ComputedPush(ctype, kb.regs[x], peers, tuple(kb.loads.values()), tuple(kb.assigns),
                        tuple(stores))
    kb.loads, kb.regs, kb.assigns = loads, regs, assigns
    kb.read_hook = None
    kb.pushes.append(push)
    # Read the local staging buffer through a plain pointer: peers write it during this launch
    # (before the barrier), so no __restrict__ / read-only-cache path.
    local = f"p_{stage}_local"
    kb.params[local] = Param(local, f"const {ctype}* {local}", "buf", stage)
    n = kb._c(kb.extent)
    srcs = tuple(f"{local} + {k}LL * ({n})" for k in range(pl.P))
    kb.reduced(leaf, index, Load(f"a_{c_ident(leaf.out.name)}", ctype, "reduce", "", "0LL",
                                 peers=srcs, reduce=REDUCE_NAMES[leaf.op.op]))
