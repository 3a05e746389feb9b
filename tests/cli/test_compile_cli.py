"""`workbench compile`: each schedule's CUDA sources, plan and options written without a GPU,
compiled with nvcc where it is installed (those tests are skipped without it), and a schedule
the backend refuses listed with its reason."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import ROOT

from codegen.plan_file import PLAN_FORMAT_VERSION, load_plan
from workbench.cli import compile as compile_cli
from workbench.cli.main import main
from workbench.options import CodegenOptions
from workbench.provenance import git_commit

HAS_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()


def run(capsys, *args):
    code = main(["compile", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_sources_plans_and_the_manifest(capsys, tmp_path):
    code, out, _ = run(capsys, "studies/sgd.py", "--gpus", "2", "--out", str(tmp_path),
                       "--set", "N=2**20", "--no-nvcc", "--codegen", "unroll=2")
    assert code == 0
    # CoCoNet's ring form (fuse-rs-c-ag-ring) is simulated only: the one not generated
    assert out.splitlines()[-1] == (f"wrote {tmp_path}: 4 of 5 schedules generated; not "
                                    "compiled (--no-nvcc)")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["commit"] == git_commit() and manifest["P"] == 2
    assert manifest["codegen"] == CodegenOptions(unroll=2).metadata()
    assert manifest["sizes"] == {"N": 2**20, "P": 2} and manifest["nvcc"] == "not run"
    by_name = {e["schedule"]: e for e in manifest["schedules"]}
    assert set(by_name) == {"unscheduled", "ar-opt", "rs-c-ag", "fuse-rs-c-ag",
                            "fuse-rs-c-ag-ring"}
    fused = by_name["fuse-rs-c-ag"]
    assert fused["status"] == "generated" and len(fused["kernels"]) == 1
    folder = tmp_path / fused["folder"]
    source = (folder / f"{fused['kernels'][0]}.cu").read_text()
    assert 'extern "C" __global__' in source and fused["kernels"][0] in source
    plan = load_plan(folder / "plan.json")  # the plan itself, loaded back
    assert plan.P == 2 and plan.options == CodegenOptions(unroll=2)
    assert [type(s).__name__ for s in plan.steps] == ["KernelStep"]
    assert plan.steps[0].spec.name == fused["kernels"][0]
    assert manifest["plan_format_version"] == PLAN_FORMAT_VERSION
    text = (folder / "plan.txt").read_text()
    assert "codegen options: unroll=2" in text and "N/2 (= 524288)" in text
    # the unscheduled program: NCCL and an elementwise kernel, with their buffers and counts
    plain = (tmp_path / "unscheduled" / "plan.txt").read_text()
    assert "NcclStep op=all_reduce reduce=add" in plain and "count=N (= 1048576)" in plain


def test_a_schedule_the_backend_refuses_is_listed_with_its_reason(capsys, tmp_path):
    spec = f"{ROOT / 'tests/programs/not_generated.py'}:ring_sgd"
    code, out, _ = run(capsys, spec, "--gpus", "4", "--out", str(tmp_path), "--no-nvcc")
    assert code == 0
    assert ("fuse-ring: not generated: statement g1_rs,w1_s,w1 (FusedAllreduce[NCCL ring]): "
            "simulated only: needs a fused network collective") in out
    entry = json.loads((tmp_path / "manifest.json").read_text())["schedules"][1]
    assert entry["status"] == "not generated" and "simulated only" in entry["reason"]
    assert not (tmp_path / entry["folder"]).exists()
    assert "1 of 2 schedules generated" in out


def test_without_nvcc_it_says_so_and_exits_0(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(compile_cli, "find_nvcc", lambda: None)
    code, out, _ = run(capsys, "studies/sgd.py", "--gpus", "2", "--out", str(tmp_path),
                       "--schedule", "fuse-rs-c-ag")
    assert code == 0 and out.endswith("not compiled: nvcc not found on PATH or at "
                                      "/usr/local/cuda/bin/nvcc\n")
    assert not list(tmp_path.rglob("*.cubin")) and list(tmp_path.rglob("*.cu"))


@pytest.mark.skipif(not HAS_NVCC, reason="nvcc (CUDA toolkit) not installed")
def test_every_kernel_compiles_to_a_cubin_beside_its_source(capsys, tmp_path, cubin_cache):
    code, out, _ = run(capsys, "studies/sgd.py", "--gpus", "2", "--out", str(tmp_path))
    assert code == 0 and "compiled with " in out.splitlines()[-1]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    generated = [e for e in manifest["schedules"] if e["status"] == "generated"]
    assert len(generated) == len(manifest["schedules"]) - 1  # the ring form: simulated only
    for e in generated:
        assert e["cubins"] == [f"{k}.cubin" for k in e["kernels"]]
        for k in e["kernels"]:
            assert k.encode() in (tmp_path / e["folder"] / f"{k}.cubin").read_bytes()


def test_autotuner_candidates_get_folders_of_their_own(capsys, tmp_path):
    code, out, _ = run(capsys, "studies/sgd.py", "--gpus", "2", "--out", str(tmp_path),
                       "--autotune", "--no-nvcc")
    assert code == 0
    folders = {e["schedule"]: e["folder"] for e in
               json.loads((tmp_path / "manifest.json").read_text())["schedules"]}
    auto = [n for n in folders if n.startswith("auto:")]
    assert auto and all(":" not in folders[n] and "#" not in folders[n] for n in auto)


@pytest.mark.parametrize("args, message", [
    (["--schedule", "nope"], "error: --schedule must name a schedule of studies/sgd.py, got "
                             "'nope'; known: ar-opt, fuse-rs-c-ag, fuse-rs-c-ag-ring, rs-c-ag, "
                             "unscheduled"),
    (["--codegen", "unroll=3"], "error: --codegen unroll must be one of (1, 2, 4), got 3; 1 is "
                                "the default"),
    (["--set", "M=4"], "error: --set must name sizes of program sgd, got M; known: N, P"),
    # a size P cannot slice: refused at compile as every run would refuse it (issue 35)
    (["--set", "N=1001"], "error: size N must be a multiple of P = 2, got 1001; pad it to "
                          "N = 1002"),
])
def test_bad_input_is_named(capsys, tmp_path, args, message):
    code, _, err = run(capsys, "studies/sgd.py", "--gpus", "2", "--out", str(tmp_path), *args)
    assert code == 2 and err.startswith(message)


def test_a_shipped_study_compiles_from_any_folder(capsys, tmp_path, monkeypatch):
    """`workbench compile studies/adam.py` outside a checkout (the wheel check runs it so):
    the shipped study is found, and its digest is taken of that file."""
    monkeypatch.chdir(tmp_path)
    assert main(["compile", "studies/adam.py", "--gpus", "4", "--out", "out", "--no-nvcc"]) == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert len(manifest["program_sha256"]) == 64
