"""The formulas the plan's price is made of (cost_model.plan_cost reads them; so do the
simulator and the training step): the roofline of a kernel's Work (`compute`), NCCL calls and
Sends (`comm`, over cost_model.collectives), the fused kernels' peer traffic and fixed costs
(`fused`), AllToAll (`alltoall`), the ring form across nodes (`network_fused`), the pipelined
hierarchy (`pipeline`), and what a price holds (`context`: OpCost, ProgramCost). No rule here
prices an IR statement: every schedule is priced from its lowered plan (decision 104).
"""

from cost_model.ops.compute import Work, roofline_s, work_s
from cost_model.ops.context import OpCost, ProgramCost
from cost_model.ops.fused import FusedParts, fused_latency_s, fused_link_s, fused_parts_cost

__all__ = ["FusedParts", "OpCost", "ProgramCost", "Work", "fused_latency_s", "fused_link_s",
           "fused_parts_cost", "roofline_s", "work_s"]
