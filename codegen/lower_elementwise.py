"""Lowering elementwise computation to generated kernels: Compute and Update statements, fused
compute regions, and the Slice view (an offset into a whole tensor, no step).
"""

from __future__ import annotations

from codegen.kernel_builder import KernelBuilder
from codegen.plan import RANK, KernelStep, Loc, fault
from codegen.planner import Planner
from workbench import ir
from workbench.types import Sliced


def elementwise_kernel(pl: Planner, stmt: ir.Stmt, first: int, chunks: int = 1) -> KernelStep:
    """A Compute or Update statement, or a fused compute region, as one kernel over the
    domain of its first leaf; with `chunks`, launched once per chunk of rows (the producer of
    an overlap, whose consumer communicates each chunk as it is done)."""
    leaves = list(stmt.leaves())
    kb = KernelBuilder(pl, leaves[0].out.type, f"statement {stmt.name} ({stmt.op})", chunks)
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


def phases_after(leaves: list[ir.Stmt], barrier: type) -> list[int]:
    """The phase of each leaf of a fused region: one after every `barrier` op it reads (a
    value that needs all of its operand before anyone reads it: a norm's grid-wide partial
    sums, a row's reduction), else that of its latest operand."""
    phase: dict[str, int] = {}
    barriers: set[str] = set()
    out = []
    for leaf in leaves:
        p = max([phase[n] + (n in barriers) for n in leaf.op.operands() if n in phase],
                default=0)
        for v in leaf.outs:
            phase[v.name] = p
        if isinstance(leaf.op, barrier):
            barriers.add(leaf.out.name)
        out.append(p)
    return out
