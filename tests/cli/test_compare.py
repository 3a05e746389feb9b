"""Comparator and report, on tables whose answers are known by construction."""

import pandas as pd
import pytest

from workbench.cli.compare import compare, per_case, summarize
from workbench.cli.main import main
from workbench.errors import WorkbenchError


def _tables():
    rows_p, rows_m = [], []
    # Case 1: simulator orders a < b < c like the GPU; case 2: it swaps the best two.
    for size, pred, meas in (("N=2^20", (1.0, 2.0, 3.0), (1.1, 1.9, 3.3)),
                             ("N=2^24", (1.0, 1.2, 3.0), (1.3, 1.0, 2.5))):
        for sched, p, m in zip(("unscheduled", "b", "c"), pred, meas):
            rows_p.append({"study": "adam", "schedule": sched, "size": size, "gpus": 4,
                           "predicted_s": p})
            rows_m.append({"study": "adam", "schedule": sched, "size": size, "gpus": 4,
                           "measured_s": m})
    return pd.DataFrame(rows_p), pd.DataFrame(rows_m)


def test_errors_and_picks():
    predicted, measured = _tables()
    joined = compare(predicted, measured)
    row = joined[(joined["size"] == "N=2^20") & (joined["schedule"] == "unscheduled")].iloc[0]
    assert row["signed_error"] == pytest.approx((1.0 - 1.1) / 1.1)
    cases = per_case(joined).set_index("size")
    assert bool(cases.loc["N=2^20", "picks_best"]) is True
    assert bool(cases.loc["N=2^24", "picks_best"]) is False
    assert cases.loc["N=2^20", "kendall_tau"] == pytest.approx(1.0)
    assert cases.loc["N=2^24", "kendall_tau"] == pytest.approx(1 / 3)
    summary = summarize(joined).set_index("study")
    assert summary.loc["ALL", "picks_best_share"] == 0.5
    assert summary.loc["adam", "max_abs_error"] == pytest.approx(abs(1.0 - 1.3) / 1.3)


def test_the_pick_is_held_against_the_fastest_baseline():
    """Where the measured rows carry their run's fastest baseline, each case says how the
    simulator's pick did against it: at N=2^24 it picks `unscheduled` (1.3 s measured) where
    the baseline took 1.2 s, a loss the summary's minimum shows."""
    predicted, measured = _tables()
    measured["fastest_baseline_s"] = measured["size"].map({"N=2^20": 2.2, "N=2^24": 1.2})
    cases = per_case(compare(predicted, measured)).set_index("size")
    assert cases.loc["N=2^20", "pick_vs_baseline"] == pytest.approx(2.2 / 1.1)
    assert cases.loc["N=2^24", "pick_vs_baseline"] == pytest.approx(1.2 / 1.3)
    summary = summarize(compare(predicted, measured)).set_index("study")
    assert summary.loc["ALL", "min_pick_vs_baseline"] == pytest.approx(1.2 / 1.3)
    # without baselines the column is absent and the summary says NaN, not a number
    assert "pick_vs_baseline" not in per_case(compare(*_tables())).columns
    assert pd.isna(summarize(compare(*_tables())).set_index("study").loc["ALL",
                                                                       "min_pick_vs_baseline"])


def test_missing_column_is_named():
    predicted, measured = _tables()
    with pytest.raises(WorkbenchError, match="measured table must have columns .*\\(missing "
                       "\\['measured_s'\\]"):
        compare(predicted, measured.drop(columns=["measured_s"]))


def test_report_command_writes_tables_and_figures(tmp_path, capsys):
    predicted, measured = _tables()
    predicted.to_csv(tmp_path / "predicted.csv", index=False)
    measured.to_csv(tmp_path / "measured.csv", index=False)
    assert main(["report", str(tmp_path)]) == 0
    out = (tmp_path / "report.md").read_text()
    assert "## Summary" in out and "picks_best_share" in out
    for name in ("report.md", "adam.png", "adam.pdf"):
        assert (tmp_path / name).stat().st_size > 0


def test_report_of_empty_dir(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "must hold predicted.csv or measured.csv, got neither" in capsys.readouterr().err


def test_unmeasured_and_failed_rows_are_left_out():
    predicted, measured = _tables()
    measured["check"] = "ok"
    measured.loc[0, "measured_s"] = float("nan")  # not generated
    measured.loc[1, "check"] = "MISMATCH max error 0.3"  # wrong output: its time means nothing
    joined = compare(predicted, measured)
    assert len(joined) == len(measured) - 2


def _steps():
    return pd.DataFrame({
        "study": ["adam", "adam"], "schedule": ["rs-c-ag", "rs-c-ag"],
        "size": ["N=2^28", "N=2^28"], "stage": [0, 0], "stmts": ["g1_rs", "m1_s"],
        "measured_ms": [2.0, 0.388], "predicted_ms": [2.02, 0.551],
        "predicted_gpu_ms": [2.0, 0.551], "error": [0.0, 0.42]})


def test_report_adds_the_per_step_table_and_its_misses(tmp_path, capsys):
    predicted, measured = _tables()
    predicted.to_csv(tmp_path / "predicted.csv", index=False)
    _steps().to_csv(tmp_path / "steps.csv", index=False)
    assert main(["report", str(tmp_path)]) == 0
    out = (tmp_path / "report.md").read_text()
    assert "## Per step: measured vs the cost model" in out
    assert "Steps off by more than 15%: 1 of 2" in out
    assert "- adam rs-c-ag N=2^28 `m1_s`: +42.0%" in out


def test_report_names_what_a_malformed_steps_csv_lacks(tmp_path, capsys):
    predicted, _ = _tables()
    predicted.to_csv(tmp_path / "predicted.csv", index=False)
    _steps().drop(columns=["error"]).to_csv(tmp_path / "steps.csv", index=False)
    assert main(["report", str(tmp_path)]) == 2
    assert ("steps.csv must have the columns of workbench sweep steps, got one without "
            "error; write it with workbench sweep steps RESULT.json --out "
            "DIR/steps.csv") in capsys.readouterr().err
