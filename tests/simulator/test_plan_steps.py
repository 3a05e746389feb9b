"""The simulator runs a lowered plan's steps (simulator.plan_steps; decision 104): the golden
event logs replay from the plan; a schedule of kernels and calls one after another ends when
the cost model's sum of its steps' prices says, up to a fused kernel's pipeline fill; each
statement is one stream row named as its statement, its kernels by its region."""

from __future__ import annotations

import pytest
from conftest import assert_golden, load_study
from test_event_log_golden import _event_log  # the golden logs' format

from codegen.lower import lower
from cost_model.hardware import preset
from cost_model.plan_cost import plan_cost
from simulator import Variability
from simulator.engine import Simulation
from workbench.interpreter import bind_sizes


def _runs(spec, schedule, sizes, **kw):
    """(program, the cost model's price of its plan, the Simulation, its result)."""
    f = load_study(spec)
    program = f.schedules[schedule].apply() if schedule else f.program
    bound = bind_sizes(program, sizes)
    plan = lower(program, sizes["P"])
    sim = Simulation(program, preset("h200x4"), bound, reduced=False, plan=plan, **kw)
    return program, float(plan_cost(plan, preset("h200x4"), bound).time_s), sim, sim.run()


def _streams(r):
    """The stream rows of one GPU: one per statement it runs."""
    return [row.op for row in r.rows if row.resource == "stream" and row.gpu == 0]


@pytest.mark.parametrize("spec,schedule,sizes,golden", [
    ("studies/sgd.py", None, {"N": 2**20, "P": 2}, "sgd-unscheduled"),
    ("studies/allreduce_rmsnorm.py", None, {"T": 128, "H": 4096, "P": 2},
     "allreduce_rmsnorm-unscheduled"),
])
def test_plan_steps_replay_the_golden_event_logs(spec, schedule, sizes, golden):
    program, _, sim, result = _runs(spec, schedule, sizes)
    assert sim.statements  # the plan's statements ran, step by step
    assert_golden(f"simulator/{golden}.log", _event_log(result))


@pytest.mark.parametrize("schedule", ["fuse-reduce-c", "fuse-c-broadcast"])
def test_rooted_fused_kernels_end_at_their_plans_price(schedule):
    # a fused Reduce or Broadcast computes on its root only: its HBM serves its own buffer
    program, price, sim, result = _runs("studies/parameter_server.py", schedule,
                                        {"N": 2**16, "P": 4})
    assert len(sim.statements) == 2
    assert price <= result.time_s <= price * 1.001  # a fused kernel's pipeline fill at most
    assert _streams(result) == [f"{s.name} = {type(s.op).__name__}" for s in program.stmts]


def test_ranks_that_differ_run_later_than_the_plans_price():
    _, price, sim, result = _runs("studies/sgd.py", "rs-c-ag", {"N": 2**20, "P": 4},
                                  variability=Variability(slow=((3, 2.0),),
                                                          degraded=((1, 1.5),)))
    assert len(sim.statements) == 3 and not result.reduced
    assert result.time_s > price * 1.05  # a slow GPU and a degraded link only delay
    _, alike, _, equal = _runs("studies/sgd.py", "rs-c-ag", {"N": 2**20, "P": 4})
    assert equal.time_s == pytest.approx(alike, rel=1e-9)


@pytest.mark.parametrize("spec,schedule,sizes,overlapped", [
    ("studies/sgd.py", "fuse-rs-c-ag", {"N": 2**20, "P": 2}, False),
    ("studies/model_parallel.py", "overlap-mm-fuse-ar-c", {"T": 1024, "H": 1024, "P": 2}, True),
    ("studies/allreduce_rmsnorm.py", "fuse-rs-c-ag", {"T": 128, "H": 4096, "P": 2}, False),
    # a fused Send stores what it sends into the next stage's buffer, not its own HBM
    ("studies/pipeline.py", "fuse-rs-c-send-ag", {"T": 1024, "H": 1024, "P": 2}, False),
    ("studies/pipeline.py", "fuse-c-send-overlap-ar", {"T": 1024, "H": 1024, "P": 2}, True),
    ("studies/pipeline.py", "overlap-fuse-rs-c-send-ag", {"T": 1024, "H": 1024, "P": 2}, True),
    # a row kernel's whole AllReduce, its phase by its algorithm (codegen.work)
    ("studies/allreduce_rmsnorm.py", "fuse-ar-c", {"T": 128, "H": 4096, "P": 2}, False),
    ("studies/allreduce_rmsnorm.py", "fuse-ar-c-oneshot", {"T": 128, "H": 4096, "P": 2}, False),
    ("studies/allreduce_rmsnorm.py", "fuse-ar-c-lamport", {"T": 128, "H": 4096, "P": 2}, False),
])
def test_fused_kernels_run_as_their_plans_steps(spec, schedule, sizes, overlapped):
    """Every statement of the schedule runs as its steps (a stream row each, its kernels
    named by its region); one after another they end when the plan's price says, up to the
    fused kernels' pipeline fill (measured here: at most 2.7 %, one-shot's), and an overlap's
    chunks within a chunk of fill of it (at most 11 %: the fused Send beside an AllReduce)."""
    program, price, sim, result = _runs(spec, schedule, sizes)
    assert [o.stmt for o, _, _ in sim.statements] == [s.name for s in program.stmts]
    # a stream row for each statement stage 0 runs (an overlap's parts have theirs too)
    assert {f"{s.name} = {type(s.op).__name__}" for s in program.stmts if s.name in
            {o.stmt for o, _, groups in sim.statements if 0 in groups[0]}} <= set(
        _streams(result))
    kernels = {row.op for row in result.rows if row.resource != "stream"}
    assert kernels <= {o.kernel for o, _, _ in sim.statements} | {
        p.kernel for o, _, _ in sim.statements for p in o.parts}
    high = 1.15 if overlapped else 1.03
    assert price * 0.999 <= result.time_s <= price * high


def test_the_reduced_mode_runs_the_plan_too():
    f = load_study("studies/adam.py")
    program = f.schedules["fuse-rs-c-ag"].apply()
    bound = bind_sizes(program, {"N": 2**24, "P": 4})
    plan = lower(program, 4)
    full = Simulation(program, preset("h200x4"), bound, reduced=False, plan=plan).run()
    reduced = Simulation(program, preset("h200x4"), bound, reduced=True, plan=plan)
    assert reduced.statements and reduced.run().time_s == pytest.approx(full.time_s, rel=1e-9)


@pytest.mark.parametrize("spec", ["studies/adam.py", "studies/sgd.py"])
def test_copy_engines_run_from_the_plan_as_their_statement(spec):
    """A fused collective moved by copy engines (CopyEngineStep): its pulls, pushes and
    per-piece kernels from the plan's copies and kernel (cost_model.plan_cost.
    copy_engine_parts), ending at the plan's price up to the pieces' fill."""
    from workbench import ir
    from workbench.transforms import CopyEngines

    f = load_study(spec)
    program = f.schedules["fuse-rs-c-ag"].apply()
    fused = next(s for s in program.stmts if isinstance(s.op, ir.Fused))
    program = CopyEngines(fused.outs[0].name, 8).apply(program)
    bound = bind_sizes(program, {"N": 2**20, "P": 4})
    plan = lower(program, 4)
    sim = Simulation(program, preset("h200x4"), bound, reduced=False, plan=plan)
    result = sim.run()
    assert fused.name in [o.stmt for o, _, _ in sim.statements]
    price = float(plan_cost(plan, preset("h200x4"), bound).time_s)
    assert price * 0.999 <= result.time_s <= price * 1.03
