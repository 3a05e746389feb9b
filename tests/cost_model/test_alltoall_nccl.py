"""AllToAll as NCCL runs it (issue 37, decision 113): grouped sends, LL up to 16 KiB a peer,
Simple above, a protocol hop per local peer and a posted network operation per remote peer,
one NIC's delivered rate per GPU across nodes; nccl-tests' busbw (n-1)/n; the plan, the
simulator and benchmarks/validation_nccl.py read the one description
(cost_model/ops/alltoall.py)."""

import dataclasses
import json

import pytest
from conftest import load_script

from cost_model import nccl_model
from cost_model.hardware import load_hardware, preset
from cost_model.ops import alltoall as a2a

validation = load_script("benchmarks/validation_nccl.py", "validation_nccl_alltoall")

MIB = 2**20


def test_one_node_latency_and_bandwidth_closed_form():
    """8 GPUs of one node: LL while a peer's block is at most 16 KiB x the channels a peer may
    use (32 on an H100 node: 2 x 18 NVLinks, at most the 32 p2p channels), with LL's base and
    one LL NVLink hop per peer (tuning.cc 6.6 + 7 x 0.6 us); above, Simple's (8.4 + 7 x 3.4
    us) and 7/8 of the buffer at NVLink x the fitted Simple efficiency."""
    c = preset("dgx-h100")
    host = c.nccl.host_overhead_s
    assert a2a.p2p_channels_per_peer(c, 8) == 32
    small = 16384 * 32 * 8
    assert a2a.alltoall_protocol(c, small, 8) == "LL"
    assert a2a.alltoall_protocol(c, small + 8, 8) == "Simple"
    ll = next(p for p in c.nccl.protocols if p.name == "LL")
    want = host + (6.6 + 7 * 0.6) * 1e-6 + small * 7 / 8 / (450e9 * ll.efficiency)
    assert a2a.alltoall_seconds(c, small, 8) == pytest.approx(want, rel=1e-12)
    simple = c.nccl.protocols[-1]
    S = 8 * MIB
    want = host + (8.4 + 7 * 3.4) * 1e-6 + S * 7 / 8 / (450e9 * simple.efficiency)
    assert a2a.alltoall_seconds(c, S, 8) == pytest.approx(want, rel=1e-12)
    # the fixed part the simulator and the plan's overlap read is the same latency
    assert a2a.alltoall_latency_s(c, 8, S) == pytest.approx(host + 32.2e-6, rel=1e-12)


def test_p2p_channels_per_peer_follow_paths_cc():
    """Across nodes 2 channels a remote peer, halved while 2 x ranks > 4 x p2pnChannels (16
    on DGX H100 nodes: 8 NICs' graph channels, doubled); the LL threshold follows."""
    assert [a2a.p2p_channels_per_peer(preset("dgx-h100", n), 8 * n)
            for n in (2, 4, 8, 16)] == [2, 2, 1, 1]
    c = preset("dgx-h100", 2)
    assert a2a.alltoall_protocol(c, 16 * 32768, 16) == "LL"
    assert a2a.alltoall_protocol(c, 16 * 32768 + 16, 16) == "Simple"


def test_across_nodes_one_nic_per_gpu():
    """2 nodes of 8: the 8/16 of the buffer bound for the other node leave through one NIC's
    delivered rate per GPU (InfiniBand 0.96 of 50 GB/s); nccl-tests' busbw is then
    nic x (P-1)/(P-g), the maintainer's 'N/(N-1)x the bandwidth per GPU' (nccl-tests#130)
    within its rounding; latency: 8 posted Simple network operations and one network hop."""
    c = preset("dgx-h100", 2)
    S = 8 * 2**30
    nic = 50e9 * 0.96
    lat = (8.4 + 7 * 3.4 + 8 * nccl_model.NET_OVERHEAD_US * 3 + 14.0) * 1e-6
    want = c.nccl.host_overhead_s + lat + S * 8 / 16 / nic
    assert a2a.alltoall_seconds(c, S, 16) == pytest.approx(want, rel=1e-12)
    busbw, plan = validation.model_busbw_GBps("alltoall", S, c)
    assert plan == "p2p/Simple"
    assert busbw == pytest.approx(nic * 15 / 8 / 1e9, rel=2e-3)


def test_simple_only_transport_and_message_cost():
    """Across nodes an AllToAll runs what the fabric's stack leaves NCCL (EFA v1: Simple
    only, cost_model.specs TRANSPORT_PROTOCOLS), and a transport's per-message cost lands
    once (the remote sends fly at once)."""
    p4d = preset("aws-p4d", 2)
    assert a2a.alltoall_protocol(p4d, 1024, 16) == "Simple"
    assert a2a.alltoall_protocol(preset("aws-p5", 2), 1024, 16) == "LL"
    ib = preset("dgx-h100", 2)
    tcpx = dataclasses.replace(ib, fabric=dataclasses.replace(
        ib.fabric, transport="tcpx", message_cost_s=3e-5))
    extra = a2a.alltoall_seconds(tcpx, 1024, 16) - a2a.alltoall_seconds(ib, 1024, 16)
    assert extra == pytest.approx(3e-5)


def test_a_tcpx_profile_without_message_cost_is_refused(tmp_path):
    """Issue 37's bad input, for the AllToAll too: the fabric is refused before anything is
    priced, naming the field and the fix."""
    p = tmp_path / "tcpx.json"
    p.write_text(json.dumps({"base": "dgx-h100", "fabric": {"transport": "tcpx"}}))
    with pytest.raises(Exception, match=r"^fabric.message_cost_s must be given for transport "
                                        r"'tcpx'.*add \"message_cost_s\""):
        load_hardware(str(p))


@pytest.fixture(scope="module")
def rows():
    return {r["what"]: r for r in validation.measured_rows() if "AllToAll" in r["what"]}


def test_alltoall_rows_cover_every_size_class_and_hold_where_explained(rows):
    """Cited alltoall_perf figures in every size class, none fitted; the one-node LL rows
    (DeepEP#303), the 500 MiB 4-GPU row (nccl#2169) and the one-GPU-per-node row hold within
    5 %, the 2-node x 8 row is the maintainer's rule of thumb less nccl-tests' (n-1)/n, OCI's
    GB200 rows within 10 % across racks and model-fast inside one (NVLink 5 at H200's fitted
    efficiency); the 8x H20-3e 1-4 MiB rows (nccl-tests#314, a flat ~58 us the model does not
    give) are the explained misses, model too fast (benchmarks/README.md, decision 113)."""
    assert {r["class"] for r in rows.values()} == {"< 1 MiB", "1-256 MiB", ">= 256 MiB"}
    assert not any(r["train"] for r in rows.values())
    assert all(r["plan"].startswith("p2p/") for r in rows.values())
    for what, r in rows.items():
        if "H20-3e" in what:
            assert r["error_%"] > 15, r
        elif what.startswith("GB200 NVL72") and r["nodes"] == 1:
            # one rack: NVLink 5 at the preset's H200-fitted protocol efficiency, model fast
            assert 0 < r["error_%"] <= 20, r
        elif what.startswith("GB200 NVL72"):
            # across racks: one NIC per GPU for the (P - g)/P bound elsewhere
            assert abs(r["error_%"]) <= 10, r
        elif what == "2 nodes x 8 H100, 400 Gb/s NICs, AllToAll":
            # the maintainer's '2x network bandwidth per GPU' leaves out nccl-tests' 15/16
            assert r["error_%"] == pytest.approx(100 * (0.96 * 50 * 15 / 8 / 97 - 1), abs=0.1)
        else:
            assert abs(r["error_%"]) <= 5, r
    assert {r["plan"] for r in rows.values() if r["nbytes"] <= 4096} == {"p2p/LL"}


def test_the_plan_prices_an_all_to_all_step_by_the_one_description():
    """A plan's all_to_all step costs what cost_model.ops.alltoall gives its rank's buffer
    (the validation's and the simulator's formula too): no second formula."""
    from plan_priced import priced

    from workbench import AllToAll, Local, P, Program, Size, Tensor, float32
    from workbench.interpreter import bind_sizes

    T, H = Size("T", multiple_of=P), Size("H", multiple_of=P)
    x = Tensor(float32, [T, H], Local, "x")
    program = Program(inputs=[x], outputs=[AllToAll(x, dim=0, name="y")], name="a2a")
    for cluster, ranks in ((preset("dgx-h100"), 8), (preset("dgx-h100", 2), 16)):
        bound = bind_sizes(program, {"T": 4096, "H": 4096, "P": ranks})
        t = float(priced(program, cluster, bound).stmts[0].time_s)
        assert t == pytest.approx(a2a.alltoall_seconds(cluster, 4096 * 4096 * 4, ranks),
                                  rel=1e-9)


def test_allgather_rows_across_sizes_hold_from_256_mib_and_miss_fast_below():
    """GCP A3 Ultra (H200) and A4 (B200) on RoCE and A3 Mega (H100) on TCPXO, 2 nodes of 8,
    all_gather_perf 1 KiB .. 8 GiB: from 256 MiB within 15 %; every miss above 15 % is the
    model too fast, below 256 MiB, as benchmarks/README.md explains (decision 113); TCPXO's
    message cost, fitted on a 16 B AllReduce, gives its 1 KiB AllGather within 5 %."""
    rows = {r["what"]: r for r in validation.measured_rows()
            if "AllGather" in r["what"] and r["what"].startswith("2 x a")}
    assert len(rows) == 24 and not any(r["train"] for r in rows.values())
    assert {r["class"] for r in rows.values()} == {"< 1 MiB", "1-256 MiB", ">= 256 MiB"}
    assert {r["fabric"] for r in rows.values()} == {"roce", "tcpxo"}
    for r in rows.values():
        if r["nbytes"] >= 256 * MIB:
            assert abs(r["error_%"]) <= 15, r
        elif abs(r["error_%"]) > 15:
            assert r["error_%"] > 0, r
    assert abs(rows["2 x a3-megagpu-8g (8x H100, TCPXO), AllGather 1 KiB"]["error_%"]) <= 5


def test_a_size_not_bound_to_a_number_prices_simple():
    """`simulate --symbolic` passes sizes as sympy symbols: the AllToAll is then priced at
    Simple (the large-buffer form, as the ring's symbolic plans), its bytes kept symbolic."""
    import sympy

    n = sympy.Symbol("n", positive=True)
    c = preset("dgx-h100", 2)
    assert a2a.alltoall_protocol(c, n, 16) == "Simple"
    t = a2a.alltoall_seconds(c, n, 16)
    assert t.free_symbols == {n}
    assert float(t.subs(n, 2**30)) == pytest.approx(
        a2a.alltoall_seconds(c, 2**30, 16), rel=1e-12)
