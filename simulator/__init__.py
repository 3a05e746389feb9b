"""SimPy cluster simulator: resources per GPU, one process per plan step, timeline out.

The simulator walks a lowered plan (codegen.lower, once per schedule): each step runs as its
class's process kind in simulator.plan_steps (PLAN_RUN_RULES) on the cluster's links, SMs,
HBM and NICs, with every duration the cost model's price of that step (cost_model.plan_cost;
decision 104). Layers: imports cost_model, codegen and the core (docs/architecture.md).
"""

from simulator.engine import Row, SimResult, Simulation, simulate
from simulator.variability import Variability, VariabilityError

__all__ = ["Row", "SimResult", "Simulation", "Variability", "VariabilityError", "simulate"]
