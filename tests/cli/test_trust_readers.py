"""Every reader is bounded and reads only what it should (issue 40, readers): `workbench
report` on ragged rows, sizes that are not sizes, non-numeric columns, repeated rows and rows
with nothing to plot ends in exit 2 naming the file, row and column, or in a report that says
what it could not show; an input that is a link, a FIFO or a folder is refused before it is
read (a link could point the report at any file and quote it), and one past the size limit is
refused before it is parsed."""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.cli.main import main
from workbench.errors import WorkbenchError
from workbench.files import read_bounded

HEADER = "study,schedule,size,gpus,predicted_s\n"
PREDICTED = HEADER + "sgd,unscheduled,N=2^20,4,0.001\nsgd,fused,N=2^20,4,0.0005\n"


def _report(capsys, folder) -> tuple[int, str]:
    code = main(["report", str(folder)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("files, message", [
    ({"predicted.csv": HEADER + "sgd,unscheduled,N=2^20,4,0.001,7,8\n"},
     "predicted.csv row 2 must have 5 fields, as the header, got 7"),
    ({"predicted.csv": HEADER + "sgd,unscheduled,x,4,0.001\n"},
     "predicted.csv row 2 column size must be sizes as NAME=VALUE[,NAME=VALUE] (VALUE a whole "
     "number or 2^K, at most 2^62), e.g. N=2^28, got 'x'"),
    ({"predicted.csv": HEADER + "sgd,unscheduled,N=2^99999,4,0.001\n"},
     "predicted.csv row 2 column size must be sizes"),
    ({"predicted.csv": HEADER + "sgd,unscheduled,N=2^20,four,0.001\n"},
     "predicted.csv row 2 column gpus must be a whole number from 1 to 4611686018427387904, "
     "got 'four'"),
    ({"predicted.csv": HEADER + "sgd,unscheduled,N=2^20,4,0.001\nsgd,unscheduled,N=2^20,4,"
                                "0.003\n"},
     "predicted.csv row 3 must be the only row of its study, schedule, size, gpus, got a "
     "repeat of row 2"),
    ({"predicted.csv": PREDICTED,
      "measured.csv": "study,schedule,size,gpus,measured_s,fastest_baseline,fastest_baseline_s"
                      "\nsgd,unscheduled,N=2^20,4,0.001,nccl,fast\n"},
     "measured.csv row 2 column fastest_baseline_s must be a finite number (or empty), got "
     "'fast'"),
    ({"predicted.csv": PREDICTED,
      "steps.csv": "study,schedule,size,stage,stmts,measured_ms,predicted_gpu_ms,error\n"
                   "sgd,f,N=2^20,0,a,1,1,bad\n"},
     "steps.csv row 2 column error must be a finite number (or empty), got 'bad'"),
])
def test_report_names_the_file_row_and_column_of_a_bad_cell(tmp_path, capsys, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code, err = _report(capsys, tmp_path)
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "report.md").exists()


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder"])
@pytest.mark.parametrize("name", ["predicted.csv", "steps.csv"])
def test_report_reads_no_link_fifo_or_folder(tmp_path, capsys, kind, name):
    """predicted.csv linked to a secret was read and quoted in report.md; a FIFO would block."""
    secret = tmp_path / "secret"
    secret.write_text("TOPSECRET\n")
    results = tmp_path / "results"
    results.mkdir()
    if name != "predicted.csv":
        (results / "predicted.csv").write_text(PREDICTED)
    path = results / name
    {"symlink": lambda: path.symlink_to(secret), "fifo": lambda: os.mkfifo(path),
     "folder": path.mkdir}[kind]()
    code, err = _report(capsys, results)
    got = {"symlink": "must be a regular file that can be read, got a symlink",
           "fifo": "must be a regular file, got a FIFO",
           "folder": "must be a regular file, got a folder"}[kind]
    assert code == 2 and f"results file {path} {got}" in err and "TOPSECRET" not in err
    assert not (results / "report.md").exists()


def test_report_refuses_a_huge_csv_before_reading_it(tmp_path, capsys):
    path = tmp_path / "predicted.csv"
    path.write_text(PREDICTED)
    os.truncate(path, 100 << 20)  # sparse: no 100 MB written
    code, err = _report(capsys, tmp_path)
    assert code == 2 and f"results file {path} must be at most 67108864 bytes, got " \
                         "104857600" in err


def test_rows_with_nothing_to_plot_and_no_baseline_are_said_not_drawn(tmp_path, capsys):
    """A measured table whose every time is empty was a traceback (max() of nothing); a
    table without the unscheduled row was an empty speedup table and exit 0 without a word."""
    (tmp_path / "measured.csv").write_text("study,schedule,size,gpus,measured_s\n"
                                           "sgd,fused,N=2^20,4,\n")
    code, err = _report(capsys, tmp_path)
    assert code == 0, err
    text = (tmp_path / "report.md").read_text()
    assert "No speedups: no row of the unscheduled schedule with a time" in text
    assert "No figure for sgd: no row with a time." in text
    assert not list(tmp_path.glob("*.png"))


def test_read_bounded_refuses_past_its_limit_and_quotes_nothing(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("SECRET" * 10)
    with pytest.raises(WorkbenchError, match=f"results file {path} must be at most 10 bytes, "
                       "got 60; pass another") as e:
        read_bounded(path, "results file", "pass another", limit=10)
    assert "SECRET" not in str(e.value)
    assert read_bounded(path, "results file", "pass another", limit=60) == b"SECRET" * 10


@pytest.mark.parametrize("suffix", [".json", ".csv"])
@pytest.mark.parametrize("kind", ["fifo", "huge"])
def test_sweep_measured_reads_no_fifo_and_no_huge_file(tmp_path, capsys, suffix, kind):
    """A 1 GB results JSON made sweep measured allocate terabytes; a FIFO would block it."""
    path = tmp_path / f"r{suffix}"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_text("{}")
        os.truncate(path, 100 << 20)
    code = main(["sweep", "measured", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    got = "must be a regular file, got a FIFO" if kind == "fifo" else \
        "must be at most 67108864 bytes, got 104857600"
    assert code == 2 and f"results file {path} {got}" in err and "Traceback" not in err


def test_sweep_measured_follows_a_link_the_user_names(tmp_path, capsys):
    real = tmp_path / "r.csv"
    real.write_bytes(b"\xff\xfe\x00binary")
    (tmp_path / "latest.csv").symlink_to(real)
    code = main(["sweep", "measured", str(tmp_path / "latest.csv"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "latest.csv must be a results table of workbench compile-and-measure " \
        "(CSV or JSON), got UnicodeDecodeError" in err and "Traceback" not in err


@pytest.mark.parametrize("sets, message", [
    (["--set", "N=2**80"], "--set N must be at most 2**62, got '2**80' = 2**80 or more"),
    (["--set", "N=4", "--set", "N=8"], "--set N must be given once, got 4 and 8; pass one value"),
])
@pytest.mark.parametrize("command", ["check", "simulate"])
def test_set_is_bounded_and_given_once(capsys, command, sets, message):
    """`--set N=4 --set N=8` kept the last without a word; N=2**80 passed check (issue 40)."""
    code = main([command, "studies/sgd.py", *sets])
    err = capsys.readouterr().err
    assert code == 2 and f"error: {message}" in err and "Traceback" not in err


def test_check_refuses_sizes_no_schedule_fits(capsys):
    """check said `N=2^80 ok` where simulate left every schedule out for memory (issue 40);
    the peak is what each schedule's plan allocates, as simulate reads it (decision 104)."""
    code = main(["check", "studies/adam.py", "--set", "N=2**35"])
    err = capsys.readouterr().err
    assert code == 2 and "error: sizes N=34359738368, P=4 must fit a GPU of h200x4 with at " \
                         "least one schedule, got none that fits (unscheduled: peak memory " \
                         "per rank must fit the GPU's 131.3 GiB, got 512.3 GiB" in err


_CELLS = st.one_of(st.text(max_size=8), st.integers(-2, 2**70), st.floats(),
                   st.sampled_from(["N=2^20", "N=2^99999", "H=4096,T=2^10", "x", "", "4",
                                    "four", "unscheduled", "inf", "1e308", "nan"]))
_GOOD = {"study": st.sampled_from(["sgd", "adam"]),
         "schedule": st.sampled_from(["unscheduled", "fused", "ar-opt"]),
         "size": st.sampled_from(["N=2^20", "N=2^22", "H=4096,T=2^10", "H=8192,T=2^10"]),
         "gpus": st.sampled_from([2, 4]), "stage": st.sampled_from([0, 1]),
         "stmts": st.sampled_from(["g1", "w1"]), "check": st.sampled_from(["ok", "MISMATCH"]),
         "fastest_baseline": st.sampled_from(["nccl", "torch"])}


def _cell(column: str):
    """Mostly what the column should hold (times: any float), now and then anything."""
    good = _GOOD.get(column, st.floats(1e-6, 10))
    return st.one_of(*[good] * 30, _CELLS)


def _rows(name: str):
    columns = _FILES[name]
    well_formed = st.lists(st.tuples(*(_cell(c) for c in columns)).map(list), max_size=8,
                           unique_by=lambda row: tuple(map(str, row[:4])))
    ragged = st.lists(st.lists(_CELLS, min_size=3, max_size=9), max_size=5)
    return st.one_of(well_formed, well_formed, well_formed, ragged)
_FILES = {"predicted.csv": ["study", "schedule", "size", "gpus", "predicted_s"],
          "measured.csv": ["study", "schedule", "size", "gpus", "measured_s", "check",
                           "fastest_baseline", "fastest_baseline_s"],
          "steps.csv": ["study", "schedule", "size", "stage", "stmts", "measured_ms",
                        "predicted_gpu_ms", "error"]}


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.fixed_dictionaries({}, optional={n: _rows(n) for n in _FILES}))
def test_fuzz_report_on_ragged_rows_and_any_cells(tmp_path_factory, files):
    """Whatever the three CSVs hold (ragged rows, sizes that are not sizes, text for numbers,
    absurd numbers, nothing to plot): exit 0, or 2 with one message, never a traceback."""
    import csv
    import io

    results = tmp_path_factory.mktemp("fuzz")
    for name, rows in files.items():
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(_FILES[name])
        w.writerows(rows)
        (results / name).write_text(buf.getvalue())
    code = main(["report", str(results)])
    assert code in (0, 2)
