"""What `workbench simulate --explain` says of a lowered plan: each NCCL collective the plan
calls (an overlap's, a pipeline's legs and a chunked step's too), with the algorithm and
protocol NCCL's choice rule picks for it (cost_model.collectives.choose_plan), read from the
plan's steps as the price is (`cost_model.plan_cost.nccl_call`), never from IR statements: a
schedule whose plan is priced only (the ring-fused form) too; one lowering refuses outright
has no rows (decision 104).
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy

from codegen import plan as cp
from cost_model import collectives as coll
from cost_model.hardware import Cluster
from cost_model.plan_cost import PlanContext, leaf_steps, nccl_call


def plan_collectives(plan: cp.Plan, cluster: Cluster,
                     bound: Mapping[sympy.Symbol, int]) -> list[dict]:
    """One row per NCCL collective call of `plan` (AllToAll's grouped sends are no
    collective of NCCL's choice rule: left out, as the IR's rows leave them): its statement,
    kind, ranks and nodes, its buffer in nccl-tests' convention (`nbytes`), and the
    (algorithm, protocol) NCCL picks with its time and bounding link."""
    pc = PlanContext.of(plan, cluster, bound)
    g = cluster.gpus_per_node
    rows = []
    for step in (leaf for s in plan.steps for leaf in leaf_steps(s)):
        if not isinstance(step, cp.NcclStep) or step.op == "all_to_all":
            continue
        kind, nbytes, P, across, dtype_cluster = nccl_call(pc, step)
        pick = coll.choose_plan(kind, nbytes, P, dtype_cluster, P, across)
        nodes = P if across else (-(-P // g) if cluster.nodes > 1 else 1)
        rows.append({"stmt": step.stmt, "kind": kind, "ranks": P, "nodes": nodes,
                     "algorithm": pick.algorithm, "protocol": pick.protocol,
                     "link": pick.link, "time_s": float(pick.time_s), "nbytes": float(nbytes)})
    return rows
