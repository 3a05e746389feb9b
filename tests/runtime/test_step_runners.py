"""The runtime runs typed plan steps: one preparer per plan step class (PlanRun.prepare) and
one runner per prepared launch class (PlanRun.run), tables like codegen's LOWERING_RULES; a
step class without an entry is refused by name, never dispatched by a string."""

import dataclasses
import inspect

import pytest

from codegen import plan as plan_types
from workbench.errors import RuntimeFault
from workbench.runtime import launches
from workbench.runtime.executor import PREPARERS, RUNNERS, PlanRun

# the plan's step classes (what lowering emits as a step, or inside one)
STEPS = {plan_types.KernelStep, plan_types.NcclStep, plan_types.GemmStep, plan_types.ReduceStep,
         plan_types.SendStep, plan_types.OverlapStep, plan_types.CopyEngineStep,
         plan_types.ChunkedStep, plan_types.PipelineStep}
# priced and simulated, never run: the runtime refuses a plan holding one (Plan.refusal)
PRICED_ONLY = {plan_types.RingFusedStep}


def test_every_plan_step_class_has_a_preparer_and_every_launch_a_runner():
    steps = {c for _, c in inspect.getmembers(plan_types, inspect.isclass)
             if dataclasses.is_dataclass(c) and c.__name__.endswith("Step")}
    assert steps == STEPS | PRICED_ONLY and STEPS == set(PREPARERS)
    prepared = {c for _, c in inspect.getmembers(launches, inspect.isclass)
                if dataclasses.is_dataclass(c) and c.__module__ == launches.__name__}
    assert prepared == set(RUNNERS)


def test_a_step_class_without_a_preparer_is_refused_by_name():
    @dataclasses.dataclass(frozen=True)
    class NewStep:
        stmt: str

    run = object.__new__(PlanRun)
    with pytest.raises(RuntimeFault, match=r"the runtime must know how to run every plan step, "
                                           r"got NewStep, which has no entry in "
                                           r"executor.PREPARERS; add one"):
        run.prepare(NewStep("x"))


def test_a_plan_with_a_step_priced_only_is_refused_with_its_reason():
    """CoCoNet's ring-fused form lowers (for the cost model and the simulator) to a step no
    runner runs: the runtime refuses the plan before touching the GPU, saying why."""
    from codegen.lower import SIMULATED_ONLY, lower
    from workbench.loader import load

    program = load("studies/adam.py").schedules["fuse-rs-c-ag-ring"].apply()
    plan = lower(program, 4, priced_only=True)
    assert SIMULATED_ONLY in plan.refusal
    with pytest.raises(RuntimeFault, match=SIMULATED_ONLY):
        PlanRun(None, plan, {"N": 1024, "P": 4})
