"""The simulator's rule table: every plan step class has one process kind (PLAN_RUN_RULES, or
a composite step's walk in simulator.plan_steps: overlaps, chunked steps, pipelined
hierarchies), the durations from cost_model; a step class with none is an error that names it
(decision 104: the simulator runs plan steps only, no IR statement)."""

import dataclasses
import inspect

import pytest

from codegen import plan as plan_types
from cost_model.hardware import preset
from simulator.engine import Simulation
from simulator.plan_steps import PLAN_RUN_RULES
from workbench.errors import WorkbenchError
from workbench.interpreter import bind_sizes
from workbench.loader import load

# run by the walk of their parts (simulator.plan_steps._run_plan_stmt)
COMPOSITE = {plan_types.OverlapStep, plan_types.ChunkedStep, plan_types.PipelineStep}


def test_every_plan_step_class_has_a_process():
    steps = {c for _, c in inspect.getmembers(plan_types, inspect.isclass)
             if dataclasses.is_dataclass(c) and c.__name__.endswith("Step")}
    assert steps == set(PLAN_RUN_RULES) | COMPOSITE
    assert not set(PLAN_RUN_RULES) & COMPOSITE


def test_a_step_class_with_no_process_is_an_error_naming_it():
    @dataclasses.dataclass(frozen=True)
    class NewStep:
        stmt: str

    loaded = load("studies/sgd.py")
    program = loaded.program
    sim = Simulation(program, preset("h200x4"), bind_sizes(program, loaded.sizes | {"P": 4}))
    g = sim.groups[0]
    origin = plan_types.Origin("y", "y = New", "y = New")
    run = sim._run_step(g, 0, sim.gpus[(g, 0)], origin, NewStep("y"), 0)
    with pytest.raises(WorkbenchError, match=r"^the simulator must run every plan step class, "
                       r"got NewStep, which has no entry in PLAN_RUN_RULES; add one in "
                       r"simulator/plan_steps\.py$"):
        next(run)
