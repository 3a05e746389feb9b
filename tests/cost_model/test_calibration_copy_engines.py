"""Calibration of the copy engines' peer-to-peer bandwidth (`copy_engines`): the fit on rows
made by hand and on a synthetic raw file from a known cluster, the written profile, raw files
without the section (older ones, or a failed section) leaving the base preset's value, and
malformed sections failing with pinned messages."""

import dataclasses
import json

import pytest

from cost_model import calibration
from cost_model.hardware import load_profile, preset
from workbench.errors import HardwareError

NBYTES = [2**k for k in range(16, 31, 2)]
FUSED = [2**k for k in (22, 26, 28, 30)]
GiB, MiB = 2**30, 2**20


def _known():
    """The 2x H200-like preset with copy engines of its own: 350 GB/s (the preset: 391)."""
    return dataclasses.replace(preset("h200x4"), gpus_per_node=2,
                               copy_engine_bandwidth_Bps=350e9)


@pytest.fixture(scope="module")
def fitted():
    raw = calibration.synthetic_raw(_known(), 2, NBYTES, FUSED)
    return raw, calibration.fit(raw, nccl_maxiter=30, nccl_popsize=6)


def _raw_file(tmp_path, raw):
    p = tmp_path / "p.raw.json"
    p.write_text(json.dumps(raw))
    return p


# ---------------------------------------------------------------- the fit


def test_fit_of_one_size_is_its_rate():
    # 1 GiB to the one peer in 2.75 ms: 390.4 GB/s per direction
    assert calibration.fit_copy_engines([(GiB, 1, 2.75e-3)]) == pytest.approx(GiB / 2.75e-3)


def test_fit_weighs_sizes_alike_by_relative_error():
    # 256 MiB at 380 GB/s (a fixed cost shows), 1 GiB at 390 GB/s: B = (380^2 + 390^2) / 770
    rows = [(256 * MiB, 1, 256 * MiB / 380e9), (GiB, 1, GiB / 390e9)]
    bw = calibration.fit_copy_engines(rows)
    assert bw == pytest.approx((380e9**2 + 390e9**2) / 770e9)
    cluster = dataclasses.replace(preset("h200x4"), copy_engine_bandwidth_Bps=bw)
    errors = calibration.copy_engine_errors(rows, cluster)
    assert [(n, p) for n, p, _ in errors] == [(256 * MiB, 1), (GiB, 1)]
    # predicted / measured - 1 = rate / B - 1; least squares: the rate-weighted errors cancel
    assert errors[0][2] == pytest.approx(380e9 / bw - 1) and errors[1][2] == pytest.approx(
        390e9 / bw - 1)
    assert errors[0][2] * 380 == pytest.approx(-errors[1][2] * 390, rel=1e-9)
    assert errors[0][2] < 0 < errors[1][2]


def test_fit_counts_every_peer_of_a_gpu():
    # 4 GPUs: each pushes 1 GiB to 3 peers (and receives 3 GiB) in 8.4 ms
    assert calibration.fit_copy_engines([(GiB, 3, 8.4e-3)]) == pytest.approx(3 * GiB / 8.4e-3)


def test_fit_needs_a_row():
    with pytest.raises(HardwareError, match=r"copy_engines must hold at least one row to fit "
                       r"copy_engine_bandwidth_Bps, got none; run `workbench calibrate "
                       r"--gpus P` on the GPU machine"):
        calibration.fit_copy_engines([])


def test_fit_recovers_the_copy_engine_bandwidth_from_a_synthetic_raw_file(fitted):
    raw, cal = fitted
    assert [(r["nbytes"], r["peers"]) for r in raw["copy_engines"]] == [(256 * MiB, 1),
                                                                         (GiB, 1)]
    assert cal.profile["copy_engine_bandwidth_Bps"] == 350e9
    assert cal.cluster.copy_engine_bandwidth_Bps == 350e9
    assert max(abs(e) for _, _, e in cal.copy_engine_errors) < 1e-9
    report = calibration.fit_report(cal)
    assert "(pushes to every peer at once by copy engines: 350.0 GB/s per GPU per direction)" \
        in report
    assert "copy engines worst relative error: 0.000" in report


def test_written_profile_holds_the_copy_engine_bandwidth(fitted, tmp_path):
    _, cal = fitted
    out = tmp_path / "profile.json"
    calibration.write(cal, out)
    assert json.loads(out.read_text())["copy_engine_bandwidth_Bps"] == 350e9
    assert load_profile(out).copy_engine_bandwidth_Bps == 350e9


# ---------------------------------------------------------------- without the section


def test_raw_file_without_the_section_keeps_the_base_presets_value(fitted, tmp_path):
    raw, _ = fitted
    old = {k: v for k, v in raw.items() if k != "copy_engines"}
    cal = calibration.fit(calibration.read_raw(_raw_file(tmp_path, old), 2), nccl_maxiter=5,
                          nccl_popsize=5)
    assert "copy_engine_bandwidth_Bps" not in cal.profile
    assert cal.cluster.copy_engine_bandwidth_Bps == preset("h200x4").copy_engine_bandwidth_Bps
    assert cal.copy_engine_errors == [] and cal.copy_engine_note == ""
    assert "copy engines" not in calibration.fit_report(cal)


def test_failed_section_is_reported_and_keeps_the_base_presets_value(fitted):
    raw, _ = fitted
    failed = {k: v for k, v in raw.items() if k != "copy_engines"}
    failed["copy_engines_error"] = "RuntimeFault: pycuda must be importable"
    cal = calibration.fit(failed, nccl_maxiter=5, nccl_popsize=5)
    assert cal.cluster.copy_engine_bandwidth_Bps == 391e9
    assert ("copy engines not measured (RuntimeFault: pycuda must be importable): "
            "copy_engine_bandwidth_Bps stays the base preset's (391.0 GB/s)") \
        in calibration.fit_report(cal)


def test_one_gpu_raw_file_has_no_copy_engines():
    raw = calibration.synthetic_raw(_known(), 1, [], [])
    assert "copy_engines" not in raw
    cal = calibration.fit(raw)
    assert cal.cluster.copy_engine_bandwidth_Bps == 391e9 and cal.copy_engine_errors == []


# ---------------------------------------------------------------- malformed sections


def test_bad_copy_engine_row(tmp_path, fitted):
    raw, _ = fitted
    bad = dict(raw, copy_engines=[dict(raw["copy_engines"][0], ms=0)])
    with pytest.raises(HardwareError, match=r"field copy_engines\[0\]\.ms must be a "
                       r"positive number \(at most 1e\+15\), got a number <= 0; run "
                       r"`workbench calibrate --gpus P` on the GPU machine to measure it "
                       r"again$"):
        calibration.read_raw(_raw_file(tmp_path, bad), 2)


def test_copy_engine_row_with_the_wrong_peer_count(tmp_path, fitted):
    raw, _ = fitted
    bad = dict(raw, copy_engines=[dict(r, peers=3) for r in raw["copy_engines"]])
    with pytest.raises(HardwareError, match=r"field copy_engines\[\d\]\.peers must be the other "
                       r"GPUs' count \(1\), to fit copy_engine_bandwidth_Bps, got another "
                       r"integer; run"):
        calibration.read_raw(_raw_file(tmp_path, bad), 2)


def test_copy_engines_must_be_a_list(tmp_path, fitted):
    raw, _ = fitted
    bad = dict(raw, copy_engines={"nbytes": GiB})
    with pytest.raises(HardwareError, match=r"field copy_engines must be a list of copy-engine "
                       r"rows, got a mapping; run `workbench calibrate --gpus P`"):
        calibration.read_raw(_raw_file(tmp_path, bad), 2)
