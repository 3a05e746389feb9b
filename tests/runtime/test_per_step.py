"""Per-step timing (compile-and-measure --per-step): the executor's events between steps,
the ranks' rows gathered per stage, the table, and the comparison with the cost model's
per-statement times. CPU only: the CUDA driver is faked."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from codegen.lower import lower
from cost_model.hardware import load_hardware
from cost_model.plan_cost import plan_cost
from workbench.cli.results_table import steps_table
from workbench.cli.sweep import main as sweep_main
from workbench.cli.sweep import step_rows
from workbench.interpreter import bind_sizes
from workbench.loader import load
from workbench.runtime.executor import PlanRun, step_label
from workbench.runtime.launches import LibraryCall
from workbench.runtime.worker import step_summary


class _Clock:
    """A fake stream: each enqueued step advances the GPU clock by its duration."""

    def __init__(self):
        self.now = 0.0


class _Event:
    def __init__(self, clock):
        self.clock, self.at = clock, None

    def record(self):
        self.at = self.clock.now

    def synchronize(self):
        pass

    def time_till(self, other):
        return other.at - self.at


class _Step:
    def __init__(self, stmts):
        self.stmts = stmts


def test_time_steps_times_each_step_between_events():
    clock = _Clock()

    class Drv:
        class Context:
            @staticmethod
            def synchronize():
                pass

        @staticmethod
        def Event():
            return _Event(clock)

    def step(ms):
        def go():
            clock.now += ms
        return LibraryCall(go)

    run = object.__new__(PlanRun)
    run.gpu = type("G", (), {"drv": Drv})()
    run.steps = (_Step(("y",)), _Step(("summed_rs", "out_s", "out")))
    run.launches = [step(1.5), step(0.25)]
    run.pristine = {}  # no input to restore
    got = run.time_steps(warmup=1, reps=3)
    assert [label for label, _ in got] == ["y", "summed_rs,out_s,out"]
    assert got[0][1] == pytest.approx([1.5] * 3) and got[1][1] == pytest.approx([0.25] * 3)


def test_step_labels_are_the_cost_models_statement_names():
    from codegen.lower import lower

    program = load("studies/model_parallel.py").schedules["fuse-ar-c"].apply()
    plan = lower(program, 2)
    assert [step_label(s) for s in plan.steps] == [s.name for s in program.stmts]


def test_step_summary_takes_each_stages_slowest_rank():
    steps = lambda a, b: [("x", [a] * 5), ("y", [b, b, b, b, b + 1])]  # noqa: E731
    rows = step_summary([steps(1.0, 2.0), steps(1.2, 2.0), steps(3.0, 4.0), steps(3.0, 5.0)],
                        P=2)
    assert [(r["stage"], r["stmts"], r["median_ms"]) for r in rows] == [
        (0, "x", 1.2), (0, "y", 2.0), (1, "x", 3.0), (1, "y", 5.0)]
    assert rows[3]["spread_ms"] == pytest.approx(np.percentile([5, 5, 5, 5, 6], 90) - 5)


def _adam_mixed_record(measured):
    sizes = {"N": 2**24, "P": 2}
    return {"spec": "studies/adam.py:mixed", "program": "adam", "sizes": sizes, "P": 2,
            "schedule": "unscheduled", "kind": "workbench", "median_ms": sum(measured.values()),
            "steps": [{"stage": 0, "stmts": k, "median_ms": v, "spread_ms": 0.01}
                      for k, v in measured.items()]}


def test_steps_table_and_predicted_per_statement(tmp_path):
    measured = {"g1": 0.2, "m1": 0.06, "v1": 0.06, "w1": 0.08, "w16": 0.03, "not-a-stmt": 0.01}
    rec = _adam_mixed_record(measured)
    table = steps_table([rec])
    assert table.stmts.tolist() == list(measured) and table.step.tolist() == list(range(6))
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"records": [rec]}))
    df = step_rows([path], "h200x4")
    program = load("studies/adam.py:mixed").program
    # the plan's price of each statement: its steps', as the run lowered it (decision 104)
    cost = plan_cost(lower(program, 2), load_hardware("h200x4"),
                     bind_sizes(program, rec["sizes"]))
    want = {name: c for c, name in zip(cost.stmts, cost.names)}
    assert set(want) == {"g1", "m1", "v1", "w1", "w16"}  # one step each
    for row in df.itertuples():
        if row.stmts == "not-a-stmt":
            assert row.predicted_ms is None or np.isnan(row.predicted_ms)
            continue
        c = want[row.stmts]
        assert row.predicted_ms == pytest.approx(c.time_s * 1e3)
        assert row.predicted_gpu_ms == pytest.approx((c.time_s - c.host_s) * 1e3)
        assert c.time_s > 0
        assert row.error == pytest.approx(row.predicted_gpu_ms / row.measured_ms - 1)


def test_steps_command_says_what_to_measure_with(tmp_path):
    rec = _adam_mixed_record({"g1": 0.2})
    del rec["steps"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"records": [rec]}))
    result = CliRunner().invoke(sweep_main, ["steps", str(path)])
    assert result.exit_code != 0
    assert ("the results must hold per-step times, got none; measure with workbench "
            "compile-and-measure --per-step") in result.output


def test_compile_and_measure_per_step_asks_the_workers_and_writes_the_steps_csv(
        tmp_path, monkeypatch):
    import importlib.util

    import workbench.runtime.compiler as compiler
    import workbench.runtime.job as runtime_job
    import workbench.runtime.launcher as launcher
    from workbench.cli.main import cli as cli_main
    from workbench.runtime.worker import ResultsLog

    real = importlib.util.find_spec
    monkeypatch.setattr(runtime_job, "gpu_count", lambda: 2)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "pycuda" else real(name, *a))
    monkeypatch.setattr(compiler, "nvcc_path", lambda: "/usr/bin/true")
    jobs = []

    def launch(P, argv, hang_s=60.0, echo=None, **kw):
        job = json.loads(open(argv[-1]).read())
        jobs.append(job)
        log = ResultsLog(job["out"], {"P": P}, writing=True)
        rec = _adam_mixed_record({"g1": 0.2, "m1": 0.06})
        log.append(dict(rec, comm_bytes=4096, check="ok", p10_ms=0.25, p90_ms=0.27))
        log.finish()
        return ["" for _ in range(P)]

    monkeypatch.setattr(launcher, "launch", launch)
    result = CliRunner().invoke(cli_main, [
        "compile-and-measure", "studies/adam.py:mixed", "--gpus", "2", "--set", "N=2**24",
        "--no-baselines", "--per-step", "--out", str(tmp_path), "--name", "t", "--quiet"])
    assert result.exit_code == 0, result.output
    assert jobs[0]["per_step"] is True
    steps = (tmp_path / "t.steps.csv").read_text().splitlines()
    assert steps[0] == "spec,sizes,P,schedule,stage,step,stmts,time_ms,spread_ms"
    assert [line.split(",")[6] for line in steps[1:]] == ["g1", "m1"]


def test_steps_command_names_a_schedule_the_program_lacks(tmp_path):
    rec = dict(_adam_mixed_record({"g1": 0.2}), schedule="no-such")
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"records": [rec]}))
    result = CliRunner().invoke(sweep_main, ["steps", str(path)])
    assert result.exit_code != 0
    assert (f"{path}: schedule 'no-such' must be one of studies/adam.py:mixed's, got none of "
            "that name (known: ar-opt, fuse-rs-c-ag, fuse-rs-c-ag-ring, rs-c-ag, "
            "rs-c-ag-sliced-state)") in result.output


def test_steps_command_says_what_a_malformed_json_lacks(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"no": "records"}))
    result = CliRunner().invoke(sweep_main, ["steps", str(path)])
    assert result.exit_code != 0
    assert result.exit_code == 2
    assert "r.json field records must be a list of records, got nothing; pass its CSV" in (
        result.output)


def test_a_statement_of_two_kernels_is_one_row():
    """A Norm over a Sliced tensor runs a partial-sum kernel and a combine kernel, both
    labelled with the statement: one row, their times summed, beside the statement's price."""
    from workbench.cli.sweep import merge_statement_steps

    steps = [{"stage": 0, "stmts": "u", "median_ms": 0.07},
             {"stage": 0, "stmts": "w_norm", "median_ms": 0.024},
             {"stage": 0, "stmts": "w_norm", "median_ms": 0.006},
             {"stage": 0, "stmts": "u_norm", "median_ms": 0.021},
             {"stage": 0, "stmts": "u_norm", "median_ms": 0.004},
             {"stage": 1, "stmts": "u_norm", "median_ms": 0.5}]
    got = merge_statement_steps(steps)
    assert [(s["stage"], s["stmts"], s["steps"]) for s in got] == [
        (0, "u", 1), (0, "w_norm", 2), (0, "u_norm", 2), (1, "u_norm", 1)]
    assert [s["median_ms"] for s in got] == pytest.approx([0.07, 0.030, 0.025, 0.5])
    assert steps[1]["median_ms"] == 0.024  # the input is left as it was
