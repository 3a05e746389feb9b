"""`workbench sweep measured` reads results files as data (issue 26): a missing column, a
field of the wrong type, a binary file or an ok row without a finite time is one message and
exit 2, never a traceback, never a NaN folded into measured.csv."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.cli.main import main

GOOD = {"spec": "studies/sgd.py", "program": "sgd", "sizes": {"N": 1024, "P": 2}, "P": 2,
        "schedule": "unscheduled", "kind": "workbench", "median_ms": 1.0, "p10_ms": 0.9,
        "p90_ms": 1.1, "check": "ok", "comm_bytes": 4096}
MESSAGE = "must be a results table of workbench compile-and-measure (CSV or JSON), got "


def _measured(tmp_path, capsys, records) -> tuple[int, str]:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"records": records}))
    code = main(["sweep", "measured", str(path), "--out", str(tmp_path / "out")])
    return code, capsys.readouterr().err


def test_a_good_record_folds(tmp_path, capsys):
    code, err = _measured(tmp_path, capsys, [GOOD])
    assert code == 0, err
    assert "sgd,unscheduled" in (tmp_path / "out" / "measured.csv").read_text()


@pytest.mark.parametrize("change, message", [
    ({"spec": None}, "record 0 field spec must be a string, got null; pass the JSON "
                     "compile-and-measure wrote"),
    ({"P": "two"}, "record 0 field P must be a positive integer, got a string"),
    ({"spec": 3}, "record 0 field spec must be a string, got an integer"),
    ({"sizes": {"N": -1}}, "record 0 field sizes.N must be a positive integer, got a number < 1"),
    ({"median_ms": float("nan")}, "record 0 field median_ms must be a finite number >= 0 or "
                                  "null, got a non-finite number"),
    ({"median_ms": "fast"}, "record 0 field median_ms must be a finite number >= 0 or null, "
                            "got a string"),
    ({"median_ms": False}, "record 0 field median_ms must be a finite number >= 0 or null, "
                           "got a boolean"),
])
def test_wrong_fields_are_one_message(tmp_path, capsys, change, message):
    code, err = _measured(tmp_path, capsys, [{**GOOD, **change}])
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "out" / "measured.csv").exists()


def test_a_binary_csv(tmp_path, capsys):
    path = tmp_path / "r.csv"
    path.write_bytes("a,b\n1,2\n".encode("utf-16"))  # not UTF-8: read as garbage columns
    code = main(["sweep", "measured", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and MESSAGE in err


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(GOOD)), value=st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(), st.text(max_size=5),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(),
                                                         max_size=2)))
def test_fuzz_every_field(tmp_path, capsys, key, value):
    """Whatever one field holds: exit 0 with finite times in measured.csv, or exit 2 with
    one message."""
    import pandas as pd

    out = tmp_path / "out" / "measured.csv"
    out.unlink(missing_ok=True)
    code, err = _measured(tmp_path, capsys, [{**GOOD, key: value}])
    assert code in (0, 2) and "Traceback" not in err, err
    if code == 0:
        df = pd.read_csv(out)
        ok = df["check"].astype(str).str.startswith("ok")
        assert df.loc[ok, "measured_s"].map(lambda x: x > 0 and x < float("inf")).all()
    else:
        assert err.count("\n") == 1


def test_an_ok_csv_row_without_a_time(tmp_path, capsys):
    path = tmp_path / "r.csv"
    path.write_text("spec,program,sizes,P,schedule,kind,time_ms,check\n"
                    "studies/sgd.py,sgd,N=1024,2,unscheduled,workbench,,ok\n")
    code = main(["sweep", "measured", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and ("a measured row whose check is ok must have a finite time > 0, got "
                          "sgd unscheduled (N=2^10) with nan") in err


def test_a_subnormal_time_is_no_division_by_zero(tmp_path, capsys):
    # hypothesis found it: 5e-324 ms * 1e-3 underflows to 0 in the link bandwidth column
    code, err = _measured(tmp_path, capsys, [{**GOOD, "median_ms": 5e-324}])
    assert code in (0, 2) and "Traceback" not in err, err
