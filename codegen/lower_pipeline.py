"""Lowering a pipelined hierarchy (workbench.transforms.PipelineHierarchy) in a node's view
(codegen.lower_node): its three legs as one PipelineStep that the runtime runs chunk by chunk
on three CUDA streams, leg k+1 of chunk c waiting on an event that leg k recorded after chunk c:

    leg 1  NCCL reduce_scatter of chunk c's rows of the gradient, on the node's communicator
    leg 2  NCCL all_reduce, in place, of chunk c's part of the rank's slice, on the rail's
           communicator (one local rank per node: ncclCommSplit with color = local rank)
    leg 3  the fused update + node gather kernel, launch `chunk` = c

Chunk c of every leg is the same data (codegen.kernel_builder: chunk c's rows of a whole
tensor are (c * g + l) * E + e for local rank l of g, E = slice / chunks; a slice held per
rank keeps chunk c at c * E), so a rank's node slice, and any state kept on it, is held chunk
by chunk: `Plan.slice_chunks` tells the runtime to scatter and check such slices that way.
"""

from __future__ import annotations

from codegen.lower_collective import fused_collective_steps
from codegen.lower_library import nccl_step
from codegen.plan import NcclStep, PipelineStep, fault
from codegen.planner import Planner
from workbench import ir
from workbench.options import CodegenOptions


def pipeline_step(pl: Planner, stmt: ir.Stmt, first: int,
                  opts: CodegenOptions) -> PipelineStep:
    """The PipelineStep of a pipelined hierarchy's statement (module docstring)."""
    op: ir.Overlapped = stmt.op
    what = f"statement {stmt.name} ({op})"
    rs, ar, gather = op.body
    if not isinstance(rs.op, ir.ReduceScatter) or not isinstance(ar.op, ir.AllReduce):
        raise fault(f"{what}: a pipelined hierarchy's first two legs must be a ReduceScatter "
                    f"and an AllReduce, got {rs.op} then {ar.op}")
    reduce = nccl_step(pl, rs, first)
    across = nccl_step(pl, ar, first + 1)
    if across.comm != "inter" or across.src != across.dst:
        raise fault(f"{what}: the AllReduce across nodes must run in place on the rail's "
                    f"communicator, got comm={across.comm!r}, in place {across.src == across.dst}"
                    "; nothing may read the node ReduceScatter's slice after it")
    if isinstance(gather.op, ir.Fused):
        steps = fused_collective_steps(pl, gather, first + 2, opts, op.chunks,
                                       chunked_slices=True)
        if len(steps) != 1:
            raise fault(f"{what}: the node gather of a pipelined hierarchy must be one launch, "
                        f"got {len(steps)} (a norm splits it); pipeline an update without norms")
        last = steps[0]
    else:
        last = nccl_step(pl, gather, first + 2)
    return PipelineStep(op.chunks, (reduce, across, last), stmt.name, rows=across.count)


def is_nccl(step) -> bool:
    """Whether a pipeline leg is an NCCL call (else a generated kernel)."""
    return isinstance(step, NcclStep)
