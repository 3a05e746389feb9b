"""`nccl.release` "2.6" (design note 89): NCCL 2.6.4's tuning model, the NCCL CoCoNet's fused
kernels ran on, against CoCoNet's own 128-GPU runs (its raw data's NCCL_ALGO=Default, Ring and
Tree sections, records/coconet-128gpu/coconet_measured.csv); bad input."""

import dataclasses

import pandas as pd
import pytest

from cost_model import collectives as coll
from cost_model import nccl_v26
from cost_model.hardware import load_hardware, preset

KERNELS = "records/coconet-128gpu/kernels_nccl264.json"
MEASURED = "records/coconet-128gpu/coconet_measured.csv"


def _cluster():
    return load_hardware(KERNELS, 8)


def _measured() -> pd.DataFrame:
    df = pd.read_csv(MEASURED, comment="#")
    df["exponent"] = df["elements"].map(lambda n: n.bit_length() - 1)
    return df.set_index("exponent")


def test_tables_as_nccl_264_computes_them():
    """8 DGX-2 nodes: a PCIe Gen3 GPU and an EDR NIC give 12 GB/s channels (speedArray), 8
    of them; the tree's latency 4.4 + 2 (15 x 1.9 + 3 x 7.5) us for LL128; a ring pays the
    network hop on each of its 254 steps; the tree's bus bandwidth min(96 x 0.9, 80) x 7/9."""
    assert nccl_v26.channel_speed_GBps(12.5e9) == 12.0
    assert nccl_v26.channel_speed_GBps(50e9) == 12.0  # PCIe Gen3 x16 bounds it
    assert nccl_v26.latency_s("allreduce", "tree", "LL128", 128, 8) == pytest.approx(106.4e-6)
    assert nccl_v26.latency_s("allreduce", "ring", "LL128", 128, 8) == pytest.approx(
        3.6e-6 + 254 * 2.5e-6)
    assert nccl_v26.bus_bandwidth_Bps("allreduce", "tree", "LL128", 1e12, 8, 8, 12.0) == \
        pytest.approx(80e9 * 7 / 9)
    assert nccl_v26.bus_bandwidth_Bps("allreduce", "ring", "LL128", 1e12, 8, 8, 12.0) == \
        pytest.approx(96e9 * 120 / 128)
    assert nccl_v26.tree_correction("LL128", 4 * 2**20) == 0.7


def test_choice_switches_where_coconets_default_runs_switch():
    """CoCoNet's Default section runs with its Tree section (within 5 %, far from the Ring)
    up to 2^23 floats and with its Ring section from 2^24: NCCL 2.6.4's model on this cluster
    moves from the LL128 tree to the LL128 ring between the same two sizes (with 8 channels of
    12 GB/s)."""
    cluster = _cluster()
    m = _measured()
    for e in range(18, 24):
        assert m.loc[e, "coconet_ms"] == pytest.approx(m.loc[e, "coconet_tree_ms"], rel=0.05)
        assert m.loc[e, "coconet_ring_ms"] > 1.02 * m.loc[e, "coconet_ms"]
        plan = coll.choose_plan("allreduce", 4 * 2**e, 128, cluster)
        assert (plan.algorithm, plan.protocol) == ("tree", "LL128")
    for e in range(24, 28):
        assert m.loc[e, "coconet_ms"] == pytest.approx(m.loc[e, "coconet_ring_ms"], rel=0.05)
        assert m.loc[e, "coconet_tree_ms"] > 1.05 * m.loc[e, "coconet_ms"]
        plan = coll.choose_plan("allreduce", 4 * 2**e, 128, cluster)
        assert (plan.algorithm, plan.protocol) == ("ring", "LL128")


def test_ring_and_tree_against_coconets_runs():
    """CoCoNet's fused ring (the update on each rank's 1/128 slice: its NCCL_ALGO=Ring runs)
    is within 15 % of 2.6.4's ring from 2^21 floats; its fused tree (NCCL_ALGO=Tree) within
    7 % of 2.6.4's tree from 2^22 to 2^25, and 20-35 % slower at 2^20-2^21 (the miss the
    README explains). Per iteration, update included in the measured times."""
    cluster = _cluster()
    m = _measured()
    for e in range(21, 31):
        ring = min(float(p.time_s) for p in coll.plans("allreduce", 4 * 2**e, 128, cluster)
                   if p.algorithm == "ring")
        assert ring * 1e6 / m.loc[e, "coconet_ring_ms"] - 1 == pytest.approx(0, abs=0.15)
    for e in range(20, 26):
        tree = min(float(p.time_s) for p in coll.plans("allreduce", 4 * 2**e, 128, cluster)
                   if p.algorithm == "tree")
        error = tree * 1e6 / m.loc[e, "coconet_tree_ms"] - 1
        if e < 22:
            assert -0.35 < error < -0.20
        else:
            assert abs(error) < 0.07


def test_the_preset_keeps_228_and_228_is_faster_on_the_tree():
    """NCCL 2.28.9's model runs the same LL128 tree faster on Volta than 2.6.4's (LL128 at
    120/128 across nodes and a 0.8 correction at 4 MiB, against 7/9 and 0.7): the models'
    estimates (the 2.28 plan's time adds the store-and-forward NCCL's model leaves out,
    decision 116)."""
    v228 = preset("dgx2-v100", 8)
    assert v228.nccl.release == "2.28"
    t228 = coll.choose_plan("allreduce", 4 * 2**20, 128, v228)
    t26 = coll.choose_plan("allreduce", 4 * 2**20, 128, _cluster())
    assert (t228.algorithm, t228.protocol) == (t26.algorithm, t26.protocol) == ("tree", "LL128")
    assert float(t26.nccl_estimate_s) / float(t228.nccl_estimate_s) > 1.15


def test_one_node_keeps_the_fitted_constants():
    """Inside one node the release changes nothing (the fitted NVLink constants price it)."""
    one = preset("v100x16")
    v26 = dataclasses.replace(one, nccl=dataclasses.replace(one.nccl, release="2.6"))
    for nbytes in (2**16, 2**24, 2**30):
        assert float(coll.collective_time("allreduce", nbytes, 16, v26)) == \
            pytest.approx(float(coll.collective_time("allreduce", nbytes, 16, one)))
