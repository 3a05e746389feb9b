"""Pinned points of benchmarks/validation_nccl.py (public nccl-tests figures and NCCL's own
tuning model) so that a regression of the collective model fails here; NVLS and PAT against
their closed forms from NCCL's tuning.cc (v2.28.9-1)."""

import dataclasses
import math

import pytest
from conftest import load_script

from cost_model import collectives as coll
from cost_model import nccl_model
from cost_model.hardware import preset

validation = load_script("benchmarks/validation_nccl.py")


@pytest.fixture(scope="module")
def measured():
    return {r["what"]: r for r in validation.measured_rows()}


@pytest.mark.parametrize("what,bound", [
    ("8x H100, AllReduce, NVLS (default)", 0.01),   # nccl-tests#290: 476 GB/s
    ("8x H100, AllReduce, NCCL_ALGO=RING", 0.01),   # nccl-tests#212: 370 GB/s
    ("8x H100, ReduceScatter", 0.05),               # nccl#1281: 360 GB/s
    ("4 nodes x 8 H100, ReduceScatter", 0.05),      # nccl#1229: 360 GB/s
    ("2 nodes x 8 H100 (8 GPU-NIC pairs), AllReduce", 0.05),  # nccl-tests#309: 470 GB/s
    ("2 nodes x 1 GPU, 400 Gb/s NIC, AllReduce ring", 0.10),  # nccl-tests#290: 46-48
])
def test_measured_points_hold(measured, what, bound):
    row = measured[what]
    assert abs(row["error_%"]) <= 100 * bound, row


def test_nvls_is_nccls_choice_on_8_h100_and_absent_without_nvswitch(measured):
    assert measured["8x H100, AllReduce, NVLS (default)"]["plan"] == "nvls/Simple"
    c = preset("h200x4")  # a 4-GPU board without NVSwitch: no NVLS
    assert {p.algorithm for p in coll.plans("allreduce", 2**30, 4, c, 4)} == {"ring"}


def test_model_is_within_5_percent_of_nccls_from_256_mib():
    rows = [r for r in validation.nccl_model_rows() if r["size"] != "16 MiB"]
    misses = [r for r in rows if not r["ok"]]
    assert len(rows) > 200 and not misses, misses[:3]


def test_measured_table_meets_its_targets():
    """Issue 23's targets from 256 MiB: median |error| <= 10 %, max <= 20 %; no row above
    15 % since RoCE has its own efficiency (nccl#1221's 2-node ring: 330 of 400 GB/s), which
    took nccl#1218's 32-node AllGather from +28.6 % to +12.5 % (design note 77)."""
    rows = validation.measured_rows()
    summary = validation.measured_summary(rows)
    assert len(rows) >= 25 and summary["rows"] >= 25
    assert summary["median_%"] <= 10
    # issue 37 moved EFA to 0.91 of line rate (a current stack's 2x p4de; EFA v1 0.85 since
    # decision 112); NVIDIA/nccl#527's
    # 2022 p4dn rows (NCCL 2.9.9, "Slow bus bandwidth") and nccl-tests#309's 4-node 256 MiB
    # row (a dip of that run: 234 GB/s between 246 at 128 MiB and 289 at 512 MiB) are the
    # only ones left above 25 % (benchmarks/README.md explains each)
    explained = {"4 nodes x 8 H100, IB, AllReduce 256 MiB (nccl-tests#309 tables)"}
    big = [r for r in rows if r["nbytes"] >= 2**28 and "p4dn" not in r["what"]
           and r["what"] not in explained]
    assert max(abs(r["error_%"]) for r in big) <= 25
    roce = {r["what"]: r["error_%"] for r in rows if r["fabric"] == "roce"}
    assert abs(roce["32 nodes x 8 H100, RoCE, AllGather 2 GiB"]) <= 15
    assert abs(roce["4 nodes x 8 H100, RoCE, AllReduce"]) <= 5
    covered = {(r["gpu"], r["fabric"]) for r in rows}
    for gpu in ("A100", "H100", "H200", "H800", "B200", "GB200"):
        assert any(g == gpu for g, _ in covered), gpu
    for fabric in ("infiniband", "roce", "efa", "efa-v1", "tcpxo"):
        assert any(f == fabric for _, f in covered), fabric


def test_nvls_closed_form():
    # tuning.cc 2.28.9: nChannels (8) x min(bwIntra (40 GB/s: 8 x 50 > 18 x 20.6) x 0.85 x
    # 7/8 x 2, bwInter (raised to 60)) = 476
    assert nccl_model.nvls_bus_Bps("allreduce", 8, 18 * 20.6, "hopper") == pytest.approx(476e9)
    c = preset("dgx-h100")
    plan = coll.choose_plan("allreduce", 2**30, 8, c, 8)
    assert plan.algorithm == "nvls"
    want = c.nccl.host_overhead_s + 25e-6 + 2**30 / (476e9 * 8 / 14)
    assert float(plan.time_s) == pytest.approx(want, rel=1e-9)
    # AllGather/ReduceScatter as NVLS in one node (2.28): x (ppn - 1)/ppn instead of x 2,
    # not converted to algorithm bandwidth; slower than the ring here, so not NCCL's pick
    ag = next(p for p in coll.plans("allgather", 2**30, 8, c, 8) if p.algorithm == "nvls")
    bus = 8 * 40 * 0.85 * 7 / 8 * 7 / 8 * 1e9
    assert float(ag.time_s) == pytest.approx(c.nccl.host_overhead_s + 25e-6 + 2**30 / bus)
    assert coll.choose_plan("allgather", 2**30, 8, c, 8).algorithm == "ring"


def test_nvls_reads_the_profiles_nvlink():
    """8 NVLinks (H800) instead of 18: NVLS channels at 20 GB/s (8 x 20 <= 8 x 20.6)."""
    h800 = preset("dgx-h800")
    assert h800.nccl_nvlink_Bps == pytest.approx(8 * 20.6e9)
    plan = coll.choose_plan("allreduce", 2**30, 8, h800, 8)
    assert plan.algorithm == "nvls"
    # bwIntra 20, raised bwInter 40: min(20 x 0.85 x 7/8 x 2, 40) x 8 channels
    bus = 8 * 20 * 0.85 * 7 / 8 * 2 * 1e9
    assert float(plan.time_s) == pytest.approx(
        h800.nccl.host_overhead_s + 25e-6 + 2**30 / (bus * 8 / 14))
    # Blackwell: 18 x 40.1; channels at 90, bwInter stays 90: 8 x 90
    b200 = preset("dgx-b200")
    assert nccl_model.nvls_bus_Bps("allreduce", 8, b200.nccl_nvlink_Bps / 1e9,
                                   "blackwell") == pytest.approx(720e9)


def test_pat_closed_form_and_choice():
    one = dataclasses.replace(preset("dgx-h100"), gpus_per_node=1, nics_per_node=1, nvls=False)
    c = one.with_nodes(16)
    pat = next(p for p in coll.plans("allgather", 2**20, 16, c, 16) if p.algorithm == "pat")
    lat = (8.0 + math.log2(16) * 14.0 / 3.5 + 16 * 2.8) * 1e-6
    want = c.nccl.host_overhead_s + c.nccl.kind_latency_s("allgather") + lat \
        + 2**20 / (0.75 * 50e9 * 0.96 * 0.94 ** 3)  # InfiniBand's efficiency at 16 nodes
    assert float(pat.time_s) == pytest.approx(want, rel=1e-9)
    assert coll.choose_plan("allgather", 2**20, 16, c, 16).algorithm == "pat"
    assert coll.choose_plan("allgather", 2**30, 16, c, 16).algorithm == "ring"
    # not at 8 GPUs per node (NCCL's PAT needs one rank per node)
    c8 = preset("dgx-h100", 16)
    assert "pat" not in {p.algorithm for p in coll.plans("allgather", 2**20, 128, c8, 128)}


def test_nvls_tree_closed_form():
    # tuning.cc 2.28.9: 8 NIC heads at 48 GB/s; per channel min(48 x 0.85 x 7/8 x 2,
    # 48 x 2 (2 nodes) | bwInter, 57.7 | 45.5); latency 25 + 2 log2(nodes) x 20.9 us. Beyond
    # NCCL's model, bwInter is what the NIC delivers on InfiniBand (0.96 of 50 GB/s, 6 % less
    # per doubling beyond 2 nodes) where that is below 48.
    for nodes in (2, 4):
        c = preset("dgx-h100", nodes)
        P = 8 * nodes
        delivered = 50 * 0.96 * 0.94 ** math.log2(nodes / 2)
        per_channel = 57.7 if nodes == 2 else min(45.5, delivered)
        plan = next(p for p in coll.plans("allreduce", 2**30, P, c, P)
                    if p.algorithm == "nvlstree")
        alg = 8 * per_channel * 1e9 * P / (2 * (P - 1))
        lat = (25 + 2 * math.log2(nodes) * 20.9) * 1e-6
        # issue 37: the pipeline's fill, 3 chunks (4 stages) of each of the 16 x 8
        # concurrent operations (128 KiB chunks at 2 nodes, 64 KiB from 4)
        chunk = 128 * 1024 if nodes == 2 else 65536
        fill = 3 * chunk * 16 * 8 / alg
        want = c.nccl.host_overhead_s + lat + fill + 2**30 / alg
        assert float(plan.time_s) == pytest.approx(want, rel=1e-9)
    assert "nvlstree" not in {p.algorithm for p in coll.plans("allreduce", 2**30, 16,
                                                               preset("h100x8", 2), 16)}


def test_issue_37_size_classes():
    """At least 60 cited figures, every size class has rows (8 B .. 16 GiB), each transport
    with a fitted parameter has held-out rows, and the per-class summary as measured at the
    commit that added it (benchmarks/README.md); a class without rows is an error."""
    rows = validation.measured_rows()
    assert len(rows) >= 60
    assert min(r["nbytes"] for r in rows) == 8 and max(r["nbytes"] for r in rows) == 16 * 2**30
    summary = {c["class"]: c for c in validation.class_summary(rows)}
    assert set(summary) == {"< 1 MiB", "1-256 MiB", ">= 256 MiB"}
    assert summary[">= 256 MiB"]["median_%"] <= 5
    for fabric in ("efa", "efa-v1", "tcpxo"):
        assert any(r["train"] for r in rows if r["fabric"] == fabric)
        assert sum(not r["train"] for r in rows if r["fabric"] == fabric) >= 5
    trained = [r for r in rows if r["train"]]
    assert all(abs(r["error_%"]) <= 10 for r in trained), trained
    with pytest.raises(ValueError, match="size class '< 1 MiB' must have validation rows"):
        validation.class_summary([r for r in rows if r["nbytes"] >= 2**20])


def test_message_cost_sets_the_small_buffer_floor():
    """The fitted EFA message cost gives 2x p5's 8 B AllReduce floor (69.12 us, the train
    row) and holds on the held-out 128 B and 1 KiB rows of other runs within 2 %."""
    got = {r["what"]: r["error_%"] for r in validation.measured_rows()}
    assert abs(got["2 x p5 (8x H100, EFAv2), AllReduce 8 B"]) <= 0.5
    assert abs(got["2 x p5 (EKS, EFAv2), AllReduce 128 B"]) <= 2
    assert abs(got["2 x p5 (8x H100, EFAv2), AllReduce 1 KiB"]) <= 2


@pytest.mark.parametrize("nbytes,ops,nodes,chunk", [
    (2**30, 128, 2, 131072),   # large: NCCL_NVLS_CHUNKSIZE
    (64 * 2**20, 128, 2, 131072),  # not below 4 x 128 x 128 KiB
    (32 * 2**20, 128, 2, 65536),   # below it: 64 KiB
    (4 * 2**20, 128, 2, 32768),    # below 1 x 128 x 64 KiB: 32 KiB
    (2**30, 128, 4, 65536),    # from 4 nodes: capped at 64 KiB
])
def test_nvls_tree_chunk_follows_enqueue(nbytes, ops, nodes, chunk):
    """enqueue.cc (v2.28.9-1, calcCollChunking, NCCL_ALGO_NVLS_TREE): the chunk by size."""
    assert nccl_model.nvls_tree_chunk_bytes(nbytes, ops, nodes) == chunk


def test_nvls_tree_fill_is_priced_but_not_chosen_by():
    """NCCL chooses by its estimate, which has no pipeline fill; the plan then costs its
    fill (issue 37). On 2x p5 at 16 MiB NCCL's estimate picks NVLSTree, whose time with the
    fill is within 10 % of the measured 298.1 us (aws-samples/awsome-distributed-training)."""
    c = preset("aws-p5", 2)
    every = coll.plans("allreduce", 16 * 2**20, 16, c, 16)
    chosen = coll.choose_plan("allreduce", 16 * 2**20, 16, c, 16)
    assert chosen.algorithm == "nvlstree" and float(chosen.unseen_s) > 0
    assert float(chosen.nccl_estimate_s) == min(float(p.nccl_estimate_s) for p in every)
    gpu_us = (float(chosen.time_s) - c.nccl.host_overhead_s) * 1e6
    assert gpu_us == pytest.approx(298.1, rel=0.10)


def test_p5_mid_sizes_hold():
    got = {r["what"]: r["error_%"] for r in validation.measured_rows()}
    for size in ("4 MiB", "16 MiB", "64 MiB", "256 MiB"):
        assert abs(got[f"2 x p5 (8x H100, EFAv2), AllReduce {size}"]) <= 10, size


def test_proxy_transports_run_what_their_stack_leaves_nccl():
    """EFA v1 (aws-ofi-nccl sets NCCL_PROTO=simple without 128-byte in-order delivery) and
    TCPXO (GCP's A3 Mega environment: NCCL_PROTO=Simple, NCCL_NVLS_ENABLE=0) are priced with
    Simple only and, on TCPXO, without NVLSTree; EFA of p5 keeps LL/LL128 and NVLSTree."""
    mib = 2**20
    p4de = preset("aws-p4d", 2)
    a3 = validation.a3_mega(2)
    p5 = preset("aws-p5", 2)
    for c in (p4de, a3):
        plans = coll.plans("allreduce", mib, c.world_size, c, c.world_size)
        assert {p.protocol for p in plans} == {"Simple"}, c.fabric.transport
    assert "nvlstree" not in {p.algorithm for p in coll.plans("allreduce", 64 * mib, 16, a3, 16)}
    p5_plans = coll.plans("allreduce", mib, 16, p5, 16)
    assert {"LL", "LL128", "Simple"} <= {p.protocol for p in p5_plans}
    assert "nvlstree" in {p.algorithm for p in p5_plans}
    # the message costs refitted on the train rows now that those run the tree Simple
    got = {r["what"]: r for r in validation.measured_rows()}
    for what in ("2 x p4de (8x A100, 4x 100 Gb/s EFA), AllReduce 8 B",
                 "2 x a3-megagpu-8g (8x H100, TCPXO), AllReduce 16 B"):
        assert got[what]["train"] and got[what]["plan"] == "tree/Simple"
        assert abs(got[what]["error_%"]) <= 0.5, got[what]


def test_suspected_outlier_follows_the_rule_and_still_counts():
    """OUTLIER_FACTOR: only nccl-tests#309's 4-node 1 MiB row is below half of both its
    2- and 8-node neighbours at the same size; it is marked, never trained on, and counted
    in the summary (leaving it out changes the 1-256 MiB class by exactly that row)."""
    rows = validation.measured_rows()
    series = {}
    for r in rows:
        if "(nccl-tests#309 tables)" in r["what"]:
            series[(r["nodes"], r["nbytes"])] = r
    flagged = []
    for (nodes, nbytes), r in series.items():
        lower, upper = series.get((nodes // 2, nbytes)), series.get((nodes * 2, nbytes))
        if lower and upper and min(lower["measured_GBps"], upper["measured_GBps"]) > \
                validation.OUTLIER_FACTOR * r["measured_GBps"]:
            flagged.append(r["what"])
    assert flagged == [r["what"] for r in rows if r["suspect"]] and len(flagged) == 1
    assert not any(r["train"] for r in rows if r["suspect"])
    every = {c["class"]: c["rows"] for c in validation.class_summary(rows, held_out=True)}
    clean = {c["class"]: c["rows"] for c in
             validation.class_summary(rows, held_out=True, without_suspects=True)}
    assert every["1-256 MiB"] == clean["1-256 MiB"] + 1
    assert every["< 1 MiB"] == clean["< 1 MiB"]


def test_tree_first_loop_closed_form():
    """decision 112: the Simple tree's first loop on a lone-message transport. 8 MiB of
    NCCL_BUFFSIZE gives 1 MiB chunks (NCCL_STEPS 8); channels drop below 32 KiB each
    (enqueue.cc); under one loop the whole buffer crosses 2 log2(nodes) stages as lone
    messages: (active - 1) host costs and the share of one channel at one message's rate."""
    mib = 2**20
    assert nccl_model.tree_chunk_bytes(8 * mib) == mib
    assert [nccl_model.active_channels(n, 16) for n in (8, 64 * 1024, 256 * 1024, mib)] == \
        [1, 2, 8, 16]
    c, rate, stream = 2e-6, 2e9, 100e9
    got = nccl_model.tree_first_loop_s(4 * mib, 2, 16, mib, c, rate, stream)
    assert got == pytest.approx(2 * (15 * c + 4 * mib / 16 / rate) - 2 * 4 * mib / stream)
    # beyond one loop (16 x 1 MiB) only the first loop's bytes are lone messages
    big = nccl_model.tree_first_loop_s(2**30, 2, 16, mib, c, rate, stream)
    assert big == pytest.approx(2 * (15 * c + mib / rate) - 2 * 16 * mib / stream)
    # a lone message as fast as the stream adds nothing; 4 nodes cross 4 stages
    assert nccl_model.tree_first_loop_s(mib, 2, 16, mib, 0.0, 1e15, stream) == 0.0
    four = nccl_model.tree_first_loop_s(4 * mib, 4, 16, mib, c, rate, stream)
    assert four == pytest.approx(4 * (15 * c + 4 * mib / 16 / rate) - 2 * 4 * mib / stream)


def test_lone_messages_are_priced_but_not_chosen_by():
    """The proxy transports' first loop is unseen by NCCL's choice (its estimate keeps its
    tree factors and correction); InfiniBand's tree has no such term."""
    a3 = validation.a3_mega(2)
    chosen = coll.choose_plan("allreduce", 16 * 2**20, 16, a3, 16)
    every = coll.plans("allreduce", 16 * 2**20, 16, a3, 16)
    assert (chosen.algorithm, chosen.protocol) == ("tree", "Simple")
    assert float(chosen.unseen_s) > 0
    assert float(chosen.nccl_estimate_s) == min(float(p.nccl_estimate_s) for p in every)
    ib = validation.dgx_h100(2)
    tree = [p for p in coll.plans("allreduce", 16 * 2**20, 16, ib, 16)
            if (p.algorithm, p.protocol) == ("tree", "Simple")]
    assert tree and float(tree[0].unseen_s) == 0.0
    # 8-GPU nodes run 16 tree channels; a 72-GPU rack no more than NCCL's MAXCHANNELS (64)
    assert coll.tree_channels(a3) == 16
    assert coll.tree_channels(preset("gb200-nvl72")) == nccl_model.MAX_CHANNELS
    # symbolic sizes: a full loop, no error
    import sympy
    n = sympy.Symbol("n", positive=True)
    assert coll.plans("allreduce", n, 16, a3, 16)


def test_proxy_transports_mid_sizes_hold():
    """decision 112: the held-out rows of the EFA v1 and TCPXO tables from 64 KiB to 1 GiB
    (the train rows are 8/16 B, 4 and 8 MiB, and the efficiencies' 2 and 8 GiB)."""
    got = {r["what"]: r for r in validation.measured_rows()}
    a3 = "2 x a3-megagpu-8g (8x H100, TCPXO), AllReduce {}"
    p4de = "2 x p4de (8x A100, 4x 100 Gb/s EFA), AllReduce {}"
    for size in ("64 KiB", "1 MiB", "16 MiB", "64 MiB", "256 MiB", "1 GiB"):
        row = got[a3.format(size)]
        assert not row["train"] and abs(row["error_%"]) <= 6, row
    for size, bound in (("64 KiB", 15), ("1 MiB", 15), ("16 MiB", 5), ("256 MiB", 5)):
        row = got[p4de.format(size)]
        assert not row["train"] and abs(row["error_%"]) <= bound, row


def test_large_class_does_not_regress():
    """issue 37 item 2 (decision 112): the held-out >= 256 MiB class stays at or below the
    median 3.8 % and max 42.5 % it had at 65c9906, on the figures it had then (MEASURED;
    decision 113's other collectives came later and are held to their own explained misses)."""
    had = {m.what for m in validation.MEASURED}
    rows = [r for r in validation.measured_rows() if r["what"] in had]
    summary = {c["class"]: c for c in validation.class_summary(rows, held_out=True)}
    assert summary[">= 256 MiB"]["median_%"] <= 3.8
    assert summary[">= 256 MiB"]["max_%"] <= 42.5


def _ring_lone_first_loop_floor_s(nbytes: int, ranks: int, channels: int,
                                  buffsize: int, message_Bps: float) -> float:
    """decision 115: the least time the Simple ring's first loop would take if it crossed
    the network as lone messages (decision 112's mechanism carried to the ring). Its chunk is
    NCCL_STEPS/2 steps of the buffer (enqueue.cc calcCollChunking, v2.28.9-1), one loop is
    ranks x active channels x chunk; each node's network hop carries (ranks - 1)/ranks of the
    loop, spread over the active channels, each at one message's rate (host costs left out:
    a floor)."""
    chunk = nccl_model.NCCL_STEPS // 2 * nccl_model.tree_chunk_bytes(buffsize)
    bus = nbytes * (ranks - 1) / ranks
    active = nccl_model.active_channels(bus, channels)
    first = min(nbytes, ranks * active * chunk)
    return first * (ranks - 1) / ranks / (active * message_Bps)


def test_ring_first_loop_closed_form():
    """decision 115: the ring's chunk on the proxy transports' 8 MiB buffer is 4 MiB, so one
    loop of 16 ranks x 16 channels is 1 GiB: below it the whole buffer is the first loop."""
    mib = 2**20
    assert nccl_model.NCCL_STEPS // 2 * nccl_model.tree_chunk_bytes(8 * mib) == 4 * mib
    got = _ring_lone_first_loop_floor_s(64 * mib, 16, 16, 8 * mib, 2.5e9)
    assert got == pytest.approx(64 * mib * 15 / 16 / (16 * 2.5e9))
    big = _ring_lone_first_loop_floor_s(8 * 2**30, 16, 16, 8 * mib, 2.5e9)
    assert big == pytest.approx(2**30 * 15 / 16 / (16 * 2.5e9))


def test_tcpxo_allgather_refutes_a_lone_message_ring():
    """decision 115: with decision 112's TCPXO message rate unchanged, a ring whose first
    loop crossed as lone messages could not finish the held-out A3 Mega AllGather rows from
    16 MiB to 256 MiB in their measured time (its floor is 2.0, 3.0, 4.1x the measurement):
    the ring keeps the stream's rate."""
    from cost_model.specs import LONE_MESSAGE, TRANSPORT_BUFFSIZE
    got = {r["what"]: r for r in validation.measured_rows()}
    a3 = "2 x a3-megagpu-8g (8x H100, TCPXO), AllGather {}"
    _, rate = LONE_MESSAGE["tcpxo"]
    for size, mib in (("16 MiB", 16), ("64 MiB", 64), ("256 MiB", 256)):
        row = got[a3.format(size)]
        nbytes = mib * 2**20
        measured_s = nbytes * 15 / 16 / (row["measured_GBps"] * 1e9)
        floor = _ring_lone_first_loop_floor_s(nbytes, 16, 16, TRANSPORT_BUFFSIZE["tcpxo"], rate)
        assert not row["train"] and floor > 1.5 * measured_s, (row, floor, measured_s)


def test_ring_first_post_closed_form():
    """decision 115: each further active channel's first message waits one host cost, once
    per network step of the ring (nInterSteps); channels drop below 32 KiB each."""
    c = 1.14e-6
    assert nccl_model.ring_first_post_s(2**20, 16, 1, c) == pytest.approx(15 * c)
    assert nccl_model.ring_first_post_s(2**30, 16, 2, c) == pytest.approx(30 * c)
    assert nccl_model.ring_first_post_s(64 * 1024, 16, 1, c) == pytest.approx(c)
    assert nccl_model.ring_first_post_s(8, 16, 4, c) == 0.0


def test_ring_first_post_is_priced_but_not_chosen_by():
    """The ring's wait is unseen by NCCL's choice, on the proxy transports only."""
    a3 = validation.a3_mega(2)
    ring = [p for p in coll.plans("allgather", 16 * 2**20, 16, a3, 16)
            if (p.algorithm, p.protocol) == ("ring", "Simple")][0]
    assert float(ring.unseen_s) == pytest.approx(15 * 1.14e-6)
    ib = validation.dgx_h100(2)
    ring = [p for p in coll.plans("allgather", 16 * 2**20, 16, ib, 16)
            if (p.algorithm, p.protocol) == ("ring", "Simple")][0]
    assert float(ring.unseen_s) == 0.0


def test_tcpxo_allgather_held_out_rows_as_found():
    """decision 115's held-out evidence: the A3 Mega AllGather errors (+ = model fast) with
    the ring's first-post wait (before it: 64 KiB 17.6, 1 MiB 53.2, 16 MiB 18.1, 64 MiB 22.1,
    256 MiB 4.2, 1 GiB -0.4 %); 1 KiB has one active channel and does not move."""
    got = {r["what"]: r for r in validation.measured_rows()}
    a3 = "2 x a3-megagpu-8g (8x H100, TCPXO), AllGather {}"
    found = {"1 KiB": 3.9, "64 KiB": 16.0, "1 MiB": 28.1, "16 MiB": 7.1, "64 MiB": 17.4,
             "256 MiB": 3.0, "1 GiB": -0.7, "8 GiB": -2.7}
    for size, error in found.items():
        row = got[a3.format(size)]
        assert not row["train"] and row["error_%"] == pytest.approx(error, abs=0.2), row
