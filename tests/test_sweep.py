"""studies.sweep: folding measured CSVs and predicting the study sweeps (CPU only)."""

import pandas as pd

from studies import sweep


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
    sizes = {sweep.size_label(s) for s in sweep.OPTIMIZER_SIZES}
    assert set(df["size"]) == sizes
    assert {"unscheduled", "fuse-rs-c-ag"} <= set(df["schedule"])
    assert (df["predicted_s"] > 0).all()
