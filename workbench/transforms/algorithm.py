"""How a fused AllReduce + row computation moves its bytes: two-shot, one-shot or Lamport
(issue 25; design note "fused AllReduce algorithms"). Time, not meaning: the region's body and
therefore its values stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from workbench import ir
from workbench.errors import IllegalTransform
from workbench.transforms.base import Transform, top_index

ALLREDUCE_ALGORITHMS = ("two-shot", "pipelined", "one-shot", "lamport")
"""The algorithms of a FusedAllreduce that starts with a whole AllReduce (ir.Fused.algorithm):

two-shot  rows reduce-scattered by peer loads, the summed rows all-gathered by peer stores,
          a barrier, then the computation on every row: NVLink bytes equal NCCL's ring
          AllReduce, two cross-GPU barriers (peers' inputs complete; summed rows landed).
pipelined two-shot's bytes with the computation beside the communication: most of the grid
          reduce-scatters and all-gathers the rows group by group and flags each group's
          arrival on every rank; the rest (codegen.lower_rows.PIPELINE_COMPUTE_SHARE)
          computes each group as soon as it has landed from its owner, so the HBM-bound
          computation overlaps the link-bound phase instead of following it (issue 35,
          design note 108).
one-shot  every rank loads every peer's whole input and reduces every row itself: (P - 1) x
          the input over its links, one pass over the rows, a barrier before (inputs
          complete) and one after (peers done reading this rank's input).
lamport   one-shot by pushes: every rank stores its input into a receive buffer on every
          peer that holds a poison value until the data lands; readers spin on the data
          itself, so no barrier at all (TensorRT-LLM's and vLLM's small-size form)."""


@dataclass(frozen=True, slots=True)
class AllReduceAlgorithm(Transform):
    """Choose how a fused AllReduce + row computation runs (see ALLREDUCE_ALGORITHMS).

        out, h, ... = FusedAllreduce { s = AllReduce(Sum, y); h = ...; ms = ...; out = ... }
          ==> out, h, ... = FusedAllreduce[one-shot] { ...the same body... }

    Preconditions: the statement is a FusedAllreduce whose body starts with a whole AllReduce
    (`s.fuse(allreduce, ...)` without split), moved by the SMs; `algorithm` is one of
    ALLREDUCE_ALGORITHMS; Lamport needs a floating-point input (its poison is a sign-flipped
    zero).
    """

    region: str
    algorithm: str = "one-shot"
    name: ClassVar[str] = "allreduce-algorithm"

    def rewrite(self, program):
        who = f"allreduce_algorithm({self.region}, {self.algorithm!r})"
        if self.algorithm not in ALLREDUCE_ALGORITHMS:
            raise IllegalTransform(f"{who}: algorithm must be one of {ALLREDUCE_ALGORITHMS}, "
                                   f"got {self.algorithm!r}")
        i = top_index(program, self.region, who)
        stmt = program.stmts[i]
        op = stmt.op
        if not (isinstance(op, ir.Fused) and op.kind == "allreduce"
                and isinstance(op.body[0].op, ir.AllReduce)):
            raise IllegalTransform(f"{who}: the statement must be a FusedAllreduce that starts "
                                   f"with a whole AllReduce, got {op}; fuse the AllReduce with "
                                   "its row computation first (s.fuse(allreduce, ...), no split)")
        if op.engine != "sm":
            raise IllegalTransform(f"{who}: the region must move its bytes on the SMs, got "
                                   "copy engines; drop copy_engines for it")
        reduce_op = op.body[0].op.op
        if self.algorithm != "one-shot" and reduce_op != ir.ReduceOp.Sum:
            raise IllegalTransform(f"{who}: a {self.algorithm} fused AllReduce must sum, got "
                                   f"{reduce_op.name}; use 'one-shot' (every rank combines "
                                   "every peer's rows itself)")
        src = op.body[0].op.x
        dtype = next((v.type.dtype for v in program.all_values() if v.name == src), None)
        if self.algorithm == "lamport" and dtype is not None and not dtype.is_float:
            raise IllegalTransform(f"{who}: Lamport synchronization must reduce a floating-point "
                                   f"input (its poison is a sign-flipped zero), got {dtype.name}")
        stmts = list(program.stmts)
        stmts[i] = ir.Stmt(stmt.outs, replace(op, algorithm=self.algorithm), stmt.loc)
        return program.with_stmts(stmts)

    def results(self, before, after):
        return self.region
