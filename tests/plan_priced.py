"""Pricing a program as `workbench simulate` does (decision 104): checked against the cluster's
placement (`verify`: a fused kernel across NVLink domains is NotOnThisCluster), lowered once
with the forms that are priced only (`codegen.lower.lower(..., priced_only=True)`), priced by
`cost_model.plan_cost`. How the tests price a program without the IR-level statement rules."""

from __future__ import annotations

from codegen.lower import lower
from cost_model.plan_cost import PlanCost, plan_cost


def ranks(program, bound, cluster) -> int:
    """The ranks a program's plan is lowered for: its bound P, else the cluster's GPUs."""
    by_name = {getattr(k, "name", k): v for k, v in bound.items()}
    return int(by_name.get("P", cluster.world_size))


def priced(program, cluster, bound, options=None, P: int | None = None) -> PlanCost:
    """plan_cost of `program`'s plan on `cluster` at sizes `bound` (P: `ranks`); raises
    NotOnThisCluster where the cluster cannot run it."""
    from workbench.verify import verify

    verify(program, cluster.placement({getattr(k, "name", k): int(v) for k, v in bound.items()}))
    plan = lower(program, P or ranks(program, bound, cluster), options, priced_only=True)
    return plan_cost(plan, cluster, bound)


def kernel_steps(plan, kind: str | None = None) -> list:
    """The plan's generated kernel steps (inside composite steps too), of `kind` if given."""
    from codegen import plan as cp
    from cost_model.plan_cost import leaf_steps

    return [k for s in plan.steps for k in leaf_steps(s)
            if isinstance(k, cp.KernelStep) and kind in (None, k.spec.kind)]
