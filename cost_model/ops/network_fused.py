"""The price of CoCoNet's own fused collective across nodes (workbench.transforms.RingFuse,
ir.Fused.engine "ring"): NCCL's ring over the whole group carries the fused AllReduce's
bytes, network included, and the computation runs on each chunk of the rank's slice as the
ring's reduce-scatter half delivers it; the ring's all-gather half then sends the results on.

So the wire and its plan are NCCL's ring AllReduce's (cost_model.collectives: the ring
plans of the group's path, the protocol NCCL's model picks among them), on the mean of the
bytes reduce-scattered and gathered (an Adam step gathers only its weights: as many bytes as
its gradients). The computation, on 1/P of the tensor, overlaps the ring's steps except for
the last of the ring's pipeline chunks: RING_PIPELINE chunks of the slice in flight, as in
CoCoNet's kernel, which applies the update per NCCL chunk (the update's HBM traffic is
assumed not to slow the ring's steps, which at 16+ ranks move far more bytes).

Not generated (no backend can drive NCCL's network steps with computation between them
yet; decision 72), so `workbench simulate` shows the row as simulated only.
"""

from __future__ import annotations

from cost_model import collectives as coll
from cost_model.ops.compute import work_s
from cost_model.ops.context import CostContext, OpCost
from cost_model.ops.fused import FusedParts

# Chunks of a rank's slice in flight in the ring (NCCL's pipeline depth, NCCL_STEPS = 8).
RING_PIPELINE = 8


def ring_plan(ctx: CostContext, parts: FusedParts) -> tuple[coll.Plan, object] | None:
    """(NCCL's ring plan for a ring-fused collective moving `parts`' bytes, the seconds of
    computation not hidden behind it); None over one rank, where there is no ring (the fused
    kernel alone). From a plan's RingFusedStep (cost_model.plan_cost) or a statement."""
    if parts.group is None or ctx.group_size(parts.group) == 1:
        return None
    nbytes = (ctx.size(parts.rs_nbytes) + ctx.size(parts.ag_nbytes)) / 2
    P = ctx.group_size(parts.group)
    rings = [p for p in coll.plans("allreduce", nbytes, P, ctx.cluster, P)
             if p.algorithm == "ring"]
    plan = min(rings, key=lambda p: float(p.time_s)) if not ctx.symbolic else rings[0]
    tail_s = work_s(ctx.cluster, parts.work) / RING_PIPELINE
    return plan, tail_s


def ring_cost(ctx: CostContext, parts: FusedParts) -> OpCost | None:
    """The ring-fused collective's time: NCCL's ring plan plus the computation it does not
    hide (module docstring); None over one rank."""
    priced = ring_plan(ctx, parts)
    if priced is None:
        return None
    plan, tail_s = priced
    comp = work_s(ctx.cluster, parts.work)
    return OpCost(plan.time_s + tail_s, {"link": plan.steps * plan.step_s, "hbm": comp},
                  "link")




