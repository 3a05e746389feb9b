"""Calibration of the dropout hashing cost (`dropout`: the generated f16 epilogue with and
without a dropout): the fit, the written profile and the cost model pricing it, raw files
without the section keeping the base preset's value, and malformed sections failing with
pinned messages."""

import dataclasses

import pytest

from cost_model import calibration
from cost_model.hardware import preset
from workbench.errors import HardwareError

NUMEL = 8192 * 12288
NBYTES = [2**k for k in range(16, 31, 2)]
FUSED = [2**k for k in (22, 26, 28, 30)]


def _raw(**sections):
    cluster = dataclasses.replace(preset("h200x4"), gpus_per_node=2)
    raw = calibration.synthetic_raw(cluster, 2, NBYTES, FUSED)
    raw.update(sections)
    return raw


def test_fit_is_the_difference_per_element():
    per, line = calibration.fit_dropout(
        {"dropout": {"numel": NUMEL, "plain_ms": 0.179, "dropout_ms": 0.222}})
    assert per == pytest.approx(0.043e-3 / NUMEL)
    assert line == ("dropout hashing: 0.222 ms against 0.179 ms without it on 100663296 "
                    "elements: gpu.dropout_element_s 0.427 ps per element")


def test_no_difference_keeps_the_preset():
    per, line = calibration.fit_dropout(
        {"dropout": {"numel": NUMEL, "plain_ms": 0.2, "dropout_ms": 0.199}})
    assert per is None and line.endswith("no cost measured; gpu.dropout_element_s stays the "
                                         "base preset's")


def test_a_missing_or_failed_section_keeps_the_preset():
    assert calibration.fit_dropout({}) == (
        None, "dropout hashing not measured (not in this raw file): gpu.dropout_element_s "
              "stays the base preset's")
    per, line = calibration.fit_dropout({"dropout_error": "RuntimeFault: no pycuda"})
    assert per is None and "(RuntimeFault: no pycuda)" in line


@pytest.mark.parametrize("section, what", [
    ({"numel": NUMEL, "plain_ms": 0.179}, "must hold numel, plain_ms and dropout_ms"),
    ({"numel": NUMEL, "plain_ms": "fast", "dropout_ms": 0.2}, "must hold numel, plain_ms"),
    ({"numel": 0, "plain_ms": 0.179, "dropout_ms": 0.222}, "must hold positive numel"),
])
def test_a_malformed_section_is_refused(section, what):
    with pytest.raises(HardwareError, match=rf"^calibration raw file dropout {what}.*"
                                            rf"run `workbench calibrate --gpus P`"):
        calibration.fit_dropout({"dropout": section})


def test_the_profile_holds_it_and_the_model_prices_it():
    raw = _raw(dropout={"numel": NUMEL, "plain_ms": 0.180, "dropout_ms": 0.230})
    cal = calibration.fit(raw, nccl_maxiter=30, nccl_popsize=6)
    assert cal.profile["gpu"]["dropout_element_s"] == pytest.approx(0.05e-3 / NUMEL, rel=1e-3)
    assert cal.cluster.gpu.dropout_element_s == pytest.approx(0.05e-3 / NUMEL, rel=1e-3)
    assert "gpu.dropout_element_s 0.497 ps per element" in calibration.fit_report(cal)


def test_without_the_section_the_profile_leaves_the_preset_value():
    cal = calibration.fit(_raw(), nccl_maxiter=30, nccl_popsize=6)
    assert "dropout_element_s" not in cal.profile["gpu"]
    assert cal.cluster.gpu.dropout_element_s == preset("h200x4").gpu.dropout_element_s
    assert "dropout hashing not measured" in calibration.fit_report(cal)
