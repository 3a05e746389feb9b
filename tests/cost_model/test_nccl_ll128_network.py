"""Decision 116: LL128 across the network as NCCL 2.28.9 runs it (enqueue.cc calcCollChunking,
transport/net.cc sendProxy, prims_ll128.h), its closed forms, where the plan carries it (the
tree's store-and-forward, unseen by NCCL's choice; nothing for the ring), and the held-out
rows' errors as found, so that a regression fails."""

import math

import pytest
from conftest import load_script

from cost_model import collectives as coll
from cost_model import nccl_model

validation = load_script("benchmarks/validation_nccl.py")

MIB = 2**20


def test_ll128_step_is_15_16_of_a_buffer_step():
    """init.cc DEFAULT_LL128_BUFFSIZE = 120 elements x 640 threads x 8 steps x 8 bytes; one
    step's data is 15 of its 16 words (calcCollChunking)."""
    assert nccl_model.LL128_BUFFSIZE == 4915200
    assert nccl_model.ll128_chunk_bytes() == 4915200 // 8 // 16 * 15 == 576000


@pytest.mark.parametrize("nbytes,channels,nodes,ppn,chunk", [
    # nstepsLL128 = 1 + log2(nodes) + 0.8; first halving while a channel has fewer than
    # nsteps x 64 / 8 chunks (down to 128 KiB), then fewer than nsteps x 16 / 8 (32 KiB)
    (MIB, 16, 2, 8, 18000),         # 576000 -> 72000 (first), -> 36000 -> 18000
    (4 * MIB, 16, 2, 8, 36000),     # 4 MiB / (16 x 36000) = 7 >= 5.6: stops at 36000
    (4 * MIB, 16, 8, 8, 18000),     # 8 nodes: 9.6 chunks a channel wanted
    (16 * MIB, 16, 2, 8, 72000),    # 16 MiB / (16 x 72000) = 14 >= 5.6
    (8 * 2**30, 16, 2, 8, 576000),  # a large buffer keeps the whole step
    (math.inf, 16, 4, 8, 576000),   # symbolic sizes: a full step
    (4 * MIB, 32, 8, 16, 18000),    # DGX-2 (16 GPUs a node, 32 channels)
])
def test_tree_ll128_chunk_follows_enqueue(nbytes, channels, nodes, ppn, chunk):
    assert nccl_model.tree_ll128_chunk_bytes(nbytes, channels, nodes, ppn) == chunk


def test_tree_ll128_forward_closed_form():
    """log2(nodes) network stages up and as many down, each a whole chunk (or a channel's
    whole share) of 16/15 wire bytes: up at a channel's rate, down at half of it while the
    up pass still streams (share > chunk), else at it."""
    rate = 20e9
    got = nccl_model.tree_ll128_forward_s(4 * MIB, 8, 8, 16, rate)
    assert got == pytest.approx(3 * 18000 * 16 / 15 * (1 + 2) / rate)  # 256 KiB > 18000
    small = nccl_model.tree_ll128_forward_s(64 * 1024, 2, 8, 16, rate)
    assert small == pytest.approx((64 * 1024 / 16) * 16 / 15 * (1 + 1) / rate)  # share < chunk
    assert nccl_model.tree_ll128_forward_s(4 * MIB, 4, 8, 16, rate) == pytest.approx(2 * got / 3)


def _plan(cluster, kind, nbytes, algorithm, protocol):
    P = cluster.world_size
    return next(p for p in coll.plans(kind, nbytes, P, cluster, P)
                if (p.algorithm, p.protocol) == (algorithm, protocol))


def test_tree_ll128_forward_is_priced_but_not_chosen_by():
    """The plan carries the store-and-forward as `unseen_s`, at a channel's share (16
    channels on 8-GPU nodes) of the network leg before the tree's size correction (half of it
    down: 256 KiB a channel is more than a chunk); NCCL's estimate, by which it chooses, is
    without it."""
    c = validation.dgx_h100(8)
    tree = _plan(c, "allreduce", 4 * MIB, "tree", "LL128")
    ll128 = next(p for p in c.nccl.protocols if p.name == "LL128")
    path = coll._group_path(64, c, 64, False)
    stream, _ = coll._network_bandwidth("allreduce", "tree", ll128, 64, c, path, False)
    want = 3 * 18000 * 16 / 15 * (1 + 2) / (stream / 16)
    assert float(tree.unseen_s) == pytest.approx(want)
    assert float(tree.nccl_estimate_s) == pytest.approx(float(tree.time_s) - want)
    chosen = coll.choose_plan("allreduce", 4 * MIB, 64, c, 64)
    plans = coll.plans("allreduce", 4 * MIB, 64, c, 64)
    assert float(chosen.nccl_estimate_s) == min(float(p.nccl_estimate_s) for p in plans)


def test_ring_ll128_carries_nothing_more():
    """The ring's network link stays busy from its first step to its last: its step-sized
    messages add nothing to NCCL's bandwidth term (decision 116), on any transport here."""
    for cluster in (validation.dgx_h100(2), validation.gcp_rdma("dgx-h200", 2)):
        ring = _plan(cluster, "allgather", 16 * MIB, "ring", "LL128")
        assert float(ring.unseen_s) == 0.0


def test_one_gpu_per_node_stores_on_its_two_channels():
    """One GPU per node (its graph's 2 channels, collectives.network_channels): the tree's 2
    network stages at 2 nodes; at one rank a node NCCL wants 64 x 2.1 chunks a channel, so
    the step halves to 72000, then (4 MiB / (2 x 72000) = 29 < 16 x 2.1) to 36000."""
    one = validation.one_gpu_per_node(2)
    tree = _plan(one, "allreduce", 4 * MIB, "tree", "LL128")
    ll128 = next(p for p in one.nccl.protocols if p.name == "LL128")
    path = coll._group_path(2, one, 2, False)
    stream, _ = coll._network_bandwidth("allreduce", "tree", ll128, 2, one, path, False)
    assert nccl_model.tree_ll128_chunk_bytes(4 * MIB, 2, 2, 1) == 36000
    assert float(tree.unseen_s) == pytest.approx(36000 * 16 / 15 * (1 + 2) / (stream / 2))


def test_ll128_network_held_out_rows_as_found():
    """decision 116's held-out evidence (+ = model fast). Before it (563dc86): p5 1 MiB +18.1,
    nccl-tests#309 2 nodes 1 MiB +39.3, 4 nodes 1 MiB +263.9 (suspected outlier), 4 MiB +97.3,
    8 nodes 1 MiB +12.4, 4 MiB +51.8; every one moves toward its measurement and none
    crosses it (8 nodes 1 MiB stops 0.9 % short). The ring LL128 rows (GCP RoCE AllGather)
    do not move."""
    got = {r["what"]: r for r in validation.measured_rows()}
    t309 = "{} nodes x 8 H100, IB, AllReduce {} (nccl-tests#309 tables)"
    found = {"2 x p5 (8x H100, EFAv2), AllReduce 1 MiB": 14.7,
             t309.format(2, "1 MiB"): 33.1, t309.format(4, "1 MiB"): 233.4,
             t309.format(4, "4 MiB"): 84.8, t309.format(8, "1 MiB"): 0.9,
             t309.format(8, "4 MiB"): 39.4,
             "2 x a3-ultragpu-8g (8x H200, RoCE), AllGather 1 MiB": 21.9,
             "2 x a3-ultragpu-8g (8x H200, RoCE), AllGather 16 MiB": 18.3,
             "2 x a3-ultragpu-8g (8x H200, RoCE), AllGather 64 MiB": 7.4,
             "2 x a4-highgpu-8g (8x B200, RoCE), AllGather 1 MiB": 32.5,
             "2 x a4-highgpu-8g (8x B200, RoCE), AllGather 16 MiB": 38.5}
    for what, error in found.items():
        row = got[what]
        assert not row["train"] and row["plan"].endswith("/LL128"), row
        assert row["error_%"] == pytest.approx(error, abs=0.2), row
