"""benchmarks/gpu/training_summary.py: the table of train_gpt.py runs (no torch needed)."""

from __future__ import annotations

import json

from conftest import load_script


def _summary():
    return load_script("benchmarks/gpu/training_summary.py")


def _run(optimizer, variant, step, params=806e6):
    return {"optimizer": optimizer, "variant": variant, "params": params, "model_dim": 2048,
            "layers": 16, "batch": 1, "block": 128, "P": 1, "host_step_ms": step + 0.5,
            "phases_ms": {"forward": 6.0, "backward": 12.0, "optimizer": step - 18.0,
                          "step": step}}


def test_ratios_are_against_the_fastest_torch_run_of_the_same_model(tmp_path, capsys):
    s = _summary()
    runs = [_run("torch", "torch ddp 25MB, compile model", 43.3),
            _run("torch", "torch plain, compile model", 27.1),
            _run("workbench", "workbench zero, compile model", 31.5),
            _run("torch", "torch plain, compile model", 30.4, params=101e6)]
    for i, r in enumerate(runs):
        (tmp_path / f"{i}.json").write_text(json.dumps(r))
    (tmp_path / "other.json").write_text("{}")  # not a train_gpt.py result: left out
    assert s.main([str(tmp_path), "--out", str(tmp_path / "t.md")]) == 0
    rows = (tmp_path / "t.md").read_text().splitlines()[2:]
    assert [r.split(" | ")[2] for r in rows] == [
        "torch plain, compile model", "torch plain, compile model",
        "torch ddp 25MB, compile model", "workbench zero, compile model"]
    assert rows[1].endswith("| 1.00x |") and rows[2].endswith("| 0.63x |")
    assert rows[3].endswith("| - | 0.86x |")  # no host phases recorded
    runs[2]["host_phases_ms"] = {"forward": 6.5, "backward": 12.25, "optimizer": 0.1,
                                 "zero_grad": 0.2}
    (tmp_path / "2.json").write_text(json.dumps(runs[2]))
    s.main([str(tmp_path), "--out", str(tmp_path / "t.md")])
    rows = (tmp_path / "t.md").read_text().splitlines()[2:]
    assert rows[3].endswith("| 6.50 / 12.25 / 0.10 | 0.86x |")
    assert s.main([str(tmp_path / "none")]) == 2
    assert "results must hold train_gpt.py JSON files" in capsys.readouterr().err


def test_bf16_runs_are_compared_with_the_fastest_bf16_torch_run(tmp_path):
    s = _summary()
    runs = [_run("torch", "torch plain, compile model", 27.0),
            {**_run("torch", "torch plain, compile model, bf16", 20.0), "precision": "bf16"},
            {**_run("workbench", "workbench, compile model, bf16-params", 16.0),
             "precision": "bf16-params"}]
    for i, r in enumerate(runs):
        (tmp_path / f"{i}.json").write_text(json.dumps(r))
    s.main([str(tmp_path), "--out", str(tmp_path / "t.md")])
    rows = (tmp_path / "t.md").read_text().splitlines()[2:]
    # the fp32 run is its own group; the bf16-params workbench run is against torch's AMP
    assert [(r.split(" | ")[0].split(", ")[-1], r[-7:]) for r in rows] == [
        ("bf16)", "1.00x |"), ("bf16)", "1.25x |"), ("fp32)", "1.00x |")]
