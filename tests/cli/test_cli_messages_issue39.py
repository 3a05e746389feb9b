"""Issue 39 item 8: each message a user hit, reproduced and pinned (the DSL's are in
tests/workbench/test_dsl_messages_issue39.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from cost_model.hardware import load_hardware
from workbench import autotune
from workbench.cli.main import main
from workbench.loader import load


def run_cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "prog.py"
    path.write_text("from workbench import *\n" + text)
    return str(path)


def test_an_inlined_expression_passed_to_a_schedule_names_the_statement_to_make(
        capsys, tmp_path):
    spec = _file(tmp_path, '''N = Size("N", multiple_of=P)
g = Tensor(float32, [N], Local, "g")
w = Tensor(float32, [N], Replicated, "w")
lr = Variable(float32, "lr")
g1 = AllReduce(Sum, g)
w1 = Update(w, w - lr * g1)
program = Program(inputs=[g, w, lr], outputs=[w1])

@schedule(program)
def bad(s):
    rs, ag = s.split(g1)
    s.reorder(w - lr * g1, before=ag)
''')
    code, _, err = run_cli(capsys, "check", spec)
    assert code == 2 and len(err) < 600, err
    assert ("got the expression w - (lr * g1), built at prog.py:13, which no statement "
            "computes") in err
    assert 'make it a statement in the program, `h = Compute(w - (lr * g1), name="h")`' in err


def test_all_gather_with_a_dim_says_the_second_argument_is_the_name(capsys, tmp_path):
    spec = _file(tmp_path, '''N = Size("N", multiple_of=P)
x = Tensor(float32, [N, 4], Sliced(0), "x")
y = AllGather(x, 0)
program = Program(inputs=[x], outputs=[y])
''')
    code, _, err = run_cli(capsys, "check", spec)
    assert code == 2
    assert ("AllGather's second argument is the statement's name and must be a string, got 0; "
            "AllGather gathers along the dim its input is Sliced on (here Sliced(0)), so drop "
            "the dim: AllGather(x), or AllGather(x, name='y') (at prog.py:4)") in err


def test_a_mesh_axis_across_nodes_is_not_told_per_node_1(capsys):
    code, _, err = run_cli(capsys, "simulate", str(ROOT / "studies/adam.py"), "--hardware",
                           "dgx-h100", "--nodes", "2", "--mesh", "tp=8,dp=2", "--axis", "dp",
                           "--set", "N=2**20")
    assert code == 0
    assert "per_node=1" not in err and "at most 1 GPUs" not in err
    assert ("must have its group's GPUs share an NVLink domain, got a group of 2 GPUs, each "
            "alone in its node of dgx-h100*2") in err
    assert "run the fused kernel over a mesh axis inside a node (e.g. --axis tp)" in err


def test_calibrate_without_gpus_names_calibrate(capsys, monkeypatch):
    import shutil

    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "nvidia-smi"
                        else real(name, *a, **k))
    code, _, err = run_cli(capsys, "calibrate", "--gpus", "2")
    assert code == 2
    assert "error: calibrate must run on a machine with NVIDIA GPUs" in err
    assert "compile-and-measure" not in err


def test_train_gpt_help_answers_without_torch(tmp_path):
    fake = tmp_path / "torch"  # a torch that is not there, whatever this machine has
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", "
                                      "name='torch')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    script = str(ROOT / "examples/train_gpt.py")
    done = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0 and "--optimizer" in done.stdout, done.stderr
    run = subprocess.run([sys.executable, script, "--optimizer", "torch"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert ("train_gpt.py must run with torch installed (with CUDA), got no module named "
            "'torch'; pip install torch") in run.stderr


def test_autotuner_labels_name_the_same_schedule_on_every_cluster():
    program = load(str(ROOT / "studies/adam.py")).program
    seen = {}
    for hardware, nodes in (("h200x4", 1), ("dgx-h100", 2)):
        cluster = load_hardware(hardware, nodes)
        placement = cluster.placement({"N": 2**20, "P": cluster.world_size})
        for c in autotune.search(program, placement=placement).candidates:
            steps = [t.to_json() for t in c.transforms]
            assert seen.setdefault(c.name, steps) == steps, c.name
    assert any("#" in name for name in seen)  # equal kinds, told apart by their transforms


def test_simulate_rows_carry_a_replayable_schedule(capsys, tmp_path):
    js, csv = tmp_path / "t.json", tmp_path / "t.csv"
    code, _, _ = run_cli(capsys, "simulate", str(ROOT / "studies/sgd.py"), "--autotune",
                         "--set", "N=2**20", "--json", str(js), "--csv", str(csv))
    assert code == 0
    rows = json.loads(js.read_text())
    loaded = load(str(ROOT / "studies/sgd.py"))
    best = next(r for r in rows if r["best"] == "*")
    assert any(r["schedule"].startswith("auto:") for r in rows)
    for r in rows:  # every row's transforms give its schedule again
        replayed = autotune.replay(loaded.program, {"transforms": r["transforms"]})
        if r["schedule"] in loaded.schedules:
            assert str(replayed) == str(loaded.schedules[r["schedule"]].apply()), r
        elif r["schedule"].startswith("auto:"):
            assert r["transforms"], r["schedule"]
    assert best["transforms"]
    assert "transforms" in csv.read_text().splitlines()[0].split(",")


@pytest.mark.parametrize("module", ["workbench.cli.main", "workbench.cli.outputs"])
def test_click_raises_no_deprecation_warning(module):
    """Click below 9 (pyproject pins it) and no deprecated name used: the help and the two
    modules the issue named import cleanly with deprecations as errors."""
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-m", "workbench",
                           "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    imported = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c",
                               f"import {module}"], capture_output=True, text=True, cwd=ROOT,
                              timeout=120)
    assert imported.returncode == 0, imported.stderr


def test_gemms_are_drawn_on_the_sm_track_not_hbm(capsys, tmp_path):
    trace, table = tmp_path / "t.json", tmp_path / "rows.json"
    code, out, _ = run_cli(capsys, "simulate", str(ROOT / "studies/model_parallel.py"),
                           "--trace", str(trace), "--trace-all", "--json", str(table))
    assert code == 0
    events = json.loads(trace.read_text())["traceEvents"]
    gemms = {e["cat"] for e in events if e.get("ph") == "X" and e["name"].endswith("MatMul")}
    assert gemms == {"sm", "stream"}
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert "SMs: arithmetic-bound kernels (GEMMs)" in names
    # the GEMMs' time is the SMs', not HBM's: no schedule of this layer is called hbm-bound
    assert {r["bottleneck"] for r in json.loads(table.read_text())} <= {"nvlink", "sm"}


def test_kernel_bound_says_sm_for_a_gemm_and_hbm_for_a_stream():
    from cost_model.ops.compute import Work, kernel_bound

    cluster = load_hardware("h200x4")
    gemm = Work(3 * 8192 * 12288 * 2, 2 * 8192 * 12288 * 12288 / 4, "f16")
    stream = Work(3 * 2**28 * 4, 2**28, "f32")
    assert kernel_bound(cluster, gemm) == "sm" and kernel_bound(cluster, stream) == "hbm"
