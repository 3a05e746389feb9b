"""Calibration fit: a synthetic raw table from a known cluster is recovered, the written
profile loads and simulates, and bad raw files fail with pinned messages."""

import dataclasses
import json
from pathlib import Path

import pytest

from cost_model import calibration
from cost_model.calibration.nccl import fit_nccl, read_table, table_errors
from cost_model.collectives import collective_time
from cost_model.hardware import Protocol, load_hardware, preset
from workbench.errors import HardwareError

NBYTES = [2**k for k in range(16, 31, 2)]
FUSED = [2**k for k in (22, 26, 28, 30)]


def _known():
    """A cluster unlike the base preset: different GPU, NCCL constants and peer bandwidth."""
    c = preset("h200x4")
    nccl = dataclasses.replace(
        c.nccl, host_overhead_s=20e-6, allreduce_bandwidth_factor=1.1,
        protocols=(Protocol("LL", 12e-6, 1e-6, 0.3), Protocol("LL128", 9e-6, 2e-6, 0.5),
                   Protocol("Simple", 5e-6, 3e-6, 0.8)))
    gpu = dataclasses.replace(c.gpu, hbm_bandwidth_Bps=4.2e12, launch_latency_s=6e-6,
                              peak_flops=(("f32", 50e12), ("f16", 750e12), ("bf16", 780e12)))
    return dataclasses.replace(c, gpu=gpu, nccl=nccl, peer_load_bandwidth_Bps=250e9,
                               peer_store_bandwidth_Bps=250e9 * 358 / 327)


@pytest.fixture(scope="module")
def fitted():
    known = _known()
    raw = calibration.synthetic_raw(known, 2, NBYTES, FUSED)
    return known, raw, calibration.fit(raw, nccl_maxiter=60, nccl_popsize=10)


def test_fit_recovers_the_device_fields_exactly(fitted):
    known, _, cal = fitted
    assert cal.cluster.gpu.hbm_bandwidth_Bps == pytest.approx(4.2e12, rel=1e-3)
    assert cal.cluster.gpu.launch_latency_s == pytest.approx(6e-6, rel=1e-3)
    assert cal.cluster.gpu.flops_for("bf16") == pytest.approx(780e12, rel=1e-3)
    assert cal.cluster.gpus_per_node == 2


def test_fit_recovers_peer_bandwidth(fitted):
    _, _, cal = fitted
    assert cal.cluster.peer_load_bandwidth_Bps == pytest.approx(250e9, rel=2e-3)
    assert cal.cluster.peer_store_bandwidth_Bps == pytest.approx(250e9 * 358 / 327, rel=2e-3)
    assert cal.fused_worst_error < 0.01


def test_fit_recovers_nccl_times(fitted):
    # The 13 NCCL constants are not identifiable one by one from 8 sizes; the times are.
    known, raw, cal = fitted
    base_worst = max(abs(e) for _, errs in table_errors(calibration.nccl_table(raw), 2,
                                                        preset("h200x4"))
                     for e in errs.values())
    assert base_worst > 0.3  # the known cluster is far from the base preset ...
    assert cal.nccl_worst_error < 0.08  # ... and the fit brings the times back
    for n in (2**16, 2**24, 2**30):
        for kind in ("allreduce", "allgather"):
            assert collective_time(kind, n, 2, cal.cluster) == pytest.approx(
                collective_time(kind, n, 2, known), rel=0.08)


def test_written_profile_loads_and_simulates(fitted, tmp_path):
    from workbench.cli.simulate import predict
    from workbench.loader import load

    _, _, cal = fitted
    paths = calibration.write(cal, tmp_path / "profile.json")
    assert [p.name for p in paths] == ["profile.json", "profile.fit.txt"]
    cluster = load_hardware(str(tmp_path / "profile.json"))
    assert dataclasses.asdict(cluster) == dataclasses.asdict(cal.cluster)
    loaded = load("studies/allreduce.py")
    rows = {p.name: p.time_s for p in predict(loaded, cluster, {"N": 2**26, "P": 2})}
    # the fused kernel's model in calibration is the simulator's
    assert rows["fused"] == pytest.approx(
        calibration.fused_allreduce_time(2**28, 2, cluster), rel=1e-6)


def test_outlier_is_left_out_of_the_nccl_fit():
    raw = calibration.synthetic_raw(preset("h200x4"), 2, NBYTES, [])
    raw["collectives"][2]["reducescatter_ms"] *= 3
    assert calibration.nccl_outliers(raw) == [(NBYTES[2], "reducescatter")]


def test_fit_nccl_reproduces_the_4x_table_within_the_documented_error():
    table = read_table(Path(__file__).resolve().parents[2]
                       / "cost_model" / "data" / "nccl_h200x4.csv")
    fit = fit_nccl(table, 4, preset("h200x4"), popsize=8, maxiter=20)
    assert fit.worst_error <= 0.125  # never worse than the H200_NCCL start (12.4 %)


# ---------------------------------------------------------------- bad input, pinned


def _raw_file(tmp_path, raw):
    p = tmp_path / "p.raw.json"
    p.write_text(json.dumps(raw))
    return p


def test_missing_raw_file(tmp_path):
    with pytest.raises(HardwareError, match=r"calibration raw file must be an existing file, "
                       r"got .*nope\.json; run `workbench calibrate --gpus P`"):
        calibration.read_raw(tmp_path / "nope.json", 2)


def test_malformed_raw_file(tmp_path):
    p = tmp_path / "p.raw.json"
    p.write_text("{not json")
    with pytest.raises(HardwareError, match=r"must be valid JSON, got JSONDecodeError"):
        calibration.read_raw(p, 2)


def test_gpu_count_mismatch(tmp_path):
    p = _raw_file(tmp_path, calibration.synthetic_raw(preset("h200x4"), 4, NBYTES, []))
    with pytest.raises(HardwareError, match=r"calibration raw file's gpus must equal --gpus, "
                       r"got 4 in .* with --gpus 2; pass --gpus 4 or measure again with "
                       r"--gpus 2"):
        calibration.read_raw(p, 2)


def test_missing_device_section(tmp_path):
    raw = calibration.synthetic_raw(preset("h200x4"), 2, NBYTES, [])
    del raw["device"]["triad"]
    with pytest.raises(HardwareError, match=r"field device\.triad must be a mapping with Bps, got "
                       r"nothing; run"):
        calibration.read_raw(_raw_file(tmp_path, raw), 2)


def test_bad_collective_row(tmp_path):
    raw = calibration.synthetic_raw(preset("h200x4"), 2, NBYTES, [])
    raw["collectives"][0]["allgather_ms"] = -1
    with pytest.raises(HardwareError, match=r"field collectives\[0\]\.allgather_ms must be a "
                       r"positive number \(at most 1e\+15\), got a number <= 0"):
        calibration.read_raw(_raw_file(tmp_path, raw), 2)


def test_committed_h200x2_profile_loads():
    c = load_hardware("records/calibration/h200x2/profile.json")
    assert c.gpus_per_node == 2
    assert 3e12 < c.gpu.hbm_bandwidth_Bps < 5e12


# ---------------------------------------------------------------- k-stream HBM, fused fixed cost


def _known_split():
    """The known cluster with a read/write HBM split and a fused-kernel fixed cost."""
    c = _known()
    gpu = dataclasses.replace(c.gpu, hbm_read_bandwidth_Bps=4.1e12,
                              hbm_write_bandwidth_Bps=3.3e12)
    return dataclasses.replace(c, gpu=gpu, fused_fixed_s=14e-6)


@pytest.fixture(scope="module")
def fitted_split():
    known = _known_split()
    raw = calibration.synthetic_raw(known, 2, NBYTES, FUSED)
    return known, raw, calibration.fit(raw, nccl_maxiter=20, nccl_popsize=5)


def test_fit_recovers_hbm_read_write_split(fitted_split):
    _, raw, cal = fitted_split
    assert len(raw["device"]["streams"]) == len(calibration.STREAM_SHAPES)
    assert cal.cluster.gpu.hbm_read_bandwidth_Bps == pytest.approx(4.1e12, rel=1e-3)
    assert cal.cluster.gpu.hbm_write_bandwidth_Bps == pytest.approx(3.3e12, rel=1e-3)
    assert max(abs(e) for _, _, e in cal.hbm_errors) < 1e-3


def test_fit_recovers_fused_fixed_cost(fitted_split):
    _, _, cal = fitted_split
    assert cal.cluster.fused_fixed_s == pytest.approx(14e-6, abs=0.05e-6)
    assert cal.cluster.peer_load_bandwidth_Bps == pytest.approx(250e9, rel=2e-3)
    assert cal.fused_worst_error < 0.005


def test_no_streams_no_split_and_no_fixed_cost(fitted):
    # a raw file without k-stream rows (and a cluster without a fixed cost) fits as before
    _, raw, cal = fitted
    assert "streams" not in raw["device"]
    assert cal.cluster.gpu.hbm_read_bandwidth_Bps is None
    assert cal.cluster.fused_fixed_s == pytest.approx(0.0, abs=0.05e-6)


def test_split_prices_writes_slower():
    c = _known_split()
    flat = _known()
    gib = 2.0**30
    assert c.gpu.hbm_time_s(gib) == flat.gpu.hbm_time_s(gib) == gib / 4.2e12  # unknown writes
    assert c.gpu.hbm_time_s(gib, gib / 3) == pytest.approx(2 * gib / 3 / 4.1e12 + gib / 3 / 3.3e12)
    assert flat.gpu.hbm_time_s(gib, gib / 3) == gib / 4.2e12  # presets: flat, as before


def test_bad_streams_row(tmp_path):
    raw = calibration.synthetic_raw(_known_split(), 2, NBYTES, [])
    raw["device"]["streams"][0]["outputs"] = 0
    with pytest.raises(HardwareError, match=r"field device\.streams\[0\]\.outputs must be a "
                       r"positive integer, got a number < 1; run"):
        calibration.read_raw(_raw_file(tmp_path, raw), 2)


def test_streams_not_a_list(tmp_path):
    raw = calibration.synthetic_raw(_known_split(), 2, NBYTES, [])
    raw["device"]["streams"] = {"k": 3}
    with pytest.raises(HardwareError, match=r"field device\.streams must be a list of k-stream "
                       r"rows, got a mapping"):
        calibration.read_raw(_raw_file(tmp_path, raw), 2)


def test_streams_of_one_write_share():
    rows = [{"inputs": 2, "outputs": 1, "nbytes": 2**30, "ms": 0.27}] * 2
    with pytest.raises(HardwareError, match=r"device.streams must hold at least two write "
                       r"shares to fit read and write bandwidth, got \[0.333"):
        calibration.fit_hbm_read_write(rows)


def test_profile_with_only_one_of_read_write(tmp_path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"base": "h200x4", "gpu": {"hbm_read_bandwidth_Bps": 4e12}}))
    with pytest.raises(HardwareError, match=r"gpu.hbm_read_bandwidth_Bps and "
                       r"gpu.hbm_write_bandwidth_Bps must be given together, got only "
                       r"hbm_read_bandwidth_Bps"):
        load_hardware(str(p))


def test_profile_fused_fixed_cost_must_be_positive(tmp_path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"base": "h200x4", "fused_fixed_s": -1e-6}))
    with pytest.raises(HardwareError, match=r"p\.json field fused_fixed_s must be a finite "
                       r"number >= 0 and <= 3600 \(seconds\), e\.g\. 2e-6 for 2 us, got a "
                       r"number < 0; fix the profile"):
        load_hardware(str(p))


def test_committed_h200x2_profile_has_split_and_fixed_cost():
    c = load_hardware("records/calibration/h200x2/profile.json")
    assert c.gpu.hbm_write_bandwidth_Bps < c.gpu.hbm_read_bandwidth_Bps
    assert 5e-6 < c.fused_fixed_s < 40e-6
