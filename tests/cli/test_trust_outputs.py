"""Outputs are never half-written and never land outside their folder (issue 26): `report`
confines file names read from CSVs to its folder and refuses CSVs that do not parse whole;
every output is written to a temporary file and renamed, so a full disk (here: a file size
limit) leaves the previous results intact; two runs into one --out are refused."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.cli.main import main
from workbench.cli.outputs import confined, output_lock, write_atomic
from workbench.errors import WorkbenchError

HEADER = "study,schedule,size,gpus,predicted_s\n"


def _report(capsys, folder) -> tuple[int, str]:
    code = main(["report", str(folder)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("study", ["../escaped", "/tmp/absolute-escape", "a/../../b", ".hidden",
                                   "line\nbreak"])
def test_report_never_writes_outside_its_folder(tmp_path, capsys, study):
    results = tmp_path / "results"
    results.mkdir()
    quoted = '"' + study.replace('"', '""') + '"'
    (results / "predicted.csv").write_text(
        HEADER + f"{quoted},unscheduled,N=2^20,4,0.001\n{quoted},fused,N=2^20,4,0.0005\n")
    before = set(tmp_path.rglob("*"))
    code, err = _report(capsys, results)
    assert code == 0, err
    new = set(tmp_path.rglob("*")) - before
    assert new and all(p.parent == results for p in new), new
    assert not Path("/tmp/absolute-escape.png").exists()


def test_confined_names_are_distinct_and_stay_in_the_folder(tmp_path):
    names = ["a/b", "a_b", "a-b", "../a_b", "a_b-" + "0" * 8, "", ".", "..", "x\x00y", "sgd"]
    paths = [confined(tmp_path, n) for n in names]
    assert all(p.parent == tmp_path and p.name not in ("", ".", "..") for p in paths)
    assert len(set(paths)) == len(paths)
    assert confined(tmp_path, "sgd", ".png") == tmp_path / "sgd.png"  # plain names unchanged


@pytest.mark.parametrize("text, message", [
    (HEADER + "sgd,unscheduled,N=2^20,4,0.001\nsgd,fused,N=2^2",
     "must end with a newline, got a last line cut short ('sgd,fused,N=2^2'); the file was "
     "not written whole: regenerate it with workbench sweep"),
    (HEADER + "sgd,unscheduled,N=2^20,4,0.001\nsgd,fused,N=2^20\n",
     "row 3 must have 5 fields, as the header, got 3"),  # ragged rows: issue 40
    (HEADER + "sgd,unscheduled,N=2^20,4,0.001\nsgd,fused,N=2^20,4,\n",
     "row 3 column predicted_s must be a finite time in seconds > 0 and at most 3.1536e+07 "
     "(a year), got an empty cell"),
    (HEADER + "sgd,unscheduled,N=2^20,4,fast\n",
     "row 2 column predicted_s must be a finite time in seconds > 0 and at most 3.1536e+07 "
     "(a year), got 'fast'"),
    (HEADER + "sgd,unscheduled,N=2^20,4,inf\n",
     "row 2 column predicted_s must be a finite time in seconds > 0"),
    # hypothesis found it: milliseconds of 1.8e305 s overflow the plot's log axis
    (HEADER + "sgd,unscheduled,N=2^20,0,1.797693134862316e+305\n",
     "row 2 column predicted_s must be a finite time in seconds > 0 and at most 3.1536e+07 "
     "(a year), got 1.797693134862316e+305; regenerate the file"),
    (HEADER + "sgd,,N=2^20,4,0.001\n", "row 2 must have every key (study, schedule, size, gpus)"),
    ("study,schedule\nsgd,x\n", "must have columns ['study', 'schedule', 'size', 'gpus', "
                                "'predicted_s']"),
])
def test_report_refuses_a_csv_that_does_not_parse_whole(tmp_path, capsys, text, message):
    (tmp_path / "predicted.csv").write_text(text)
    code, err = _report(capsys, tmp_path)
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "report.md").exists()


@pytest.mark.parametrize("raw", [b"\x89PNG\r\n\x1a\n\x00\x00", "a,b\n".encode("utf-16")])
def test_report_refuses_a_binary_steps_csv(tmp_path, capsys, raw):
    (tmp_path / "predicted.csv").write_text(HEADER + "sgd,unscheduled,N=2^20,4,0.001\n")
    (tmp_path / "steps.csv").write_bytes(raw)
    code, err = _report(capsys, tmp_path)
    assert code == 2 and "steps.csv must be a UTF-8 CSV table, got binary data" in err


def test_a_size_limit_leaves_the_previous_results_intact(tmp_path):
    """A full disk, as a file size limit: the write fails, exit 2 with one message, and the
    predicted.csv of the previous run is still there, whole."""
    out = tmp_path / "out"
    out.mkdir()
    previous = HEADER + "sgd,unscheduled,N=2^20,4,0.001\n"
    (out / "predicted.csv").write_text(previous)
    script = textwrap.dedent(f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (300, 300))
        from workbench.cli.main import main
        sys.exit(main(["sweep", "predict", "--study", "sgd", "--out", {str(out)!r}]))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert run.returncode == 2, run.stderr
    last = run.stderr.splitlines()[-1]  # after the progress lines
    assert last == (f"error: File too large ({out / 'predicted.csv'}); check the path and its "
                    "permissions") and "Traceback" not in run.stderr
    assert (out / "predicted.csv").read_text() == previous
    assert [p.name for p in out.iterdir()] == ["predicted.csv"]


def test_write_atomic_refuses_a_symlink(tmp_path):
    """A link at the target is neither written through nor replaced (issue 40): the command
    says so, and both the link and what it points to are as they were."""
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep")
    link = tmp_path / "out.csv"
    link.symlink_to(target)
    with pytest.raises(WorkbenchError, match=f"the output {link} must be a regular file or not "
                       "exist yet, got a symlink, which the workbench never replaces or writes "
                       "through; remove the link or name another file"):
        write_atomic(link, "new")
    assert target.read_text() == "keep" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.txt", "out.csv"]


def test_two_runs_into_one_out_folder(tmp_path, capsys):
    with output_lock(tmp_path, "--out"):
        code = main(["sweep", "predict", "--study", "sgd", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert (f"--out must be a folder no other run is writing to, got {tmp_path}, which "
            "another workbench run holds; wait for it or pick another folder") in err
    assert not (tmp_path / "predicted.csv").exists()


def test_sweep_predict_never_writes_a_nan_row(tmp_path, capsys, monkeypatch):
    """A prediction that is not a finite time (a model that divides by a zero somewhere) ends
    sweep predict with exit 2 and no predicted.csv, never NaN rows with exit 0."""
    import workbench.cli.sweep as sweep
    from workbench.cli.simulate import Prediction

    def nan_predict(loaded, cluster, sets):
        return [Prediction("unscheduled", loaded.program, float("nan"), 1.0, 1.0, "x",
                           object())]

    monkeypatch.setattr(sweep, "predict", nan_predict)
    code = main(["sweep", "predict", "--study", "sgd", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "the predicted time of sgd unscheduled N=2^20 must be a finite time > " \
                         "0, got nan; check the hardware profile h200x4" in err
    assert not (tmp_path / "predicted.csv").exists()


_CELL = st.one_of(st.floats(), st.text(max_size=6), st.integers(-3, 3), st.just(""))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(study=st.text(min_size=1, max_size=12), times=st.lists(_CELL, min_size=2, max_size=2),
       gpus=_CELL)
def test_fuzz_report_inputs(tmp_path_factory, study, times, gpus):
    """Whatever predicted.csv holds: report exits 0 having written only inside its folder,
    or 2 with one message."""
    import csv
    import io

    root = tmp_path_factory.mktemp("fuzz")
    results = root / "results"
    results.mkdir()
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["study", "schedule", "size", "gpus", "predicted_s"])
    w.writerow([study, "unscheduled", "N=2^20", gpus, times[0]])
    w.writerow([study, "fused", "N=2^20", gpus, times[1]])
    (results / "predicted.csv").write_text(buf.getvalue())
    code = main(["report", str(results)])
    assert code in (0, 2)
    assert all(p.parent == results for p in root.rglob("*") if p != results)
