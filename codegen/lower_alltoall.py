"""Lowering a peer-memory AllToAll fused with computation (`E* AllToAll E*`, design note 79):
one kernel inside an NVLink domain that loads each received row from its source rank over
CUDA IPC, computes what the program does before the exchange on it as it arrives (on the
source's values: a cast, a scale), and what it does after (the router's gate) before storing.

Element e of this rank's result lies in block s = e / B (B = elements per block): rank s's
block `rank`, at rank * B + e - s * B of rank s's tensor. With computation before the exchange
and none after it, the kernel pushes instead (`workbench.verify.exchange_pushes`): each rank
computes its own rows and stores block s into rank s's result at its own block, so the value
crosses the links in its own dtype (a cast down moves the small type, where pulling would
load the computation's inputs). A start barrier (every source has its
input) and an end barrier (no rank overwrites its input while a peer still loads it) bracket
the loop, as in the other fused collectives; a vector of elements never crosses a block (the
vector path needs B to be a multiple of its width).
"""

from __future__ import annotations

import sympy

from codegen.kernel_builder import KernelBuilder
from codegen.plan import MAX_BLOCKS, KernelStep, fault
from codegen.planner import Planner, c_ident, c_type_of, result_loc
from codegen.spec import Assign, Load, Param, Store
from workbench import ir
from workbench.options import CodegenOptions
from workbench.types import LocalLayout
from workbench.verify import exchange_pushes


def alltoall_kernel_step(pl: Planner, stmt: ir.Stmt, first: int,
                         opts: CodegenOptions) -> KernelStep:
    """The fused AllToAll region as one kernel (fused_collective.cu.j2: barriers, loop)."""
    op: ir.Fused = stmt.op
    leaves = list(stmt.leaves())
    what = f"statement {stmt.name} ({op})"
    k = next(i for i, s in enumerate(leaves) if isinstance(s.op, ir.AllToAll))
    a2a = leaves[k]
    kb = KernelBuilder(pl, a2a.out.type, what)
    block = kb._c(pl.local_numel(a2a.out.name) / pl.P)
    if exchange_pushes(leaves):
        return _pushed(kb, stmt, leaves, first, block, opts)

    def from_source(var, name, t, loc, ctype):
        # Local: rank s's copy, through its IPC pointer; Replicated: the same on every rank,
        # read here at the source's index.
        peers = (kb.peer_params(loc.buffer, const=True) if isinstance(t.layout, LocalLayout)
                 else (kb.buf_param(loc.buffer, const=True),) * pl.P)
        return Load(var, ctype, "exchange", "", kb._c(loc.offset), index=block, peers=peers)

    kb.read_hook = from_source
    var = _exchanged(kb, leaves[:k], a2a, first)
    kb.read_hook = None
    # The received value as a register of its own (the exchanged dtype), stored if needed.
    rvar = f"r_{c_ident(a2a.out.name)}"
    kb.assigns.append(Assign(rvar, c_type_of(a2a.out.type), f"{var}[j]"))
    kb.regs[a2a.out.name] = rvar
    loc = result_loc(pl, a2a, first + k, what)
    if loc is not None:
        pl.locs[a2a.out.name] = loc
        kb.stores.append(Store(rvar, c_type_of(a2a.out.type),
                               kb.buf_param(loc.buffer, const=False), kb._c(loc.offset)))
    for index, leaf in enumerate(leaves[k + 1:], first + k + 1):
        kb.compute(leaf, index)
    return _step(kb, leaves, a2a, opts)


def _pushed(kb: KernelBuilder, stmt: ir.Stmt, leaves, first: int, block: str,
            opts: CodegenOptions) -> KernelStep:
    """`E+ AllToAll`: this rank computes its own rows from its own memory and stores block s
    of the result into rank s's copy of the exchanged tensor at its own block (peer stores of
    the computed value); the start barrier keeps a peer's previous reads of that buffer ahead
    of the stores, the end barrier every store into this rank ahead of what reads it next."""
    pl = kb.pl
    *before, a2a = leaves
    var = _exchanged(kb, before, a2a, first)
    dst = pl.new_buffer(a2a.out.name, pl.local_numel(a2a.out.name))
    pl.locs[a2a.out.name] = dst
    kb.stores.append(Store(var, c_type_of(a2a.out.type), "", kb._c(dst.offset),
                           kb.peer_params(dst.buffer, const=False), block=block))
    kb.regs[a2a.out.name] = var
    return _step(kb, leaves, a2a, opts)


def _exchanged(kb: KernelBuilder, before, a2a: ir.Stmt, first: int) -> str:
    """The computation before the exchange into registers (none of it reaches memory: the
    transforms refuse what would), and the register holding the exchanged value."""
    for index, leaf in enumerate(before, first):
        if result_loc(kb.pl, leaf, index, kb.what) is not None:
            raise fault(f"{kb.what}: a value computed before a fused AllToAll must stay in the "
                        f"kernel, got '{leaf.out.name}' needed in memory")
        kb.compute(leaf, index)
    var, vec = kb.operand(a2a.op.x)
    if not vec:
        raise fault(f"{kb.what}: an AllToAll must exchange a tensor, got the scalar "
                    f"'{a2a.op.x}'")
    return var


def _step(kb: KernelBuilder, leaves, a2a: ir.Stmt, opts: CodegenOptions) -> KernelStep:
    """The kernel built by `kb` with its barriers' flags and epoch, as a plan step."""
    pl = kb.pl
    flags_name = f"flags_{c_ident(a2a.out.name)}"
    pl.add_buffer(flags_name, "u32", sympy.Integer(2 * MAX_BLOCKS * pl.P), peer=True)
    extra = [Param(f"flags{r}", f"uint32_t* flags{r}", "flags", flags_name, r)
             for r in range(pl.P)]
    extra.append(Param("epoch", "uint32_t epoch", "epoch"))
    spec = kb.spec("collective", "fused_collective.cu.j2", pl.P, extra,
                   "FusedAlltoall: " + "; ".join(f"{s.name} = {s.op}" for s in leaves),
                   kb.vec_types(), opts.unroll)
    return KernelStep(spec, tuple(s.name for s in leaves), flags_name, kb.extent)

