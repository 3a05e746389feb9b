"""The simulator running a lowered plan's steps (simulator.plan_steps, design note 75): where
the plan's durations are the statements', the event log is the statements' run, byte for byte
(the golden logs); where the plan shows a fused kernel keeping values in registers, the same
events, never later (design notes 75, 87)."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import assert_golden, load_study
from test_event_log_golden import _event_log  # the golden logs' format

from codegen.lower import lower
from cost_model.hardware import preset
from simulator import Variability, simulate
from simulator.engine import Simulation
from workbench.interpreter import bind_sizes


def _runs(spec, schedule, sizes, **kw):
    f = load_study(spec)
    program = f.schedules[schedule].apply() if schedule else f.program
    bound = bind_sizes(program, sizes)
    by_stmt = simulate(program, preset("h200x4"), bound, reduced=False, **kw)
    sim = Simulation(program, preset("h200x4"), bound, reduced=False,
                     plan=lower(program, sizes["P"]), **kw)
    return program, by_stmt, sim, sim.run()


def _events(r):
    return Counter((row.gpu, row.resource, row.op) for row in r.rows)


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
def test_rooted_fused_kernels_run_as_their_statements(schedule):
    # a fused Reduce or Broadcast computes on its root only: its HBM serves its own buffer
    _, by_stmt, sim, result = _runs("studies/parameter_server.py", schedule, {"N": 2**16, "P": 4})
    assert len(sim.statements) == 2
    assert _event_log(result) == _event_log(by_stmt)


def test_ranks_that_differ_run_the_same_from_the_plan():
    _, by_stmt, sim, result = _runs("studies/sgd.py", "rs-c-ag", {"N": 2**20, "P": 4},
                                    variability=Variability(slow=((3, 2.0),),
                                                            degraded=((1, 1.5),)))
    assert len(sim.statements) == 3 and not result.reduced
    assert _event_log(result) == _event_log(by_stmt)


@pytest.mark.parametrize("spec,schedule,sizes", [
    ("studies/sgd.py", "fuse-rs-c-ag", {"N": 2**20, "P": 2}),
    ("studies/model_parallel.py", "overlap-mm-fuse-ar-c", {"T": 1024, "H": 1024, "P": 2}),
    ("studies/allreduce_rmsnorm.py", "fuse-rs-c-ag", {"T": 128, "H": 4096, "P": 2}),
    # a fused Send stores what it sends into the next stage's buffer, not its own HBM
    ("studies/pipeline.py", "fuse-rs-c-send-ag", {"T": 1024, "H": 1024, "P": 2}),
    ("studies/pipeline.py", "fuse-c-send-overlap-ar", {"T": 1024, "H": 1024, "P": 2}),
    ("studies/pipeline.py", "overlap-fuse-rs-c-send-ag", {"T": 1024, "H": 1024, "P": 2}),
])
def test_fused_kernels_from_the_plan_write_less_and_are_never_later(spec, schedule, sizes):
    """The IR-level model writes values a fused kernel keeps in registers (note 61): from the
    plan, the same kernels and transfers happen, and the run ends no later."""
    program, by_stmt, sim, result = _runs(spec, schedule, sizes)
    assert [o.stmt for o, _, _ in sim.statements] == [s.name for s in program.stmts]

    assert _events(result) == _events(by_stmt)
    assert result.time_s <= by_stmt.time_s
    assert result.time_s > 0.9 * by_stmt.time_s


@pytest.mark.parametrize("schedule", ["fuse-ar-c", "fuse-ar-c-oneshot", "fuse-ar-c-lamport"])
def test_a_row_kernels_whole_allreduce_runs_from_the_plan_as_its_statement(schedule):
    """Its phase by its algorithm (codegen.work): the statement's events, never later (the
    plan does not write the per-row statistic the kernel keeps in registers: 512 bytes here,
    which moves Lamport's HBM-bound run by 1 ns)."""
    program, by_stmt, sim, result = _runs("studies/allreduce_rmsnorm.py", schedule,
                                          {"T": 128, "H": 4096, "P": 2})
    assert [o.stmt for o, _, _ in sim.statements] == [s.name for s in program.stmts]
    assert _events(result) == _events(by_stmt)
    assert by_stmt.time_s * (1 - 1e-3) <= result.time_s <= by_stmt.time_s


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
    copy_engine_parts), the statement's events and times."""
    from workbench import ir
    from workbench.transforms import CopyEngines

    f = load_study(spec)
    program = f.schedules["fuse-rs-c-ag"].apply()
    fused = next(s for s in program.stmts if isinstance(s.op, ir.Fused))
    program = CopyEngines(fused.outs[0].name, 8).apply(program)
    bound = bind_sizes(program, {"N": 2**20, "P": 4})
    by_stmt = simulate(program, preset("h200x4"), bound, reduced=False)
    sim = Simulation(program, preset("h200x4"), bound, reduced=False, plan=lower(program, 4))
    result = sim.run()
    assert fused.name in [o.stmt for o, _, _ in sim.statements]
    assert _event_log(result) == _event_log(by_stmt)
