"""benchmarks/training_step_validation.py: measured train_gpt.py JSONs at the P they name,
each variant predicted as its mode (design notes 84, 98), errors per phase."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import load_script


def _write(folder, P, model, suffix, variant, phases):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{P}_{model}_{suffix}.json").write_text(json.dumps(
        {"variant": variant, "P": P, "phases_ms": dict(zip(
            ("forward", "backward", "optimizer", "step"), phases))}))


def test_p_from_the_json_run_35s_variants_and_the_capped_grid(tmp_path):
    v = load_script("benchmarks/training_step_validation.py")
    gpu = tmp_path / "results" / "gpu"
    p2, p1 = gpu / "p2", gpu / "p1"
    # run 35's 806M rows (call 3, lane A) and one P = 1 row
    _write(p2, 2, "806m", "ref", "torch ddp 25MB", (6.71, 23.27, 8.60, 38.54))
    _write(p2, 2, "806m", "wb-ovls", "in backward, split", (6.89, 26.06, 0.08, 33.03))
    _write(p2, 2, "806m", "wb-ovlsg", "in backward, grid 32", (6.82, 21.46, 0.47, 28.80))
    _write(p2, 2, "806m", "noise", "ddp 5MB", (6.77, 37.88, 9.15, 55.22))  # not compared
    _write(p1, 1, "806m", "plain", "torch plain", (6.72, 11.84, 8.43, 26.98))
    out = tmp_path / "out"
    assert v.main(["--measured", f"{p2}:copy", "--measured", f"{p1}:lend", "--out", str(out),
                   "--grid-rates", "1,0.5"]) == 0
    rows = pd.read_csv(out / "validation.csv")
    assert list(rows.P) == [2, 2, 2, 1]
    assert list(rows.predicted_as) == ["ddp (copy)", "in (copy)", "in (copy, grid 32)",
                                       "plain (lend)"]
    by = rows.set_index("predicted_as")
    # the capped kernel leaves backward its SMs: a shorter step than the full grid's
    assert by.loc["in (copy, grid 32)", "step_pred_ms"] < by.loc["in (copy)", "step_pred_ms"]
    assert by.loc["in (copy)", "step_err_pct"] == pytest.approx(
        100 * (by.loc["in (copy)", "step_pred_ms"] - 33.03) / 33.03, abs=0.06)
    assert pd.isna(by.loc["in (copy)", "optimizer_err_pct"])  # under 0.5 ms: no %
    md = (out / "validation.md").read_text()
    assert "| p2 | 2 | 806m | in backward, grid 32 | in (copy, grid 32) |" in md
    assert "no calibrated block curve" in md
    # a slower capped kernel (rate 0.5 of the full grid) lengthens the predicted step
    rates = [line for line in (out / "grid-rates.md").read_text().splitlines()
             if line.startswith("| p2 |")]
    steps = [float(line.split("|")[5].split("/")[0]) for line in rates]
    assert len(steps) == 2 and steps[1] > steps[0]
    assert steps[0] == pytest.approx(by.loc["in (copy, grid 32)", "step_pred_ms"], abs=0.01)
    assert not list(out.glob("grid-rate-profile.json"))
