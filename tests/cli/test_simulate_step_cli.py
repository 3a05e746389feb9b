"""`workbench simulate-step`: the table, CSV and JSON, the sweep over nodes, and pinned errors
(exit 2, one message)."""

import json

import pytest

from workbench.cli.main import main

SMALL = ["--d-model", "256", "--layers", "2", "--heads", "4", "--batch", "2"]


def run(capsys, *args):
    code = main(["simulate-step", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_table_csv_json_and_trace(capsys, tmp_path):
    csv, js, trace = tmp_path / "s.csv", tmp_path / "s.json", tmp_path / "t.json"
    code, out, _ = run(capsys, *SMALL, "--hardware", "dgx-h100", "--nodes", "1", "--nodes", "2",
                       "--csv", str(csv), "--json", str(js), "--trace", str(trace))
    assert code == 0, out
    assert "torch DDP + AdamW(fused)" in out and "workbench in backward" in out
    rows = json.loads(js.read_text())["rows"]
    assert [(r["nodes"], r["P"]) for r in rows] == [(1, 8)] * 3 + [(2, 16)] * 3
    for r in rows:
        parts = r["forward_ms"] + r["backward_ms"] + r["exposed_comm_ms"] + r["optimizer_ms"]
        assert parts == pytest.approx(r["step_ms"])
        assert r["step_ms"] == pytest.approx(r["forward_ms"] + r["backward_phase_ms"]
                                             + r["optimizer_phase_ms"])
    torch = rows[0]
    assert torch["side"] == "torch" and torch["x_torch"] == 1
    assert rows[1]["x_torch"] == pytest.approx(torch["step_ms"] / rows[1]["step_ms"])
    assert csv.read_text().splitlines()[0].startswith("hardware,nodes,P,params")
    assert json.loads(trace.read_text())["traceEvents"]


def test_one_gpu_is_plain_torch_without_communication(capsys, tmp_path):
    js = tmp_path / "s.json"
    code, out, _ = run(capsys, *SMALL, "--gpus", "1", "--schedule", "all", "--json", str(js))
    assert code == 0, out
    rows = json.loads(js.read_text())["rows"]
    assert rows[0]["variant"] == "torch plain + AdamW(fused)"
    assert all(r["exposed_comm_ms"] == 0 for r in rows)
    # every schedule of studies/adam.py that a backend generates, after and in backward
    schedules = {r["schedule"] for r in rows[1:]}
    assert {"unscheduled", "fuse-rs-c-ag", "rs-c-ag-sliced-state"} <= schedules


@pytest.mark.parametrize("args, message", [
    (["--d-model", "100", "--heads", "3"],
     "d_model must be a multiple of heads, got d_model 100 and heads 3"),
    (["--layers", "0"], "layers must be a positive integer, got 0"),
    # issue 40: ran for minutes, and priced steps of 10^18 ms
    (["--layers", "1000000"], "layers must be at most 1024 (far past any trained model's), "
                              "got 1000000; e.g. --layers 8, or pass --force to run anyway"),
    (["--batch", str(2**62)], f"batch must be at most 65536 (far past any trained model's), "
                              f"got {2**62}"),
    (["--batch", "4096", "--seq", "4096"], "batch x seq must be at most 4194304 tokens per "
                                           "GPU, got 4096 x 4096 = 16777216; e.g. --batch 16 "
                                           "--seq 1024, or pass --force to run anyway"),
    (["--gpus", "9"], "--gpus must be 1..8 (the GPUs of 1 node(s) of h100x8), got 9"),
    (["--bucket-mb", "0"], "--bucket-mb must be a number > 0, got 0.0"),
    (["--nodes", "0"], "--nodes must be a positive integer, got 0"),
    (["--schedule", "nope"], "--schedule must be one of auto, all, unscheduled, "),
    (["--gemm-efficiency", "1.5"], "--gemm-efficiency must be in (0, 1], got 1.5"),
    (["--hardware", "h999"], "hardware preset must be one of"),
])
def test_bad_input_exits_2_with_one_message(capsys, args, message):
    code, out, err = run(capsys, *args)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_autotune_adds_the_searched_schedules_across_nodes(capsys, tmp_path):
    js = tmp_path / "s.json"
    code, out, _ = run(capsys, *SMALL, "--hardware", "dgx-h100", "--nodes", "2", "--autotune",
                       "--schedule", "all", "--json", str(js))
    assert code == 0, out
    names = {r["schedule"] for r in json.loads(js.read_text())["rows"]}
    assert any(n.startswith("auto:hierarchical-split") for n in names)
    assert "fuse-rs-c-ag" not in names  # one NVLink domain only: not across nodes


def test_collective_grid_caps_the_fused_kernel(capsys, tmp_path):
    rows = {}
    for grid in ("0", "32"):
        js = tmp_path / f"g{grid}.json"
        code, out, _ = run(capsys, "--d-model", "1024", "--layers", "4", "--heads", "8",
                           "--batch", "4", "--gpus", "2", "--schedule", "fuse-rs-c-ag",
                           "--collective-grid", grid, "--json", str(js))
        assert code == 0, out
        rows[grid] = json.loads(js.read_text())["rows"]
    # torch does not change; after backward the capped kernel runs alone on its 32 SMs, no
    # faster (note 99); in backward it leaves backward the other SMs (design note 98)
    for key in ("step_ms", "backward_phase_ms", "optimizer_phase_ms"):
        assert rows["0"][0][key] == pytest.approx(rows["32"][0][key])
    assert rows["32"][1]["step_ms"] >= rows["0"][1]["step_ms"]
    assert rows["32"][1]["backward_phase_ms"] == pytest.approx(rows["0"][1]["backward_phase_ms"])
    assert rows["32"][2]["step_ms"] < rows["0"][2]["step_ms"]
    code, _, err = run(capsys, *SMALL, "--collective-grid", "-1")
    assert code == 2 and "collective-grid" in err


def test_collective_grid_at_one_gpu_moves_the_step_in_backward(capsys, tmp_path):
    # design note 99: at P = 1 the capped kernel runs beside backward on its SMs; the option
    # is accepted as at P > 1, and a cap at or above the SMs is the full grid
    rows = {}
    for grid in ("0", "48", "132"):
        js = tmp_path / f"g{grid}.json"
        code, out, _ = run(capsys, "--d-model", "1024", "--layers", "4", "--heads", "8",
                           "--batch", "1", "--gpus", "1", "--schedule", "fuse-rs-c-ag",
                           "--accumulate", "lend", "--collective-grid", grid, "--json", str(js))
        assert code == 0, out
        rows[grid] = json.loads(js.read_text())["rows"]
    assert rows["48"][2]["step_ms"] != pytest.approx(rows["0"][2]["step_ms"])
    assert rows["132"] == rows["0"]
    assert all(r["exposed_comm_ms"] == 0 for r in rows["48"])


def test_force_goes_past_the_work_limits_only(capsys):
    """Issue 40 item 3: a limit that bounds only the prediction's time is passed with --force;
    what cannot be priced (a width heads do not divide) is refused still."""
    code, out, err = run(capsys, "--layers", "1025", "--d-model", "64", "--force")
    assert code == 0, err
    assert "1025 layers" in out or " 1025 " in out
    code, out, err = run(capsys, "--d-model", "100", "--heads", "3", "--force")
    assert code == 2 and "d_model must be a multiple of heads" in err
