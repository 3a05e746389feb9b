"""Analytic cost model: hardware specs (presets, calibrated profiles) and the time of what runs.

A schedule is lowered once into a plan (codegen.lower), and the cost model prices the plan's
steps (cost_model.plan_cost, by PLAN_COST_RULES: each step from its work and kind through NCCL's
algorithms, the roofline and the fused kernels' formulas); its memory and `--explain` are the
plan's too (plan_memory, plan_explain), and so is `simulate --symbolic`'s closed-form lower
bound in the size symbols (plan_formula, decision 104). Layers: imports codegen and the core
(docs/architecture.md, "The layers").
"""

from cost_model.collectives import choose_plan, collective_time
from cost_model.hardware import GPU, PRESETS, Cluster, Link, NcclTuning, Protocol, load_hardware

__all__ = ["GPU", "PRESETS", "Cluster", "Link", "NcclTuning", "Protocol", "choose_plan",
           "collective_time", "load_hardware"]
