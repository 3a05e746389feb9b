"""A lowered plan's time as a closed form in the program's size symbols: `--symbolic`.

`plan_formula(plan, cluster)` is a **lower bound** on `plan_cost(plan, cluster, bound)` at
every binding of the sizes: a sympy expression in the size symbols the plan's buffers keep
unbound, with P the plan's number of ranks (a plan is lowered for a number of ranks, so P is a
number here, never a symbol). Read from the plan alone (decision 104):

- each leaf step by the roofline of its work (`codegen.work.StepWork`): HBM bytes at the GPU's
  rates (`GPU.hbm_time_s`), flops at the peak of the step's dtype, link bytes at the peak
  bandwidth of the slowest link the step's ranks span (`peak_link_Bps`; an NCCL step's bus
  bytes: `plan_cost.nccl_link_bytes`), the largest of the three; plus the
  GPU's launch latency of a step that launches a kernel (a generated kernel other than a
  flag wait, a GEMM, a library reduction): the one fixed cost that does not depend on sizes
  (NCCL's and a Send's fixed costs depend on the protocol NCCL picks for the size);
- steps one after another add up; the parts of an overlap, the legs of a pipelined
  hierarchy and a sending stage's chunks with the receiving stage's run at once: the largest
  of them.

Why it is a lower bound: `plan_cost` prices the same bytes and flops at rates no faster than
these peaks, pays at least one launch per kernel, and hides at most the host's issue cost
(`host_overlapped_total`), which is not counted here. `tests/cost_model/test_plan_formula.py`
holds it to that for every shipped study's schedules at several sizes.
"""

from __future__ import annotations

import sympy

from codegen import plan as cp
from codegen.work import StepWork, per_chunk, step_work
from cost_model.collectives import smax
from cost_model.hardware import Cluster
from cost_model.ops.comm import peak_link_Bps
from cost_model.plan_cost import PlanContext, nccl_link_bytes, receives


def plan_formula(plan: cp.Plan, cluster: Cluster) -> sympy.Expr:
    """A lower bound on the plan's time on `cluster`, in the program's size symbols (see the
    module docstring)."""
    pc = PlanContext.of(plan, cluster, {})
    total = sympy.Integer(0)
    for _, steps, _ in plan.statements():
        bounds: list = []
        for k, step in enumerate(steps):
            b = _step_s(pc, step)
            if k and receives(step) and isinstance(step, cp.ChunkedStep):
                bounds.append(smax(bounds.pop(), b))  # pipelined with its sender's chunks
            else:
                bounds.append(b)
        total += sum(bounds, sympy.Integer(0))
    return sympy.simplify(total) if total.free_symbols else total


def _work(pc: PlanContext, step, chunks: int = 1) -> StepWork:
    """A step's StepWork, sizes unbound; a kernel launched per chunk counted `chunks` times."""
    w = step_work(step, pc.plan.P, pc.numel)
    if not per_chunk(step):
        return w
    return StepWork(*(chunks * getattr(w, f) for f in w.__dataclass_fields__))


def _launches(step) -> int:
    """Kernel launches of a leaf step whose latency no size changes (a flag wait: none)."""
    if isinstance(step, cp.KernelStep):
        return 0 if step.spec.kind == "wait" else 1
    return 1 if isinstance(step, (cp.GemmStep, cp.ReduceStep)) else 0


def _link_bytes(pc: PlanContext, step, chunks: int = 1):
    """Bytes this rank must move over links for a step: an NCCL call's (`nccl_link_bytes`),
    any other step's StepWork.link_bytes."""
    if isinstance(step, cp.NcclStep):
        return nccl_link_bytes(pc.plan, step)
    return _work(pc, step, chunks).link_bytes


def _roofline_s(pc: PlanContext, step, chunks: int = 1):
    """The roofline of a leaf step (all `chunks` of it) plus its launch latency."""
    gpu = pc.ctx.cluster.gpu
    w = _work(pc, step, chunks)
    hbm = gpu.hbm_time_s(w.read_bytes + w.write_bytes, w.write_bytes, w.f16_read_bytes,
                         w.f16_write_bytes)
    dtype = getattr(step, "flops_dtype", getattr(step, "dtype", "f32"))
    link = _link_bytes(pc, step, chunks)
    comm = "inter" if getattr(step, "comm", "group") == "inter" else "group"
    parts = [hbm, w.flops / gpu.flops_for(dtype)]
    if link != 0:
        parts.append(link / peak_link_Bps(pc.ctx, pc.group(comm), comm == "inter"))
    return smax(*parts) + _launches(step) * gpu.launch_latency_s


def _step_s(pc: PlanContext, step):
    """The lower bound of one top-level step."""
    if isinstance(step, cp.OverlapStep):
        return smax(*(_roofline_s(pc, s, step.chunks) for s in (step.producer, step.consumer)))
    if isinstance(step, cp.PipelineStep):
        return smax(*(_roofline_s(pc, leg) for leg in step.legs))
    if isinstance(step, cp.ChunkedStep):
        return sum((_roofline_s(pc, s, step.chunks) for s in step.steps), sympy.Integer(0))
    if isinstance(step, cp.CopyEngineStep):  # the kernel's share; the copies are unpriced
        return _roofline_s(pc, step.kernel, step.chunks)
    if isinstance(step, cp.RingFusedStep):
        return _roofline_s(pc, step.kernel)
    return _roofline_s(pc, step)


__all__ = ["plan_formula"]
