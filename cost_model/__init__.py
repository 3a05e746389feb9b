"""Analytic cost model: hardware specs (presets, profiles) and the sympy time of every IR op.

Imports workbench.ir only (DESIGN.md: layout rules).
"""

from cost_model.collectives import choose_plan, collective_time
from cost_model.hardware import GPU, PRESETS, Cluster, Link, NcclTuning, Protocol, load_hardware
from cost_model.ops import CostContext, ProgramCost, program_cost, stmt_cost

__all__ = ["GPU", "PRESETS", "Cluster", "CostContext", "Link", "NcclTuning", "ProgramCost",
           "Protocol", "choose_plan", "collective_time", "load_hardware", "program_cost",
           "stmt_cost"]
