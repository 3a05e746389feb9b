"""Results written as a run goes: rank 0 rewrites the file after every record (atomically, with
meta.complete), and run_job says where the records of a failed run are (CPU only: the launch is
stubbed)."""

import json
import os
from pathlib import Path

import pytest

from workbench.cli.main import main
from workbench.errors import RuntimeFault
from workbench.runtime import job as runtime_job
from workbench.runtime.worker import ResultsLog, write_json_atomic

META = {"device": "fake", "P": 2}
FAULT = ("rank 1 must exit 0, got exit code 7; every rank was stopped. Last lines:\n"
         "  rank 1 (exit 7):\n      dying on purpose")


def _read(path):
    return json.loads(path.read_text())


def test_every_record_rewrites_the_file_and_finish_marks_it_complete(tmp_path):
    out = tmp_path / "r.json"
    log = ResultsLog(str(out), META, writing=True)
    assert _read(out) == {"meta": {**META, "complete": False}, "records": []}
    log.append({"schedule": "unscheduled", "median_ms": 1.0})
    log.append({"schedule": "fused", "median_ms": 0.5})
    assert _read(out) == {"meta": {**META, "complete": False},
                          "records": [{"schedule": "unscheduled", "median_ms": 1.0},
                                      {"schedule": "fused", "median_ms": 0.5}]}
    log.finish()
    assert _read(out)["meta"]["complete"] is True and len(log) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_other_ranks_write_nothing(tmp_path):
    log = ResultsLog(str(tmp_path / "r.json"), META, writing=False)
    log.append({"x": 1})
    log.finish()
    assert list(tmp_path.iterdir()) == [] and log == [{"x": 1}]


def test_a_write_cut_off_midway_leaves_the_previous_file_whole(tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    log = ResultsLog(str(out), META, writing=True)
    log.append({"n": 1})
    replaced = []
    monkeypatch.setattr(os, "replace", lambda a, b: replaced.append((a, b)) or
                        (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        log.append({"n": 2})
    (tmp, target), = replaced
    assert Path(tmp).parent == out.parent and Path(target) == out  # a temporary file beside it
    assert _read(out)["records"] == [{"n": 1}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_write_json_atomic_replaces(tmp_path):
    out = tmp_path / "x.json"
    out.write_text("old")
    write_json_atomic(str(out), {"a": 1})
    assert _read(out) == {"a": 1}


# -- run_job and compile-and-measure, with the GPU parts stubbed


@pytest.fixture
def no_gpu_needed(monkeypatch):
    import importlib.util

    import workbench.runtime.compiler as compiler

    real = importlib.util.find_spec
    monkeypatch.setattr(runtime_job, "gpu_count", lambda: 8)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "pycuda" else real(name, *a))
    monkeypatch.setattr(compiler, "nvcc_path", lambda: "/usr/bin/true")


def _stub_launch(monkeypatch, records: int | None, fault: bool, complete: bool = False):
    import workbench.runtime.launcher as launcher

    seen = {}

    def launch(P, argv, hang_s=60.0, echo=None, **kw):
        job = json.loads(open(argv[-1]).read())
        seen["out"] = job["out"]
        if records is not None:
            log = ResultsLog(job["out"], {"P": P}, writing=True)
            for i in range(records):
                log.append({"spec": "studies/adam.py", "program": "adam",
                            "sizes": {"N": 1024}, "P": P, "comm_bytes": 4096,
                            "schedule": f"s{i}", "kind": "workbench", "check": "ok",
                            "median_ms": 1.0, "p10_ms": 0.9, "p90_ms": 1.1})
            if complete:
                log.finish()
        if fault:
            raise RuntimeFault(FAULT)
        return ["" for _ in range(P)]

    monkeypatch.setattr(launcher, "launch", launch)
    return seen


def test_run_job_names_the_partial_file_of_a_failed_run(tmp_path, monkeypatch, no_gpu_needed):
    _stub_launch(monkeypatch, records=3, fault=True)
    partial = tmp_path / "sub" / "adam-p2.partial.json"
    with pytest.raises(RuntimeFault) as e:
        runtime_job.run_job(["studies/adam.py"], 2, [{"N": 1024}], "all", 20, 2, False, 60.0,
                            partial=partial)
    assert str(e.value) == f"{FAULT}\n3 records were written before the fault: {partial}"
    assert _read(partial)["meta"]["complete"] is False and len(_read(partial)["records"]) == 3


def test_run_job_says_when_nothing_was_written(tmp_path, monkeypatch, no_gpu_needed):
    _stub_launch(monkeypatch, records=None, fault=True)
    partial = tmp_path / "p.partial.json"
    partial.write_text('{"meta": {}, "records": [1, 2]}')  # an earlier run's: not this one's
    with pytest.raises(RuntimeFault) as e:
        runtime_job.run_job(["studies/adam.py"], 2, [{"N": 1024}], "all", 20, 2, False, 60.0,
                            partial=partial)
    assert str(e.value) == (f"{FAULT}\nNo records were written before the fault (rank 0 had "
                            f"not started {partial}).")


def test_one_record_is_singular(tmp_path, monkeypatch, no_gpu_needed):
    _stub_launch(monkeypatch, records=1, fault=True)
    with pytest.raises(RuntimeFault, match=r"\n1 record was written before the fault: "):
        runtime_job.run_job(["studies/adam.py"], 2, [{"N": 1024}], "all", 20, 2, False, 60.0,
                            partial=tmp_path / "p.partial.json")


def test_a_complete_run_returns_its_results_and_removes_the_partial_file(
        tmp_path, monkeypatch, no_gpu_needed):
    _stub_launch(monkeypatch, records=2, fault=False, complete=True)
    partial = tmp_path / "p.partial.json"
    res = runtime_job.run_job(["studies/adam.py"], 2, [{"N": 1024}], "all", 20, 2, False, 60.0,
                              partial=partial)
    assert res["meta"] == {"P": 2, "complete": True} and len(res["records"]) == 2
    assert not partial.exists()


def test_a_run_that_exits_0_without_completing_is_a_fault(tmp_path, monkeypatch, no_gpu_needed):
    _stub_launch(monkeypatch, records=2, fault=False, complete=False)
    partial = tmp_path / "p.partial.json"
    with pytest.raises(RuntimeFault) as e:
        runtime_job.run_job(["studies/adam.py"], 2, [{"N": 1024}], "all", 20, 2, False, 60.0,
                            partial=partial)
    assert str(e.value) == ("rank 0 must mark its results complete when every rank exits 0, "
                            "got an incomplete file; 2 records were written before the fault: "
                            f"{partial}")


def test_compile_and_measure_keeps_partial_results_beside_its_results(
        tmp_path, monkeypatch, capsys, no_gpu_needed):
    seen = _stub_launch(monkeypatch, records=2, fault=True)
    code = main(["compile-and-measure", "studies/adam.py", "--gpus", "2", "--set", "N=1024",
                 "--out", str(tmp_path / "res"), "--quiet"])
    err = capsys.readouterr().err
    partial = tmp_path / "res" / "adam-p2.partial.json"
    assert code == 2 and seen["out"] == str(partial)
    assert err == f"error: {FAULT}\n2 records were written before the fault: {partial}\n"
    assert len(_read(partial)["records"]) == 2


def test_compile_and_measure_writes_its_results_and_no_partial_file(
        tmp_path, monkeypatch, capsys, no_gpu_needed):
    _stub_launch(monkeypatch, records=2, fault=False, complete=True)
    code = main(["compile-and-measure", "studies/adam.py", "--gpus", "2", "--set", "N=1024",
                 "--out", str(tmp_path), "--name", "run1", "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run1.command.txt", "run1.csv",
                                                          "run1.json"]
    assert _read(tmp_path / "run1.json")["meta"]["complete"] is True


def test_the_options_and_the_commit_travel_with_the_job_into_the_results(
        tmp_path, monkeypatch, capsys, no_gpu_needed):
    # The environment's knobs are read by the CLI, once, over the defaults; --unroll,
    # --collective-mode and --codegen set theirs; the workers get them in the job file.
    import workbench.runtime.launcher as launcher
    from workbench.options import CodegenOptions
    from workbench.provenance import git_commit
    from workbench.runtime.worker import job_meta

    jobs = []
    _stub_launch(monkeypatch, records=1, fault=False, complete=True)
    real = launcher.launch
    monkeypatch.setattr(launcher, "launch", lambda P, argv, **k: jobs.append(
        json.loads(open(argv[-1]).read())) or real(P, argv, **k))
    monkeypatch.setenv("WB_ROW_MIN_BLOCKS", "3")
    monkeypatch.setenv("WB_OVERLAP_BLOCKS", "66")
    code = main(["compile-and-measure", "studies/adam.py", "--gpus", "2", "--set", "N=1024",
                 "--out", str(tmp_path), "--name", "run1", "--quiet", "--unroll", "2",
                 "--collective-mode", "push", "--codegen", "row_prefetch=1"])
    assert code == 0, capsys.readouterr().err
    (job,) = jobs
    want = CodegenOptions(collective_mode="push", unroll=2, row_prefetch=True,
                          row_min_blocks=3, overlap_blocks=66)
    assert CodegenOptions(**job["options"]) == want
    assert job["provenance"] == {"commit": git_commit(), "codegen": want.metadata()}
    assert "unroll curve" in job["provenance"]["codegen"]["priced"]["unroll"]
    assert "not priced" in job["provenance"]["codegen"]["priced"]["row_prefetch"]
    meta = job_meta(job)  # what a worker writes into the results' meta
    assert meta["commit"] == git_commit() and meta["codegen"]["options"] == want.as_dict()
    assert "provenance" not in meta["job"] and meta["job"]["options"] == want.as_dict()
    import pandas as pd

    row = pd.read_csv(tmp_path / "run1.csv").iloc[0]
    assert row.codegen == ("collective_mode=push unroll=2 row_prefetch=True row_min_blocks=3 "
                           "overlap_blocks=66")


def test_a_bad_codegen_option_is_refused_before_any_gpu_work(capsys, no_gpu_needed):
    code = main(["compile-and-measure", "studies/adam.py", "--gpus", "2", "--set", "N=1024",
                 "--codegen", "blocks=3"])
    assert code == 2
    assert capsys.readouterr().err.startswith(
        "error: --codegen must be NAME=VALUE with NAME one of collective_mode, unroll, ")
