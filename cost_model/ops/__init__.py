"""Time of every IR op and fused op on a Cluster, as a sympy expression or a number.

Computation is a roofline: max(HBM bytes / HBM bandwidth, flops / peak) plus a launch
(`compute`). Collectives and Sends use cost_model.collectives (NCCL alpha-beta; `comm`). Fused
kernels are what the generated code does: peer loads/stores over NVLink for the collective
part, the computation's HBM traffic on the 1/P slice, overlapped inside one kernel (`fused`).
`rules` holds one cost rule per op class (COST_RULES, FIXED_COST_RULES), `program` a whole
program's time.

`CostContext.symbolic` selects sympy expressions in the program's size symbols (no command
asks for them since `--symbolic` reads the plan: cost_model.plan_formula) or plain floats
(fast; what the simulator uses). The topology (which links a group spans) always comes from
the bound sizes.
"""

from cost_model.ops.alltoall import alltoall_cost, alltoall_fixed_s, alltoall_time
from cost_model.ops.comm import (
    COLLECTIVE_KINDS,
    collective_cluster,
    collective_cost,
    collective_fixed_s,
    collective_kind,
    collective_nbytes,
    collective_plan,
    norm_combine_s,
    peak_link_Bps,
    send_cost,
    send_crosses_nodes,
    send_fixed_s,
    send_link,
    single_rank_copy,
)
from cost_model.ops.compute import (
    Work,
    compute_cost,
    dropout_s,
    elementwise_work,
    expr_dropouts,
    expr_flops,
    index_work,
    io_work,
    matmul_epilogue_works,
    matmul_work,
    reduction_work,
    roofline_s,
    work_s,
)
from cost_model.ops.context import RESOURCES, CostContext, OpCost, stmt_group
from cost_model.ops.fused import (
    FUSED_PART_RULES,
    FusedParts,
    capped_fused_cost,
    fused_cost,
    fused_latency_s,
    fused_link_lower_s,
    fused_link_s,
    fused_parts,
    fused_send_Bps,
    overlap_consumer_sms,
)
from cost_model.ops.memory import MemoryUse
from cost_model.ops.network_fused import ring_fused_plan
from cost_model.ops.program import ProgramCost, host_overlapped_total, program_cost
from cost_model.ops.rules import (
    COST_RULES,
    FIXED_COST_RULES,
    shares_sms,
    stmt_cost,
    stmt_fixed_s,
)

__all__ = [
    "ring_fused_plan",
    "alltoall_cost", "alltoall_fixed_s", "alltoall_time",
    "COLLECTIVE_KINDS", "COST_RULES", "FIXED_COST_RULES", "FUSED_PART_RULES", "RESOURCES",
    "CostContext", "FusedParts", "MemoryUse", "OpCost", "ProgramCost", "Work",
    "collective_cluster",
    "collective_cost", "collective_fixed_s", "collective_kind", "collective_nbytes",
    "collective_plan",
    "compute_cost", "dropout_s", "elementwise_work", "expr_dropouts", "expr_flops",
    "capped_fused_cost", "fused_cost", "fused_latency_s", "fused_link_lower_s", "fused_link_s",
    "fused_parts",
    "fused_send_Bps", "host_overlapped_total", "index_work", "io_work", "matmul_epilogue_works",
    "matmul_work", "norm_combine_s",
    "overlap_consumer_sms", "peak_link_Bps", "program_cost", "reduction_work", "roofline_s",
    "send_cost", "send_crosses_nodes", "send_fixed_s", "send_link", "shares_sms",
    "single_rank_copy", "stmt_cost", "stmt_fixed_s", "stmt_group", "work_s",
]
