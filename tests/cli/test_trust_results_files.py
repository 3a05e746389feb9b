"""Results files stay data (issue 26): `workbench sweep steps RESULT.json` never runs a program
file that a record names unless the user passes it (--program), and then only with the
content the record's sha256 names; every field it reads is checked."""

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest

from workbench.cli.main import main

REPO = Path(__file__).resolve().parents[2]

EVIL = """
from pathlib import Path
Path(__file__).with_name("ran.txt").write_text("the results ran me")
from workbench import *
N = Size("N")
g = Tensor(float32, [N], Local, "g")
program = Program(inputs=[g], outputs=[AllReduce(Sum, g)])
"""


def _record(spec: str, **extra) -> dict:
    return {"spec": spec, "program": "p", "sizes": {"N": 2**20, "P": 2}, "P": 2,
            "schedule": "unscheduled", "kind": "workbench", "median_ms": 0.3,
            "steps": [{"stage": 0, "stmts": "g1", "median_ms": 0.3, "spread_ms": 0.0}],
            **extra}


def _results(folder: Path, *records) -> Path:
    path = folder / "result.json"
    path.write_text(json.dumps({"records": list(records)}))
    return path


def _steps(capsys, *args) -> tuple[int, str]:
    code = main(["sweep", "steps", *map(str, args)])
    return code, capsys.readouterr().err


def test_a_program_named_by_results_is_never_run(tmp_path, capsys):
    (tmp_path / "evil.py").write_text(EVIL)
    path = _results(tmp_path, _record(str(tmp_path / "evil.py")))
    code, err = _steps(capsys, path)
    assert code == 2 and not (tmp_path / "ran.txt").exists()
    assert (f"record 0's program file {tmp_path / 'evil.py'} must be passed with --program (a "
            "program file is Python and runs when loaded, so results never choose one), got "
            f"--program none; pass --program {tmp_path / 'evil.py'} if you trust that file"
            ) in err


def test_a_study_name_loads_the_installed_study_not_a_file_beside_the_results(
        tmp_path, capsys, monkeypatch):
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "sgd.py").write_text(EVIL)
    monkeypatch.chdir(tmp_path)
    path = _results(tmp_path, _record("studies/sgd.py"))
    code, _ = _steps(capsys, path)
    assert not (tmp_path / "studies" / "ran.txt").exists()
    assert code == 0


def test_the_content_must_be_what_the_run_measured(tmp_path, capsys):
    prog = tmp_path / "mine.py"
    prog.write_text((REPO / "studies" / "sgd.py").read_text())
    measured = hashlib.sha256(b"another file").hexdigest()
    path = _results(tmp_path, _record("elsewhere/mine.py", program_sha256=measured))
    code, err = _steps(capsys, path, "--program", prog)
    assert code == 2
    assert (f"record 0's program elsewhere/mine.py must be the file the run measured (sha256 "
            f"{measured[:16]}...), got {prog} with sha256") in err
    digest = hashlib.sha256(prog.read_bytes()).hexdigest()
    path = _results(tmp_path, _record("elsewhere/mine.py", program_sha256=digest))
    code, err = _steps(capsys, path, "--program", prog)
    assert code == 0, err


@pytest.mark.parametrize("change, message", [
    ({"sizes": {"N": "many"}}, "record 0 field sizes.N must be a positive integer, got "
                               "a string"),
    ({"sizes": None}, "record 0 field sizes must be a mapping"),
    ({"schedule": 7}, "record 0 field schedule must be a schedule name, got an integer"),
    ({"steps": [[1, 2]]}, "record 0 field steps[0] must be a mapping (stage, stmts, median_ms)"),
    ({"steps": [{"stage": 0, "stmts": "g1", "median_ms": float("nan")}]},
     "record 0 field steps[0].median_ms must be a finite time >= 0 in ms, got a non-finite number"),
    ({"steps": [{"stage": "x", "stmts": "g1", "median_ms": 1}]},
     "record 0 field steps[0].stage must be an integer >= 0, got a string"),
    ({"program_sha256": "abc"}, "record 0 field program_sha256 must be 64 hex digits"),
    ({"spec": 5}, "record 0 field spec must be the name of the program file measured, got an "
                  "integer"),
])
def test_wrong_typed_fields_are_one_message(tmp_path, capsys, change, message):
    path = _results(tmp_path, {**_record("studies/sgd.py"), **change})
    code, err = _steps(capsys, path)
    assert code == 2 and message in err and "Traceback" not in err


def test_records_that_are_not_a_list(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text('{"records": 7}')
    code, err = _steps(capsys, path)
    assert code == 2 and "field records must be a list of records, got an integer" in err


def test_a_step_measured_at_0_ms_has_an_empty_error(tmp_path, capsys):
    """A 0 ms step was a ZeroDivisionError traceback (issue 40)."""
    record = _record(str(REPO / "studies" / "sgd.py"),
                     steps=[{"stage": 0, "stmts": "g1", "median_ms": 0.0, "spread_ms": 0.0}])
    out = tmp_path / "steps.csv"
    code, err = _steps(capsys, _results(tmp_path, record), "--out", out)
    assert code == 0, err
    row = pd.read_csv(out).iloc[0]
    assert row["measured_ms"] == 0 and row["predicted_gpu_ms"] > 0 and pd.isna(row["error"])
