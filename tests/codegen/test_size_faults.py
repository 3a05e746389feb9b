"""Sizes a plan's chunks cannot take are refused before any rank starts (issue 35's bad
input; the standard: what the DSL accepts is generated or refused by the verifier with the
reason, never by a rank at run time). `codegen.plan.size_faults` states the conditions once;
`check`, `compile` and `compile-and-measure` (program files and `--plan` folders) refuse with
them, exit 2 and one message, and the runtime refuses from the same function before it
allocates. Every shipped study's schedules take their default sizes at P = 2, 4 and 8."""

import json
from pathlib import Path

import pytest
from conftest import ROOT, load_study
from test_copy_engines import _schedule

import workbench.runtime.job
import workbench.runtime.launcher as launcher
from codegen.lower import lower
from codegen.plan import check_sizes, size_faults
from workbench.cli.main import main
from workbench.errors import RuntimeFault, WorkbenchError
from workbench.interpreter import bind_sizes

STUDIES = sorted(p.name for p in (ROOT / "studies").glob("*.py")
                 if p.name not in ("__init__.py", "optimizer_schedules.py", "sweep.py",
                                   "kernel_ops.py"))  # no program, or sizes without defaults


def _plans(spec: str, P: int):
    """(name, plan) of the study's unscheduled program and each schedule the GPU backend
    generates for P ranks."""
    loaded = load_study(spec)
    programs = [("unscheduled", loaded.program)]
    for name, sched in loaded.schedules.items():
        try:
            programs.append((name, sched.apply()))
        except WorkbenchError:
            continue  # illegal here: compile lists it with its reason
    for name, program in programs:
        try:
            yield name, lower(program, P)
        except WorkbenchError:
            continue  # not generated: compile lists it with its reason


@pytest.mark.parametrize("spec", [f"studies/{s}" for s in STUDIES]
                         + ["studies/adam.py:mixed", "studies/allreduce_rmsnorm.py:bf16"])
@pytest.mark.parametrize("P", [2, 4, 8])
def test_every_shipped_schedule_takes_its_default_sizes(spec, P):
    loaded = load_study(spec)
    bound = bind_sizes(loaded.program, {**loaded.sizes, "P": P})
    plans = list(_plans(spec, P))
    assert plans
    assert {name: size_faults(plan, bound) for name, plan in plans} == {n: [] for n, _ in plans}


@pytest.mark.parametrize("spec, schedule, sizes, fault", [
    # a MatMul overlapped with a fused collective: each of 4 chunks split over the P ranks
    ("studies/model_parallel.py", "overlap-mm-fuse-ar-c", {"T": 8196}, (
        "the MatMul's 8196 output rows must be a multiple of chunks x ranks = 8 to overlap in "
        "4 chunks")),
    # an MoE dispatch overlapped with its GEMM: NCCL's chunks of the exchanged rows
    ("studies/moe.py", "overlap-a2a-mm", {"T": 4098}, (
        "the 4098 rows must be a multiple of chunks = 4 to run in 4 chunks")),
    # a pipelined hierarchy's three legs, chunk by chunk over a rank's node slice
    ("studies/pipeline_hierarchy.py", "pipelined-c4", {"N": 1048578}, (
        "a rank's node slice of 1048578 elements must be a multiple of chunks = 4")),
    # a row kernel whose row outgrows the registers its threads keep between passes
    ("studies/rmsnorm.py", "fused", {"H": 20000}, (
        "a row kernel's rows must have at most 16384 elements")),
])
def test_each_kind_of_chunk_is_checked(spec, schedule, sizes, fault):
    loaded = load_study(spec)
    plan = dict(_plans(spec, 2))[schedule]
    bad = bind_sizes(loaded.program, {**loaded.sizes, **sizes, "P": 2})
    (found,) = size_faults(plan, bad)
    assert fault in found
    with pytest.raises(RuntimeFault, match="must"):  # the runtime's refusal, the same message
        check_sizes(plan, bad)
    assert size_faults(plan, bind_sizes(loaded.program, {**loaded.sizes, "P": 2})) == []


def test_copy_engine_pieces_are_checked():
    program = _schedule("studies/adam.py", "fuse-rs-c-ag-ce")  # 8 pieces per slice
    plan = lower(program, 2)
    (fault,) = size_faults(plan, bind_sizes(program, {"N": 20, "P": 2}))
    assert "a rank's slice of 10 elements must be a multiple of chunks = 8" in fault
    assert size_faults(plan, bind_sizes(program, {"N": 32, "P": 2})) == []


MESSAGE = ("error: schedule overlap-mm-fuse-ar-c at H=12288, P=2, T=8196: statement "
           "y,summed_rs,out_s,out: the MatMul's 8196 output rows must be a multiple of chunks x "
           "ranks = 8 to overlap in 4 chunks; pick sizes that divide, or a chunk count that "
           "divides them\n")


def test_compile_refuses_before_writing(capsys, tmp_path):
    out = tmp_path / "mp"
    assert main(["compile", "studies/model_parallel.py", "--gpus", "2", "--set", "T=8196",
                 "--out", str(out), "--no-nvcc"]) == 2
    assert capsys.readouterr().err == MESSAGE
    assert not (out / "manifest.json").exists() and not (out / "program.json").exists()
    assert not any(p.is_dir() for p in out.iterdir())  # no schedule's folder either


def test_compile_and_measure_refuses_before_any_rank(capsys, tmp_path, monkeypatch):
    # before the machine is asked for GPUs: the same message on a machine without any
    launched = []
    monkeypatch.setattr(launcher, "launch", lambda *a, **k: launched.append(a))
    assert main(["compile-and-measure", "studies/model_parallel.py", "--gpus", "2", "--set",
                 "T=8196", "--out", str(tmp_path / "res")]) == 2
    assert capsys.readouterr().err == MESSAGE
    assert not launched


def test_a_compiled_folder_is_checked_at_the_sizes_it_is_run_at(capsys, tmp_path, monkeypatch):
    folder = tmp_path / "mp"
    assert main(["compile", "studies/model_parallel.py", "--gpus", "2", "--out", str(folder),
                 "--no-nvcc"]) == 0  # its defaults divide
    manifest = json.loads((folder / "manifest.json").read_text())
    assert {e["schedule"] for e in manifest["schedules"]} >= {"overlap-mm-fuse-ar-c"}
    capsys.readouterr()
    launched = []
    monkeypatch.setattr(launcher, "launch", lambda *a, **k: launched.append(a))
    assert main(["compile-and-measure", "--plan", str(folder), "--gpus", "2", "--set",
                 "T=8196", "--out", str(tmp_path / "res")]) == 2
    assert capsys.readouterr().err == MESSAGE
    assert not launched


def test_a_sweep_point_that_fixes_the_defaults_is_taken(capsys, tmp_path, monkeypatch):
    """The check is at the sizes each run takes, not the file's defaults: --gpus 3 cannot
    slice T = 8192, and --set T=8208 (a multiple of 3 x 4 chunks) runs."""
    def stop():
        raise RuntimeFault("stopped after the size check")

    monkeypatch.setattr(workbench.runtime.job, "gpu_count", stop)
    assert main(["compile-and-measure", "studies/model_parallel.py", "--gpus", "3", "--set",
                 "T=8208", "--set", "H=12288", "--out", str(tmp_path / "res")]) == 2
    assert capsys.readouterr().err == "error: stopped after the size check\n"
    assert Path(tmp_path / "res").exists()


def test_simulate_leaves_out_a_schedule_the_sizes_cannot_run(capsys):
    """A simulated win must be a schedule that can run: at T = 8196 on 4 GPUs the overlapped
    layer (its best at T = 8192) is left out, saying why, and another is best."""
    assert main(["simulate", "studies/model_parallel.py", "--hardware", "h200x4", "--set",
                 "T=8196"]) == 0
    out, err = capsys.readouterr()
    assert ("schedule overlap-mm-fuse-ar-c left out on h200x4: statement y,summed_rs,out_s,out: "
            "the MatMul's 8196 output rows must be a multiple of chunks x ranks = 16") in err
    best = [line.split()[0] for line in out.splitlines() if line.rstrip().endswith("*")]
    assert best == ["fuse-ar-c"]
