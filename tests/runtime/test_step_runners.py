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
         plan_types.ChunkedStep}


def test_every_plan_step_class_has_a_preparer_and_every_launch_a_runner():
    steps = {c for _, c in inspect.getmembers(plan_types, inspect.isclass)
             if dataclasses.is_dataclass(c) and c.__name__.endswith("Step")}
    assert steps == STEPS == set(PREPARERS)
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
