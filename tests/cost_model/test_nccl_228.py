"""Issue 23's model fixes: one NCCL release (2.28.9) for every table, GPU generations as NCCL
maps them, NVLink and NVLS read from the profile, NVLS switchable, fabric efficiency that
falls with node count, the new presets, and the bad input that must exit 2 with one message
naming the field, what was expected and the fix."""

import dataclasses
import json
import math

import pytest

from cost_model import collectives as coll
from cost_model import nccl_model
from cost_model.hardware import GPU, PRESETS, Fabric, load_hardware, preset
from workbench.cli.main import main
from workbench.errors import HardwareError


def test_every_table_cites_one_nccl_release():
    import inspect

    source = inspect.getsource(nccl_model)
    assert nccl_model.NCCL_VERSION == "2.28.9"
    assert "v2.28.9-1" in source and nccl_model.NCCL_COMMIT in source
    for other in ("2.20", "2.30", "b6475625", "5067397c"):
        assert other not in source


@pytest.mark.parametrize("cc, gen", [(70, "volta"), (75, "volta"), (80, "ampere"),
                                     (86, "ampere"), (90, "hopper"), (100, "blackwell"),
                                     (103, "blackwell"), (120, "blackwell")])
def test_generations_as_nccl_maps_compute_capabilities(cc, gen):
    assert nccl_model.generation(cc) == gen


@pytest.mark.parametrize("name, gen", [("v100x16", "volta"), ("dgx-a100", "ampere"),
                                       ("aws-p4d", "ampere"), ("dgx-h100", "hopper"),
                                       ("dgx-h800", "hopper"), ("aws-p5", "hopper"),
                                       ("dgx-b200", "blackwell"), ("gb200-nvl72", "blackwell")])
def test_presets_map_to_their_generation(name, gen):
    """Blackwell was mapped to Hopper before issue 23 (its constants were dead code)."""
    assert preset(name).gpu.generation == gen


def test_blackwell_tables_are_used():
    """Tree LL128 across 4+ nodes: Blackwell's per-channel cap (20 GB/s) is not Hopper's
    (29): the B200 cluster's plan is priced from its own row."""
    b200, h100 = preset("dgx-b200", 4), preset("dgx-h100", 4)
    assert nccl_model.bus_bandwidth_Bps("allreduce", "tree", "LL128", 400e9, 32, 4, 8,
                                        b200.gpu.generation) == pytest.approx(8 * 20.0e9)
    assert nccl_model.bus_bandwidth_Bps("allreduce", "tree", "LL128", 400e9, 32, 4, 8,
                                        h100.gpu.generation) == pytest.approx(8 * 29.0e9)


def test_nvlink_figures_come_from_the_profile():
    """NCCL's topology NVLink bandwidth is the profile's links x the generation's per-link
    figure; a profile with fewer links gets a slower ring and NVLS."""
    assert preset("dgx-h100").nccl_nvlink_Bps == pytest.approx(18 * 20.6e9)
    assert preset("dgx-b200").nccl_nvlink_Bps == pytest.approx(18 * 40.1e9)
    assert preset("dgx-a100").nccl_nvlink_Bps == pytest.approx(12 * 20.0e9)
    assert preset("dgx-h800").nccl_nvlink_Bps == pytest.approx(8 * 20.6e9)
    fast = coll.choose_plan("allreduce", 2**30, 8, preset("dgx-h100"), 8)
    slow = coll.choose_plan("allreduce", 2**30, 8, preset("dgx-h800"), 8)
    assert fast.algorithm == slow.algorithm == "nvls"
    assert float(slow.time_s) > 1.8 * float(fast.time_s)


def test_nvls_false_in_a_profile_and_on_the_cli(tmp_path, capsys):
    p = tmp_path / "off.json"
    p.write_text(json.dumps({"base": "dgx-h100", "nvls": False}))
    off = load_hardware(str(p))
    assert off.nvls is False
    assert {x.algorithm for x in coll.plans("allreduce", 2**30, 8, off, 8)} == {"ring"}
    assert load_hardware("dgx-h100", nvls=False).nvls is False
    assert load_hardware("dgx-h100").nvls is True
    args = ["simulate", "studies/sgd.py", "--hardware", "dgx-h100", "--set", "N=2**26",
            "--explain"]
    assert main(args) == 0
    on = capsys.readouterr().out
    assert main([*args, "--no-nvls"]) == 0
    off_out = capsys.readouterr().out
    assert "nvls/Simple" in on and "nvls/Simple" not in off_out


@pytest.mark.parametrize("profile, message", [
    ({"base": "dgx-a100", "nvls": True},
     "nvls must be false for GPU A100 (compute capability 80, ampere): NVLink SHARP needs "
     "compute capability >= 90 (Hopper) and an NVSwitch, got nvls: true; set \"nvls\": false "
     "in the profile"),
    ({"base": "dgx-h100", "nvls": "yes"},
     "hardware profile {path} field nvls must be true or false (JSON/YAML booleans), got a "
     "string; fix the profile"),
    # Numbers a profile gives are checked by cost_model.validate's rules (issue 26).
    ({"base": "dgx-h100", "fabric": {"efficiency": 1.5}},
     "hardware profile {path} field fabric.efficiency must be a finite number >= 0.001 and <= 1 "
     "(a share of the peak), e.g. 0.85, got a number > 1; fix the profile"),
    ({"base": "dgx-h100", "fabric": {"efficiency": float("nan")}},
     "hardware profile {path} field fabric.efficiency must be a finite number >= 0.001 and <= 1 "
     "(a share of the peak), e.g. 0.85, got a non-finite number; fix the profile"),
    ({"base": "dgx-h100", "fabric": {"loss_per_doubling": 1.0}},
     "fabric.loss_per_doubling must be in [0, 1) (the fraction of the efficiency lost per "
     "doubling of nodes), got 1.0; use 0 for no loss with scale"),
    ({"base": "dgx-h100", "fabric": {"transport": "myrinet"}},
     "fabric.transport must be one of infiniband, roce, efa, efa-v1, tcpx, tcpxo, got "
     "'myrinet'; fix the profile's fabric section"),
    # issue 37: a transport without a cited message cost needs one in the profile
    ({"base": "dgx-h100", "fabric": {"transport": "tcpx"}},
     "fabric.message_cost_s must be given for transport 'tcpx': it has no cited per-message "
     "cost (known for infiniband, roce, efa, efa-v1, tcpxo), got none; add "
     "\"message_cost_s\" (seconds per network message, e.g. 2e-5) to the profile's fabric "
     "section"),
    ({"base": "dgx-h100", "fabric": {"message_cost_s": -1}},
     "hardware profile {path} field fabric.message_cost_s must be a finite number >= 0 and <= "
     "3600 (seconds), e.g. 2e-6 for 2 us, got a number < 0; fix the profile"),
    ({"base": "dgx-h100", "nccl": {"protocols": {"LL": {"efficiency": 1.5}}}},
     "hardware profile {path} field nccl.protocols.LL.efficiency must be a finite number >= "
     "0.001 and <= 1 (a share of the peak), e.g. 0.85, got a number > 1; fix the profile"),
    ({"base": "dgx-h100", "gpu": {"compute_capability": 60}},
     "gpu.compute_capability must be a GPU generation NCCL 2.28's tuning tables know (volta "
     "70, ampere 80, hopper 90, blackwell 100 and newer), got 60; set gpu.compute_capability "
     "in the profile (e.g. 90), or use a preset"),
    ({"base": "dgx-h100", "gpus_per_node": 8.5},
     "hardware profile {path} field gpus_per_node must be an integer >= 1 and <= 100000 (GPUs), "
     "e.g. 8, got a number that is not whole; fix the profile"),
    ({"base": "dgx-h100", "nics_per_node": float("inf")},
     "hardware profile {path} field nics_per_node must be an integer >= 0 and <= 100000 (0: one "
     "NIC per GPU), e.g. 8, got a non-finite number; fix the profile"),
    ({"base": "dgx-h100", "gpu": {"hbm_bandwidth_Bps": float("nan")}},
     "hardware profile {path} field gpu.hbm_bandwidth_Bps must be a finite number >= 1 and <= "
     "1e+18 (per second), e.g. 3.3e12 for 3.3 TB/s, got a non-finite number; fix the profile"),
    ({"base": "dgx-h100", "nvlink_links": 2.5},
     "hardware profile {path} field nvlink_links must be an integer >= 1 and <= 1000000000 (a "
     "count) (or 0), e.g. 8, got a number that is not whole; fix the profile"),
])
def test_bad_profiles_exit_2_with_one_message(tmp_path, capsys, profile, message):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(profile))  # NaN and Infinity as Python's json writes them
    with pytest.raises(HardwareError) as e:
        load_hardware(str(p))
    message = message.replace("{path}", str(p))  # the schema's messages name the file
    assert str(e.value) == message
    code = main(["simulate", "studies/sgd.py", "--hardware", str(p)])
    err = capsys.readouterr().err
    assert code == 2 and message in err


def test_a_gpu_nccl_does_not_know_is_refused():
    with pytest.raises(HardwareError) as e:
        GPU("MI300X", 304, 5e12, 192e9, (("f32", 1e14),), 4e-6)
    assert str(e.value) == (
        "gpu.compute_capability must be a GPU generation NCCL 2.28's tuning tables know (volta "
        "70, ampere 80, hopper 90, blackwell 100 and newer), got none for gpu.name 'MI300X'; "
        "set gpu.compute_capability in the profile (e.g. 90), or use a preset")
    assert GPU("MI300X-as-H100", 132, 3e12, 80e9, (("f32", 6.7e13),), 4e-6,
               compute_capability=90).generation == "hopper"
    with pytest.raises(HardwareError, match=r"^gpu.sm_count must be a positive integer, got "
                                            r"132.5"):
        GPU("H100", 132.5, 3e12, 80e9, (("f32", 6.7e13),), 4e-6)


def test_fabric_efficiency_falls_with_node_count():
    f = Fabric(efficiency=0.96, loss_per_doubling=0.06)
    assert f.efficiency_at(1) == 1.0 and f.efficiency_at(2) == 0.96
    assert f.efficiency_at(128) == pytest.approx(0.96 * 0.94 ** 6)
    c = preset("dgx-h100", 128)
    assert c.node_injection_Bps(2) > c.node_injection_Bps(16) > c.node_injection_Bps(128)
    # the ring across nodes then loses bandwidth as real fabrics do (nccl#1229)
    t = [float(coll.choose_plan("reducescatter", 2**33, 8 * n, preset("dgx-h100", n),
                                8 * n).time_s) for n in (8, 32, 128)]
    busbw = [2**33 * (8 * n - 1) / (8 * n) / x for n, x in zip((8, 32, 128), t)]
    assert busbw == sorted(busbw, reverse=True)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_fabrics_have_switch_latency_and_an_efficiency(name):
    fabric = preset(name).fabric
    assert fabric.switch_latency_s > 0
    assert 0 < fabric.efficiency < 1 and fabric.transport in ("infiniband", "roce", "efa",
                                                               "efa-v1")
    assert fabric.message_s >= 0  # every preset transport has a message cost (issue 37)


def test_tcpx_with_its_message_cost_loads_and_prices_it(tmp_path):
    """A TCPX fabric that gives its message cost is accepted, and the cost lands on every
    network hop of a small AllReduce (2 nodes: the tree's 2 hops)."""
    p = tmp_path / "tcpx.json"
    p.write_text(json.dumps({"base": "dgx-h100", "fabric": {"transport": "tcpx",
                                                            "message_cost_s": 3e-5}}))
    c = load_hardware(str(p)).with_nodes(2)
    ib = preset("dgx-h100", 2)
    extra = (coll.choose_plan("allreduce", 8, 16, c, 16).time_s
             - coll.choose_plan("allreduce", 8, 16, ib, 16).time_s)
    assert extra == pytest.approx(2 * 3e-5)


def test_new_presets():
    p4d, p5 = preset("aws-p4d"), preset("aws-p5")
    assert (p4d.fabric.transport, p5.fabric.transport) == ("efa-v1", "efa")
    assert p4d.gpus_per_node * p4d.nic_per_gpu_Bps == pytest.approx(50e9)  # 400 Gb/s a node
    assert p5.gpus_per_node * p5.nic_per_gpu_Bps == pytest.approx(400e9)  # 3200 Gb/s a node
    assert not p4d.nvls and p5.nvls
    b200 = preset("dgx-b200")
    assert b200.gpu.sm_count == 148 and b200.nvls and b200.gpus_per_node == 8
    h800 = preset("dgx-h800")
    assert h800.nvlink.bandwidth_Bps == 200e9 and h800.gpu.generation == "hopper"
    # the V100's sustained HBM is above what FusedAdam reached on CoCoNet's cluster
    assert preset("dgx2-v100").gpu.hbm_bandwidth_Bps >= 740e9


def test_two_node_tree_carries_the_buffer_once_per_nic():
    """NCCL models the 2-node tree with bwIntra raised to twice bwInter (search.cc pass 2):
    on EFA p4dn the 2-node AllReduce is the tree at ~2x the ring's algorithm bandwidth."""
    c = preset("aws-p4d", 2)
    plan = coll.choose_plan("allreduce", 2**30, 16, c, 16)
    assert plan.algorithm == "tree"
    ring = min((p for p in coll.plans("allreduce", 2**30, 16, c, 16)
                if p.algorithm == "ring"), key=lambda p: float(p.time_s))
    assert float(ring.time_s) / float(plan.time_s) > 1.6
    assert math.isfinite(float(plan.time_s))


def test_no_nvls_dataclass_replace_keeps_checks():
    with pytest.raises(HardwareError, match=r"^nvls must be false for GPU V100"):
        dataclasses.replace(preset("v100x16"), nvls=True)
