"""Lowering an Overlapped region: producer (a MatMul or NCCL call) and consumer (an NCCL call or a
fused collective) chunk by chunk on two streams.
"""

from __future__ import annotations

from dataclasses import replace

from codegen.lower_collective import fused_collective_steps
from codegen.lower_library import gemm_step, nccl_step
from codegen.lower_send import send_steps
from codegen.plan import OverlapStep, fault
from codegen.planner import Planner, chunk_rows
from workbench import ir
from workbench.options import CodegenOptions


def overlap_steps(pl: Planner, stmt: ir.Stmt, first: int,
                  opts: CodegenOptions) -> list[tuple[object, tuple[int, ...]]]:
    """Overlapped(chunks){producer; consumer} as (step, stages) pairs:

    - MatMul; fused AllReduce or AllReduce of its output: one OverlapStep (chunks along the
      MatMul's output rows);
    - AllReduce (NCCL); FusedSend of what reads it: an OverlapStep in the source stage (NCCL
      chunk i, then the fused Send of chunk i) and the receiver's chunked flag wait;
    - FusedSend; AllGather (NCCL) of what it sent: the chunked fused kernel in the source
      stage, and in the destination stage, per chunk, the flag wait and the AllGather of the
      chunk (the stages overlap: chunk i is gathered while chunk i+1 is computed and sent)."""
    op: ir.Overlapped = stmt.op
    what = f"statement {stmt.name} ({op})"
    prod, cons = op.body
    n_prod = len(list(prod.leaves()))
    pop, cop = prod.op, cons.op
    cwhat = f"statement {cons.name} ({cop})"
    here = (pl.group,)
    if isinstance(pop, ir.MatMul):
        gemm = gemm_step(pl, prod, f"statement {prod.name} ({pop})")
        if isinstance(cop, ir.Fused) and cop.kind == "allreduce":
            steps = fused_collective_steps(pl, cons, first + n_prod, opts, op.chunks)
            if len(steps) != 1:
                raise fault(f"{cwhat}: an overlapped fused collective must be one launch, got "
                            f"{len(steps)} (a norm splits it); overlap a schedule without "
                            "norms")
            consumer = steps[0]
        elif isinstance(cop, ir.AllReduce) and cop.x == prod.out.name:
            consumer = nccl_step(pl, cons, first + n_prod)
        else:
            raise fault(f"{what}: the GPU backend overlaps a MatMul with a fused AllReduce or "
                        f"an AllReduce of its output, got {cop}; measure a schedule without "
                        "it")
        return [(OverlapStep(op.chunks, gemm, consumer, stmt.name), here)]
    if (isinstance(pop, ir.AllReduce) and isinstance(cop, ir.Fused) and cop.kind == "send"):
        nccl = nccl_step(pl, prod, first)
        sent = send_steps(pl, cons, first + n_prod, opts, op.chunks)
        (sender, src), (waiter, dst) = sent
        rows, per = chunk_rows(pl, next(cons.leaves()).out.type, op.chunks)
        return [(OverlapStep(op.chunks, nccl, sender.steps[0], stmt.name, rows, per), src),
                (waiter, dst)]
    if (isinstance(pop, ir.Fused) and pop.kind == "send" and isinstance(cop, ir.AllGather)
            and cop.x == prod.outs[-1].name):
        (sender, src), (waiter, dst) = send_steps(pl, prod, first, opts, op.chunks)
        pl.group = dst[0]
        gather = nccl_step(pl, cons, first + n_prod)
        return [(sender, src), (replace(waiter, steps=(*waiter.steps, gather)), dst)]
    raise fault(f"{what}: the GPU backend overlaps a MatMul with an AllReduce, an AllReduce "
                f"with a fused Send, or a fused Send with an AllGather of what it sent, got "
                f"{pop} then {cop}; measure a schedule without this overlap")

