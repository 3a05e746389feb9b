"""`workbench calibrate`: CLI errors (no GPU needed) and fitting a raw file with --from-raw."""

import json

import pytest
from click.testing import CliRunner

from cost_model import calibration
from cost_model.hardware import load_hardware, preset
from workbench.cli.measure import calibrate
from workbench.errors import HardwareError


def _run(args):
    return CliRunner().invoke(calibrate, args)


def test_gpus_must_be_positive():
    r = _run(["--gpus", "0"])
    assert "--gpus must be at least 1, got 0" in str(r.exception)


def test_passes_must_be_positive():
    r = _run(["--gpus", "2", "--passes", "0"])
    assert "--passes must be at least 1, got 0" in str(r.exception)


def test_out_must_be_json(tmp_path):
    r = _run(["--gpus", "2", "--out", str(tmp_path / "p.txt")])
    assert "--out must name a .json profile" in str(r.exception)


def test_from_raw_gpu_mismatch(tmp_path):
    raw = tmp_path / "r.json"
    raw.write_text(json.dumps(calibration.synthetic_raw(preset("h200x4"), 2, [2**20], [])))
    r = _run(["--gpus", "4", "--from-raw", str(raw), "--out", str(tmp_path / "p.json")])
    assert "gpus must equal --gpus, got 2" in str(r.exception)


def test_from_raw_single_gpu_writes_a_loadable_profile(tmp_path):
    # P = 1: no collectives to fit, so this runs in a moment; the device fields come through
    raw = tmp_path / "r.json"
    raw.write_text(json.dumps(calibration.synthetic_raw(preset("h100x8"), 1, [], [])))
    out = tmp_path / "p.json"
    r = _run(["--gpus", "1", "--from-raw", str(raw), "--out", str(out)])
    assert r.exit_code == 0, r.output
    c = load_hardware(str(out))
    assert c.gpus_per_node == 1
    assert c.gpu.hbm_bandwidth_Bps == pytest.approx(preset("h100x8").gpu.hbm_bandwidth_Bps,
                                                    rel=1e-3)


@pytest.mark.gpu(2)
def test_calibrate_on_gpus(tmp_path):
    out = tmp_path / "profile.json"
    r = _run(["--gpus", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert load_hardware(str(out)).gpus_per_node == 2
    assert (tmp_path / "profile.raw.json").is_file()


# -- the dropout section (calibrate._dropout), run_job faked


def _records(plain_ok=True):
    spec = "studies/elementwise_ops.py"
    return {"records": [
        {"spec": f"{spec}:bias_residual", "median_ms": 0.18, "ok": plain_ok,
         "check": "ok" if plain_ok else "MISMATCH max error 1"},
        {"spec": f"{spec}:bias_dropout_residual", "median_ms": 0.23, "ok": True, "check": "ok"}]}


def test_dropout_section_from_the_generated_kernels(monkeypatch):
    from workbench.runtime import calibrate

    calls = []

    def fake_run_job(specs, P, sizes, schedule, *a, **k):
        calls.append((specs, P, sizes, schedule))
        return _records()

    monkeypatch.setattr(calibrate, "run_job", fake_run_job)
    got = calibrate._dropout(2, 60.0, None)
    assert got == {"dropout": {"numel": 8192 * 12288, "plain_ms": 0.18, "dropout_ms": 0.23}}
    specs, P, sizes, schedule = calls[0]
    assert [s.rsplit(":", 1)[1] for s in specs] == ["bias_residual", "bias_dropout_residual"]
    assert (P, sizes, schedule) == (2, [{"T": 8192, "H": 12288}], "unscheduled")


def test_dropout_section_records_a_mismatch_or_a_fault(monkeypatch):
    from workbench.errors import RuntimeFault
    from workbench.runtime import calibrate

    monkeypatch.setattr(calibrate, "run_job", lambda *a, **k: _records(plain_ok=False))
    got = calibrate._dropout(2, 60.0, None)
    assert got["dropout_error"].startswith("RuntimeFault: ") and "MISMATCH" in got["dropout_error"]

    def hang(*a, **k):
        raise RuntimeFault("rank 1 made no progress for 60 s")

    monkeypatch.setattr(calibrate, "run_job", hang)
    assert calibrate._dropout(2, 60.0, None) == {
        "dropout_error": "RuntimeFault: rank 1 made no progress for 60 s"}


def test_calibration_programs_exist():
    """The programs calibration runs through compile-and-measure's path are where it looks."""
    from workbench.runtime.calibrate import DROPOUT_SPEC
    from workbench.runtime.calibrate_worker import ALLREDUCE_SPEC

    assert ALLREDUCE_SPEC.is_file() and DROPOUT_SPEC.is_file()


def _big(obj):
    """Every float of a raw file as 1e308."""
    if isinstance(obj, dict):
        return {k: _big(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_big(v) for v in obj]
    return 1e308 if isinstance(obj, float) else obj


@pytest.mark.parametrize("case, message", [
    ("binary", "must be valid JSON, got bytes that are not UTF-8"),
    ("utf16", "must be valid JSON, got bytes that are not UTF-8"),
    ("deep", "must be valid JSON, got nesting too deep"),
    ("1e308", "field collectives[0]."),  # then the first time field the schema reports
    ("fifo", "must be a regular file, got a FIFO"),
])
def test_from_raw_of_a_file_that_is_not_a_raw_file(tmp_path, case, message):
    """Binary, UTF-16, 100,000-deep and 1e308 raw files were 4 tracebacks (issue 40)."""
    import os

    good = calibration.synthetic_raw(preset("h200x4"), 2, [2**20], [])
    raw = tmp_path / "r.json"
    if case == "fifo":
        os.mkfifo(raw)
    else:
        raw.write_bytes({"binary": b"\x89PNG\r\n\x1a\n\x00\xff",
                         "utf16": json.dumps(good).encode("utf-16"),
                         "deep": b"[" * 100_000 + b"]" * 100_000}.get(case)
                        or json.dumps({**good, "collectives": _big(good["collectives"])}).encode())
    r = _run(["--gpus", "2", "--from-raw", str(raw), "--out", str(tmp_path / "p.json")])
    assert isinstance(r.exception, HardwareError), r.exception
    assert f"calibration raw file {raw} {message}" in str(r.exception)
    if case == "1e308":
        assert "_ms must be a positive number (at most 1e+15), got a number > 1e+15; run " \
            "`workbench calibrate" in str(r.exception)
    assert not (tmp_path / "p.json").exists()
