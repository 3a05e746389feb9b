"""Calibration of NCCL send/recv (a pipeline's Send) and of the runtime's NCCL host cost:
synthetic raw data from a known cluster is recovered, disturbed sizes are left out, the
host overhead moves to the runtime's path by the measured difference, the model prices
Sends with what the profile gains (and only then), bad sections fail with pinned messages."""

import dataclasses
import json
from pathlib import Path

import pytest

from cost_model import calibration
from cost_model.collectives import p2p_time
from cost_model.hardware import preset
from workbench.errors import HardwareError

NBYTES = [2**k for k in range(16, 31, 2)]
FUSED = [2**k for k in (22, 26, 28, 30)]
RUN4_RAW = Path("records/calibration/h200x2-run4/profile.raw.json")


def _known():
    """The 2x H200-like preset with a send/recv of its own: 12 us beyond the host, 370 GB/s."""
    base = preset("h200x4")
    return dataclasses.replace(base, gpus_per_node=2, p2p_latency_s=12e-6,
                               p2p_bandwidth_Bps=370e9)


@pytest.fixture(scope="module")
def fitted():
    raw = calibration.synthetic_raw(_known(), 2, NBYTES, FUSED)
    return raw, calibration.fit(raw, nccl_maxiter=30, nccl_popsize=6)


def test_fit_recovers_send_recv_latency_and_bandwidth(fitted):
    raw, cal = fitted
    assert len(raw["p2p"]) == len(NBYTES)
    # the synthetic rows carry the base preset's host overhead, the fit subtracts its own:
    # recovered exactly up to the difference of the two host overheads
    host_shift = cal.cluster.nccl.host_overhead_s - _known().nccl.host_overhead_s
    assert cal.cluster.p2p_bandwidth_Bps == pytest.approx(370e9, rel=1e-3)
    assert cal.cluster.p2p_latency_s == pytest.approx(max(12e-6 - host_shift, 1e-9), abs=1e-7)
    assert max(abs(e) for _, e in cal.p2p_errors) < 1e-3
    assert "send/recv worst relative error on the fitted sizes: 0.00" in \
        calibration.fit_report(cal)


def test_send_recv_disturbed_small_sizes_are_left_out():
    # calibration run 3 on 2x H200: 64 KiB .. 4 MiB took 74-92 us, 8 MiB 55 us
    rows = [(2**16, 76e-6), (2**22, 86e-6), (2**23, 55e-6), (2**24, 74e-6), (2**26, 221e-6),
            (2**28, 786e-6), (2**30, 2961e-6)]
    kept = calibration.p2p_kept(rows)
    assert [n for n, _ in kept] == [2**23, 2**24, 2**26, 2**28, 2**30]
    latency_s, bandwidth_Bps = calibration.fit_p2p(kept, host_overhead_s=40e-6)
    assert 340e9 < bandwidth_Bps < 380e9
    assert latency_s == 1e-9  # what remains beyond the host is below it: the floor


def test_send_recv_bandwidth_is_refitted_when_the_host_cost_exceeds_the_latency():
    # calibration run 6 on 2x H200: 29 us small send/recvs through nccl4py under a 39 us host
    # cost; with the latency held at the floor, the bandwidth fits the large sends
    host, true_bw = 39e-6, 364e9
    rows = [(n, 29e-6 + n / true_bw) for n in (2**16, 2**20, 2**24, 2**26, 2**28, 2**30)]
    latency_s, bandwidth_Bps = calibration.fit_p2p(rows, host_overhead_s=host)
    assert latency_s == 1e-9
    for n, t in rows[-3:]:  # 64 MiB .. 1 GiB: the sizes of the pipeline's sends
        assert abs((host + n / bandwidth_Bps) / t - 1) < 0.05
    assert bandwidth_Bps == pytest.approx(true_bw, rel=1e-6)  # the slope of the large sizes


def test_send_recv_bandwidth_bound_sizes_must_grow_with_size():
    # the latency clips at the host cost, and the large sizes' slope is negative
    with pytest.raises(HardwareError, match=r"p2p must fit a positive bandwidth \(time growing "
                       r"with size\) on its bandwidth-bound sizes, got 1/B = -.* run `workbench "
                       r"calibrate --gpus P` on the GPU machine"):
        calibration.fit_p2p([(2**16, 30e-6), (2**20, 31e-6), (2**24, 100e-6), (2**25, 95e-6)],
                            40e-6)


def test_p2p_time_uses_calibrated_send_recv_inside_a_node_only():
    known, base = _known(), preset("h200x4")
    n = 2**28
    assert p2p_time(n, known, False) == pytest.approx(
        known.nccl.host_overhead_s + 12e-6 + n / 370e9)
    simple = base.nccl.protocols[-1]
    assert p2p_time(n, base, False) == pytest.approx(
        base.nccl.host_overhead_s + simple.base_latency_s + base.nvlink.latency_s
        + n / (base.nvlink.bandwidth_Bps * simple.efficiency))
    assert p2p_time(n, known, True) == p2p_time(n, base, True)  # across nodes: the NIC


def test_host_overhead_moves_to_the_runtime_path_by_the_measured_difference(fitted):
    raw, cal = fitted
    raw = dict(raw, host_issue={"torch_allreduce_s": 30e-6, "nccl4py_allreduce_s": 21e-6})
    moved = calibration.fit(raw, nccl_maxiter=30, nccl_popsize=6)
    fitted_host = cal.cluster.nccl.host_overhead_s
    assert moved.cluster.nccl.host_overhead_s == pytest.approx(fitted_host - 9e-6, rel=1e-3)
    # the fit errors stay those of the fitted (torch) constants on the torch-timed tables
    assert moved.nccl_errors == cal.nccl_errors and moved.p2p_errors == cal.p2p_errors
    assert "host issue measured 30.0 us through torch.distributed, 21.0 us through nccl4py" \
        in calibration.fit_report(moved)


def _raw_file(tmp_path, raw):
    p = tmp_path / "p.raw.json"
    p.write_text(json.dumps(raw))
    return p


def test_bad_p2p_row(tmp_path):
    raw = calibration.synthetic_raw(_known(), 2, NBYTES[:3], FUSED[:2])
    raw["p2p"][0]["sendrecv_ms"] = 0
    with pytest.raises(HardwareError, match=r"field p2p\[0\]\.sendrecv_ms must be a positive "
                       r"number \(at most 1e\+15\), got a number <= 0"):
        calibration.read_raw(_raw_file(tmp_path, raw), 2)


def test_bad_host_issue(tmp_path):
    raw = calibration.synthetic_raw(_known(), 2, NBYTES[:3], FUSED[:2])
    raw["host_issue"] = {"torch_allreduce_s": -1}
    with pytest.raises(HardwareError, match=r"field host_issue\.torch_allreduce_s must be a "
                       r"positive number \(at most 1e\+15\), got a number <= 0"):
        calibration.read_raw(_raw_file(tmp_path, raw), 2)


def test_send_recv_time_must_grow_with_size():
    with pytest.raises(HardwareError, match=r"p2p must fit a positive bandwidth \(time growing "
                       r"with size\)"):
        calibration.fit_p2p([(2**20, 90e-6), (2**30, 80e-6)], 40e-6)


@pytest.mark.skipif(not RUN4_RAW.is_file(), reason="the 2x H200 run 4 raw file is not here")
def test_the_2x_h200_run_4_raw_file_fits_send_recv_and_the_runtime_host():
    raw = calibration.read_raw(RUN4_RAW, 2)
    cal = calibration.fit(raw, nccl_maxiter=5, nccl_popsize=5)
    assert 330e9 < cal.cluster.p2p_bandwidth_Bps < 380e9  # 355.5 GB/s after the full fit
    issue = raw["host_issue"]
    assert issue["nccl4py_allreduce_s"] < issue["torch_allreduce_s"]
    assert cal.host_note.startswith("NCCL host overhead per call:")


def test_send_recv_timed_through_nccl4py_is_fitted_against_the_runtimes_host_cost(fitted):
    raw, cal = fitted
    # the runtime's path: 9 us less host cost per call, the same GPU time
    issue = {"torch_allreduce_s": 30e-6, "nccl4py_allreduce_s": 21e-6}
    rows = [dict(r, nccl4py_sendrecv_ms=r["sendrecv_ms"] - 9e-3) for r in raw["p2p"]]
    both = calibration.fit(dict(raw, p2p=rows, host_issue=issue), nccl_maxiter=30,
                           nccl_popsize=6)
    assert both.p2p_path == "nccl4py"
    assert both.cluster.p2p_bandwidth_Bps == pytest.approx(cal.cluster.p2p_bandwidth_Bps,
                                                           rel=1e-3)
    assert both.cluster.p2p_latency_s == pytest.approx(cal.cluster.p2p_latency_s, abs=1e-8)
    assert max(abs(e) for _, e in both.p2p_errors) < 1e-3
    assert "send/recv between two GPUs through nccl4py" in calibration.fit_report(both)
    # rows where one size lacks the nccl4py time fall back to torch.distributed's
    rows[0].pop("nccl4py_sendrecv_ms")
    assert calibration.p2p_rows(dict(raw, p2p=rows))[1] == "torch.distributed"
