"""studies.sweep: folding measured CSVs and predicting the study sweeps (CPU only)."""

import json

import click
import pandas as pd
import pytest

from studies.sweep import OPTIMIZER_SIZES
from workbench.cli import sweep


def _csv(tmp_path, name, rows):
    cols = ["spec", "program", "sizes", "P", "schedule", "kind", "time_ms", "check"]
    path = tmp_path / name
    pd.DataFrame(rows, columns=cols).to_csv(path, index=False)
    return path


def test_measured_rows_fold_sizes_keep_workbench_rows_and_let_later_files_win(tmp_path):
    first = _csv(tmp_path, "a.csv", [
        ("studies/model_parallel.py", "model_parallel", "T=1024 H=12288", 2, "fuse-ar-c",
         "workbench", 0.5, "ok (normwise)"),
        ("studies/model_parallel.py", "model_parallel", "T=1024 H=12288", 2,
         "cublas matmul alone", "baseline", 0.2, "(not checked)"),
        ("studies/adam.py:mixed", "adam", "N=16777216", 2, "unscheduled", "workbench", 0.4,
         "ok")])
    again = _csv(tmp_path, "b.csv", [
        ("studies/model_parallel.py", "model_parallel", "T=1024 H=12288", 2, "fuse-ar-c",
         "workbench", 0.3, "ok (normwise)")])
    rows = sweep.measured_rows([first, again])
    assert len(rows) == 2  # the baseline is left out, the re-measured case kept once
    mp = rows[rows.study == "model_parallel"].iloc[0]
    assert (mp["size"], mp["gpus"], mp["measured_s"]) == ("H=12288,T=2^10", 2, 0.3e-3)
    assert rows[rows.study == "adam-mixed"].iloc[0]["size"] == "N=2^24"


def test_parse_sizes_reads_every_written_form():
    want = {"T": 8192, "H": 12288}
    assert sweep._parse_sizes("T=8192 H=12288") == want
    assert sweep._parse_sizes("H=12288,T=8192") == want
    assert sweep.size_label(want) == "H=12288,T=2^13"


def test_predict_rows_cover_every_schedule_and_size_of_a_study():
    df = sweep.predict_rows("h200x4", studies=["sgd"], gpus=2)
    sizes = {sweep.size_label(s) for s in OPTIMIZER_SIZES}
    assert set(df["size"]) == sizes
    assert {"unscheduled", "fuse-rs-c-ag"} <= set(df["schedule"])
    assert (df["predicted_s"] > 0).all()


def test_a_pipelines_stages_share_the_gpus_of_the_run():
    # --gpus is the run's GPU count, as compile-and-measure's: 2 GPUs, 2 stages -> P = 1,
    # the P a measured pipeline CSV records
    df = sweep.predict_rows("h200x4", studies=["pipeline"], gpus=2)
    assert set(df["gpus"]) == {1}
    assert set(sweep.predict_rows("h200x4", studies=["sgd"], gpus=2)["gpus"]) == {2}


def test_a_pipeline_needs_a_multiple_of_its_stages():
    with pytest.raises(click.UsageError, match=r"--gpus 3: study 'pipeline' has 2 stages and "
                       r"needs a multiple of 2 GPUs; pass --gpus 2 or leave it out"):
        sweep.predict_rows("h200x4", studies=["pipeline"], gpus=3)


def test_measured_rows_read_a_runs_json_and_a_partial_one(tmp_path):
    record = {"spec": "studies/lamb.py:mixed", "program": "lamb", "sizes": {"N": 2**24, "P": 2},
              "P": 2, "comm_bytes": 2**26, "schedule": "fuse-rs-c-ag", "kind": "workbench",
              "median_ms": 0.25, "p10_ms": 0.24, "p90_ms": 0.26, "check": "ok"}
    path = tmp_path / "lamb.partial.json"
    path.write_text(json.dumps({"meta": {"complete": False}, "records": [record]}))
    rows = sweep.measured_rows([path])
    assert rows.iloc[0][["study", "schedule", "size", "gpus"]].tolist() == [
        "lamb-mixed", "fuse-rs-c-ag", "N=2^24", 2]
    assert rows.iloc[0]["measured_s"] == 0.25e-3
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    with pytest.raises(click.UsageError, match=r"bad.json must be compile-and-measure's JSON "
                       r"\(an object with 'records'\), got a list; pass its CSV"):
        sweep.measured_rows([bad])


def test_the_report_leads_with_the_speedup_over_the_fastest_baseline(tmp_path):
    """A compile-and-measure table with baselines (design note 54) -> measured.csv keeps
    each case's fastest baseline -> report.md states the speedup over it."""
    from workbench.cli.report import against_fastest_baseline, build_report
    from workbench.cli.results_table import table

    base = {"spec": "studies/adam.py", "program": "adam", "sizes": {"N": 2**26, "P": 1},
            "P": 1, "comm_bytes": 0, "p10_ms": 1.0, "p90_ms": 1.0, "min_ms": 1.0, "reps": 30,
            "check": "ok"}
    recs = [dict(base, schedule="unscheduled", kind="workbench", median_ms=1.1),
            dict(base, schedule="fuse-rs-c-ag", kind="workbench", median_ms=0.5),
            dict(base, schedule="nccl all_reduce + torch._fused_adam_", kind="baseline",
                 median_ms=0.6),
            dict(base, schedule="nccl all_reduce + torch.compile adam", kind="baseline",
                 median_ms=0.55)]
    path = tmp_path / "run.csv"
    table(recs).to_csv(path, index=False)
    rows = sweep.measured_rows([path])
    assert set(rows.fastest_baseline) == {"nccl all_reduce + torch.compile adam"}
    head = against_fastest_baseline(rows)
    assert head.to_dict("records") == [{"study": "adam", "size": "N=2^26", "gpus": 1,
                                        "schedule": "fuse-rs-c-ag", "ms": 0.5,
                                        "fastest baseline": "nccl all_reduce + torch.compile "
                                                            "adam",
                                        "baseline ms": 0.55, "speedup": 1.1}]
    rows.to_csv(tmp_path / "measured.csv", index=False)
    text = build_report(tmp_path)
    assert "## Measured speedup over the fastest baseline" in text
