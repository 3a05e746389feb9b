"""SimPy cluster simulator: resources per GPU, one process per kernel or transfer, timeline out.

Durations come from cost_model only (DESIGN.md).
"""

from simulator.engine import Row, SimResult, Simulation, simulate
from simulator.variability import Variability, VariabilityError

__all__ = ["Row", "SimResult", "Simulation", "Variability", "VariabilityError", "simulate"]
