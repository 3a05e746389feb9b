"""Analytic cost model: hardware specs (presets, calibrated profiles) and the time of what runs.

A schedule is lowered once into a plan (codegen.lower), and the cost model prices the plan's
steps (cost_model.plan_cost, by PLAN_COST_RULES: each step from its work and kind through NCCL's
algorithms, the roofline and the fused kernels' formulas); its memory and `--explain` are the
plan's too (plan_memory, plan_explain). The IR-level rules re-exported here (program_cost,
stmt_cost: cost_model/ops/rules.py) serve only the closed form in P of `simulate --symbolic`,
which no plan can give (decision 104). Layers: imports codegen and the core
(docs/architecture.md, "The layers").
"""

from cost_model.collectives import choose_plan, collective_time
from cost_model.hardware import GPU, PRESETS, Cluster, Link, NcclTuning, Protocol, load_hardware
from cost_model.ops import CostContext, ProgramCost, program_cost, stmt_cost

__all__ = ["GPU", "PRESETS", "Cluster", "CostContext", "Link", "NcclTuning", "ProgramCost",
           "Protocol", "choose_plan", "collective_time", "load_hardware", "program_cost",
           "stmt_cost"]
