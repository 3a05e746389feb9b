"""Peak memory of one rank running a lowered plan: what the runtime allocates for it.

The runtime allocates every buffer of a rank's stage once, for the whole run
(`workbench.runtime.executor.PlanRun`), so the plan's peak is the sum of its stage's buffers
at the bound sizes (the stage that holds most, for a pipeline), plus NCCL's staging buffers
where the plan calls NCCL (`cost_model.ops.memory.NCCL_BUFFSIZE_BYTES`). The plan, not the
IR's liveness, says what a schedule holds: adam's rs-c-ag holds 4.5 GiB per rank at N = 2^28
on 4 GPUs, where the IR's liveness bound (removed with decision 104) counted 7.25 (an
AllReduce in place in its dead input, an update in its target's buffer). `simulate --memory`
and `check` read it for every schedule that lowers (the ring-fused form's plan too).
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy

from codegen import plan as cp
from cost_model.hardware import Cluster
from cost_model.ops.memory import NCCL_BUFFSIZE_BYTES, MemoryUse
from cost_model.plan_cost import leaf_steps


def plan_memory(plan: cp.Plan, cluster: Cluster, bound: Mapping[sympy.Symbol, int]) -> MemoryUse:
    """The peak memory per rank of `plan` at the `bound` sizes on `cluster`'s GPUs (see the
    module docstring): inputs are the buffers that hold the program's inputs, values the
    others (results, staging, flags, partial sums)."""
    stages: dict[int, list[float]] = {}
    for b in plan.buffers:
        nbytes = float(sympy.sympify(b.numel).subs(bound)) * cp.ELEMENT_BYTES[b.dtype]
        held = stages.setdefault(b.group, [0.0, 0.0])
        held[0 if b.holds_input else 1] += nbytes
    inputs, values = max(stages.values(), key=sum, default=[0.0, 0.0])
    calls_nccl = any(isinstance(leaf, (cp.NcclStep, cp.SendStep))
                     for s in plan.steps for leaf in leaf_steps(s))
    comm = 2 * cluster.nccl.max_channels * NCCL_BUFFSIZE_BYTES if calls_nccl else 0.0
    return MemoryUse(inputs + values + comm, inputs, values, comm,
                     cluster.gpu.hbm_capacity_bytes)
