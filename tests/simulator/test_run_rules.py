"""The simulator's rule table: every op class of the IR has one entry in RUN_RULES (which
resources its statement holds; the durations come from cost_model), and an op with no rule is
an error that names it."""

from types import SimpleNamespace

import pytest

from cost_model.hardware import preset
from simulator.engine import RUN_RULES, Simulation
from workbench import ir
from workbench.errors import WorkbenchError
from workbench.interpreter import bind_sizes
from workbench.loader import load

OPS = sorted(ir.OP_CLASSES, key=lambda c: c.__name__)


@pytest.mark.parametrize("op", OPS, ids=[c.__name__ for c in OPS])
def test_every_op_class_has_a_simulator_rule(op):
    assert callable(RUN_RULES.get(op)), f"{op.__name__} has no rule"


def test_the_table_holds_op_classes_of_the_ir_only():
    assert set(RUN_RULES) <= set(OPS)


class Bogus:
    """An op class the simulator has no rule for."""


def test_an_op_with_no_simulator_rule_is_an_error_naming_it():
    loaded = load("studies/sgd.py")
    program = loaded.program
    sim = Simulation(program, preset("h200x4"), bind_sizes(program, loaded.sizes | {"P": 4}))
    g = sim.groups[0]
    run = sim._run(g, 0, sim.gpus[(g, 0)], SimpleNamespace(name="y", op=Bogus()), 0)
    with pytest.raises(WorkbenchError, match=r"^simulator must know op Bogus, got no rule in "
                       r"RUN_RULES; add one in simulator/rules\.py$"):
        next(run)
