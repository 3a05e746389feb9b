"""What compile-and-measure's ranks run is the plan `workbench compile` wrote (issue 38: lowered
once, shipped as is), on the CPU: the job names compiled folders, never a program file; a
folder's plans load back as the plans lowering makes, run through the runtime's step runners
(the CUDA driver faked) and compute the program's outputs in the interpreter (each plan's
schedule against the folder's program); `--plan DIR` runs a compiled folder as it is, and a
folder compiled for other GPUs is refused."""

import json

import pytest
from conftest import ROOT
from test_restore_inputs import _Gpu
from test_results_partial import no_gpu_needed  # noqa: F401 (a fixture)

import workbench.loader
import workbench.runtime.launcher as launcher
from codegen.compiled import read_compiled
from codegen.lower import lower
from workbench import interpreter
from workbench.cli.main import main
from workbench.errors import WorkbenchError
from workbench.loader import load
from workbench.runtime.executor import PlanRun

SIZES = {"N": 1024, "P": 1}


@pytest.fixture
def jobs(monkeypatch):
    """Launch nothing: keep each job's compiled folders as the ranks would read them, and
    their plans (a job's own folders go with its temporary folder)."""
    seen = []

    def launch(P, argv, hang_s=60.0, echo=None, **kw):
        job = json.loads(open(argv[-1]).read())
        folders = [read_compiled(p["folder"]) for p in job["programs"]]
        seen.append([(c, dict(c.plans(["all"]))) for c in folders])
        assert all(set(p) == {"folder", "schedules"} for p in job["programs"])
        raise launcher.RuntimeFault("stopped by the test")

    monkeypatch.setattr(launcher, "launch", launch)
    return seen


def _ranks_view(compiled, monkeypatch):
    """The (name, plan or why) a rank takes from the folder, with the program file out of
    reach: a rank that loaded it would fail here."""
    def no_file(spec):
        raise AssertionError(f"a rank loaded the program file {spec}")

    monkeypatch.setattr(workbench.loader, "load", no_file)
    plans = compiled.plans(["all"])
    monkeypatch.undo()
    return plans


def test_a_compiled_folder_runs_as_written(tmp_path, capsys, monkeypatch, jobs,
                                           no_gpu_needed):  # noqa: F811
    folder = tmp_path / "adam"
    assert main(["compile", "studies/adam.py", "--gpus", "1", "--out", str(folder),
                 "--no-nvcc"]) == 0
    assert main(["compile-and-measure", "--plan", str(folder), "--gpus", "1", "--set",
                 "N=1024", "--out", str(tmp_path / "res"), "--quiet"]) == 2
    assert "stopped by the test" in capsys.readouterr().err
    ((compiled, _),) = jobs[-1]
    assert compiled.folder == folder
    pf = load(str(ROOT / "studies/adam.py"))
    assert compiled.program == pf.program and compiled.defaults == pf.sizes
    by_name = dict(_ranks_view(compiled, monkeypatch))
    assert by_name["fuse-rs-c-ag-ring"].startswith("not generated: ")
    inputs = interpreter.random_inputs(compiled.program, SIZES)
    want = interpreter.run(compiled.program, inputs, SIZES)
    ran = []
    for name, sched in [("unscheduled", None), *pf.schedules.items()]:
        plan = by_name[name]
        if isinstance(plan, str):
            continue
        assert plan == lower(sched.apply() if sched else pf.program, 1), name  # as lowered
        if not any(b.peer for b in plan.buffers):  # (the fake driver maps no peer memory)
            gpu = _Gpu()  # every step through the runtime's preparers and runners
            run = PlanRun(gpu, plan, SIZES)
            run.upload(inputs)
            run.run()
            assert ("nccl", "all_reduce") in gpu.log or ("nccl", "reduce_scatter") in gpu.log
            ran.append(name)
        got = interpreter.run(plan.program, inputs, SIZES)  # the schedule the plan runs
        for old, new in zip(compiled.program.outputs, plan.program.outputs):
            err = interpreter.max_relative_error(got[new.name], want[old.name])
            assert err <= interpreter.output_tolerance(old.type), (name, old.name)
    assert ran == ["unscheduled", "ar-opt", "rs-c-ag", "rs-c-ag-sliced-state"]


def test_a_program_file_is_compiled_once_and_its_folder_shipped(tmp_path, capsys, jobs,
                                                                 no_gpu_needed):  # noqa: F811
    assert main(["compile-and-measure", "studies/sgd.py", "--gpus", "2", "--set", "N=1024",
                 "--schedule", "fuse-rs-c-ag", "--out", str(tmp_path), "--quiet"]) == 2
    ((compiled, plans),) = jobs[-1]
    assert compiled.names == ("unscheduled", "fuse-rs-c-ag") and compiled.P == 2
    fused = load(str(ROOT / "studies/sgd.py")).schedules["fuse-rs-c-ag"].apply()
    assert plans["fuse-rs-c-ag"] == lower(fused, 2)


def test_a_folder_compiled_for_other_gpus_is_refused(tmp_path, capsys, jobs,
                                                     no_gpu_needed):  # noqa: F811
    folder = tmp_path / "sgd"
    assert main(["compile", "studies/sgd.py", "--gpus", "2", "--out", str(folder),
                 "--no-nvcc"]) == 0
    capsys.readouterr()
    assert main(["compile-and-measure", "--plan", str(folder), "--gpus", "4",
                 "--out", str(tmp_path / "res")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --gpus must be the 2 GPUs {folder} was compiled for, got --gpus 4; compile "
        "it again with --gpus 4")
    assert not jobs


def test_a_folder_runs_with_the_options_it_was_compiled_with(tmp_path, capsys, jobs,
                                                             no_gpu_needed):  # noqa: F811
    folder = tmp_path / "sgd"
    assert main(["compile", "studies/sgd.py", "--gpus", "2", "--out", str(folder), "--no-nvcc",
                 "--codegen", "unroll=2"]) == 0
    capsys.readouterr()
    assert main(["compile-and-measure", "--plan", str(folder), "--gpus", "2",
                 "--out", str(tmp_path / "res")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: the codegen options must be those {folder} was compiled with (unroll=2), got "
        "the defaults; drop them, or compile it again with them")
    assert main(["compile-and-measure", "--plan", str(folder), "--gpus", "2", "--unroll", "2",
                 "--out", str(tmp_path / "res"), "--quiet"]) == 2
    assert "stopped by the test" in capsys.readouterr().err
    ((compiled, plans),) = jobs[-1]
    assert compiled.options.unroll == 2 and plans["unscheduled"].options.unroll == 2


def test_neither_a_program_nor_a_plan_is_refused(capsys):
    assert main(["compile-and-measure", "--gpus", "1"]) == 2
    assert "must be given a program file or a --plan folder, got neither" in (
        capsys.readouterr().err)


def test_a_folder_that_is_not_compiled_is_refused(tmp_path):
    with pytest.raises(WorkbenchError, match=r"^--plan must name a folder written by workbench "
                                             r"compile, got .* without a readable manifest"):
        read_compiled(tmp_path)
