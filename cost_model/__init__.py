"""Analytic cost model: hardware specs (presets, profiles), NCCL's plans, and the price of a
lowered plan's steps (`plan_cost`) and its closed-form lower bound (`plan_formula`).
"""

from cost_model.collectives import choose_plan, collective_time
from cost_model.hardware import GPU, PRESETS, Cluster, Link, NcclTuning, Protocol, load_hardware

__all__ = ["GPU", "PRESETS", "Cluster", "Link", "NcclTuning", "Protocol", "choose_plan",
           "collective_time", "load_hardware"]
