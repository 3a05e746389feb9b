"""Lowering an Overlapped region: producer and consumer chunk by chunk on two streams, by the
pair's form (workbench.transforms.fusion.overlap_form).
"""

from __future__ import annotations

from dataclasses import replace

from codegen.lower_collective import fused_collective_steps
from codegen.lower_elementwise import elementwise_kernel
from codegen.lower_library import gemm_step, nccl_step
from codegen.lower_rows import has_axis_reduction, row_kernel_step
from codegen.lower_send import send_steps
from codegen.plan import OverlapStep, fault
from codegen.planner import Planner, chunk_rows
from workbench import ir
from workbench.options import CodegenOptions
from workbench.transforms.fusion import OVERLAP_FORMS_TEXT, overlap_form


def overlap_steps(pl: Planner, stmt: ir.Stmt, first: int,
                  opts: CodegenOptions) -> list[tuple[object, tuple[int, ...]]]:
    """Overlapped(chunks){producer; consumer} as (step, stages) pairs, by the pair's form
    (workbench.transforms.fusion.overlap_form, the rule `check` applies too):

    - matmul-allreduce: one OverlapStep, chunks along the MatMul's output rows; the consumer
      an NCCL AllReduce, a fused AllReduce kernel, or (holding axis reductions: residual +
      LayerNorm) a fused row kernel, launched per chunk;
    - matmul-reducescatter / allgather-matmul: one OverlapStep whose NCCL side is chunked by
      root (NcclStep.by_root): chunk i is rows of one root's part, reduced onto it or
      broadcast from it, so the MatMul works on contiguous rows;
    - alltoall-matmul / matmul-alltoall: one OverlapStep whose NCCL side is a rotated exchange
      (NcclStep.exchange): chunk i on rank r is row chunk (i + r C / P) mod C of the exchanged
      tensor, its NCCL send/recv pieces, and the GEMM's rows of that chunk;
    - compute-collective: the elementwise kernel per chunk of rows, the NCCL AllReduce,
      Broadcast or Reduce of each chunk as it is done;
    - allreduce-send: an OverlapStep in the source stage (NCCL chunk i, then the fused Send of
      chunk i) and the receiver's chunked flag wait;
    - send-allgather: the chunked fused kernel in the source stage, and in the destination
      stage, per chunk, the flag wait and the AllGather of the chunk."""
    op: ir.Overlapped = stmt.op
    what = f"statement {stmt.name} ({op})"
    prod, cons = op.body
    n_prod = len(list(prod.leaves()))
    pop, cop = prod.op, cons.op
    cwhat = f"statement {cons.name} ({cop})"
    here = (pl.group,)
    form = overlap_form(prod, cons)
    if form == "matmul-allreduce":
        gemm = gemm_step(pl, prod, f"statement {prod.name} ({pop})")
        if isinstance(cop, ir.Fused) and has_axis_reduction(cons):
            consumer = row_kernel_step(pl, cons, first + n_prod, opts, op.chunks)
        elif isinstance(cop, ir.Fused):
            steps = fused_collective_steps(pl, cons, first + n_prod, opts, op.chunks)
            if len(steps) != 1:
                raise fault(f"{cwhat}: an overlapped fused collective must be one launch, got "
                            f"{len(steps)} (a norm splits it); overlap a schedule without "
                            "norms")
            consumer = steps[0]
        else:
            consumer = nccl_step(pl, cons, first + n_prod)
            return [(OverlapStep(op.chunks, gemm, consumer, stmt.name), here)]
        # the generated consumer time-shares the SMs with the GEMM, on part of its grid
        return [(OverlapStep(op.chunks, gemm, consumer, stmt.name, shares_sms=True,
                             consumer_blocks=opts.overlap_blocks), here)]
    if form == "matmul-reducescatter":
        gemm = gemm_step(pl, prod, f"statement {prod.name} ({pop})")
        consumer = replace(nccl_step(pl, cons, first + n_prod), by_root=True)
        return [(OverlapStep(op.chunks, gemm, consumer, stmt.name), here)]
    if form == "allgather-matmul":
        gather = replace(nccl_step(pl, prod, first), by_root=True)
        gemm = gemm_step(pl, cons, f"statement {cons.name} ({cop})")
        rows, per = chunk_rows(pl, prod.out.type, op.chunks)
        return [(OverlapStep(op.chunks, gather, gemm, stmt.name, rows, per), here)]
    if form == "alltoall-matmul":  # chunks of the exchanged rows, each rank in its own order
        exchange = replace(nccl_step(pl, prod, first), exchange="recv")
        gemm = gemm_step(pl, cons, f"statement {cons.name} ({cop})")
        rows, per = chunk_rows(pl, prod.out.type, op.chunks)
        return [(OverlapStep(op.chunks, exchange, gemm, stmt.name, rows, per), here)]
    if form == "matmul-alltoall":
        gemm = gemm_step(pl, prod, f"statement {prod.name} ({pop})")
        exchange = replace(nccl_step(pl, cons, first + n_prod), exchange="send")
        return [(OverlapStep(op.chunks, gemm, exchange, stmt.name), here)]
    if form == "compute-collective":
        # The consumer is another launch (an NCCL call per chunk): what it reads of the
        # producer's values must be stored, although one statement computes and reads them.
        pl.spill.update(v.name for v in prod.outs if v.name in set(cop.operands()))
        kernel = elementwise_kernel(pl, prod, first, op.chunks)
        consumer = nccl_step(pl, cons, first + n_prod)
        rows, per = chunk_rows(pl, prod.outs[-1].type, op.chunks)
        return [(OverlapStep(op.chunks, kernel, consumer, stmt.name, rows, per), here)]
    if form == "allreduce-send":
        nccl = nccl_step(pl, prod, first)
        sent = send_steps(pl, cons, first + n_prod, opts, op.chunks)
        (sender, src), (waiter, dst) = sent
        rows, per = chunk_rows(pl, next(cons.leaves()).out.type, op.chunks)
        return [(OverlapStep(op.chunks, nccl, sender.steps[0], stmt.name, rows, per), src),
                (waiter, dst)]
    if form == "send-allgather":
        (sender, src), (waiter, dst) = send_steps(pl, prod, first, opts, op.chunks)
        pl.group = dst[0]
        gather = nccl_step(pl, cons, first + n_prod)
        return [(sender, src), (replace(waiter, steps=(*waiter.steps, gather)), dst)]
    raise fault(f"{what}: the pair must be one of the overlaps the backends run "
                f"({OVERLAP_FORMS_TEXT}), got {pop} then {cop}; overlap another pair or "
                "leave them sequential")

