"""What a fused region runs as: lowering's one decision of the fused-kind switch.

`fused_form(stmt)` says what moves a Fused region's bytes and what computes it, and lowering
(codegen.lower) generates the region by it. The reader that prices a region without its
plan dispatches on the
same answer instead of re-deriving it from `Fused.kind` and `Fused.engine`; a lowered plan's
readers read its steps (cost_model.plan_cost, simulator.plan_steps), which are this form made
concrete (the ring form a RingFusedStep: decision 104).
"""

from __future__ import annotations

from workbench import ir

FUSED_FORMS = ("compute", "matmul", "ring", "copy", "peers")
"""compute: one computation kernel (a row kernel where the body reduces along rows); matmul:
a library GEMM with its epilogue (and a kernel for what the library does not fuse); ring:
NCCL's ring across nodes with the computation between its steps (priced, not generated);
copy: peer copies by the copy engines, a kernel per piece; peers: one kernel moving the
collective's (or the Send's) bytes by peer loads and stores."""


def fused_form(stmt: ir.Stmt) -> str:
    """The FUSED_FORMS entry a Fused statement runs as."""
    op: ir.Fused = stmt.op
    if op.kind in ("compute", "matmul"):
        return op.kind
    if op.engine in ("ring", "copy"):
        return op.engine
    return "peers"


def is_fused_collective(stmt: ir.Stmt) -> bool:
    """Whether a statement is a region whose kernel moves bytes between GPUs (a fused
    collective or Send, by peer accesses, copy engines or the ring)."""
    return isinstance(stmt.op, ir.Fused) and fused_form(stmt) not in ("compute", "matmul")


__all__ = ["FUSED_FORMS", "fused_form", "is_fused_collective"]
