"""Hardware presets, multi-node forms and profile files."""

import json

import pytest

from cost_model.hardware import MACHINE_PRESETS, PRESETS, load_hardware, preset
from workbench.errors import HardwareError


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_well_formed(name):
    c = preset(name)
    assert c.world_size == c.gpus_per_node
    assert c.peer_load_bandwidth_Bps <= c.nvlink.bandwidth_Bps
    assert c.gpu.flops_for("f16") >= c.gpu.flops_for("f32")
    multi = preset(name, nodes=4)
    assert multi.world_size == 4 * c.gpus_per_node
    if name in MACHINE_PRESETS:
        assert multi.nic.bandwidth_Bps == 50e9  # 400 Gb/s per GPU
    assert multi.nic_per_gpu_Bps > 0 and multi.fabric.max_nodes >= 4


def test_unknown_preset_lists_known_ones():
    with pytest.raises(HardwareError) as e:
        load_hardware("h300x2")
    for name in PRESETS:
        assert name in str(e.value)


def test_json_profile_overrides_nested_fields(tmp_path):
    p = tmp_path / "prof.json"
    p.write_text(json.dumps({"base": "h100x8", "gpu": {"hbm_bandwidth_Bps": 1e12},
                             "nccl": {"protocols": {"Simple": {"efficiency": 0.5}}}}))
    c = load_hardware(str(p))
    assert c.gpu.hbm_bandwidth_Bps == 1e12
    assert c.gpus_per_node == 8
    assert dict((q.name, q.efficiency) for q in c.nccl.protocols)["Simple"] == 0.5


def test_yaml_profile(tmp_path):
    p = tmp_path / "prof.yaml"
    p.write_text("nvlink:\n  bandwidth_Bps: 1.0e11\n")
    assert load_hardware(str(p), nodes=2).nvlink.bandwidth_Bps == 1e11


@pytest.mark.parametrize("text, field", [
    ('{"gpu": {"hbm_bandwith_Bps": 1}}', "gpu.hbm_bandwith_Bps"),
    ('{"gpu": {"sm_count": "many"}}', "gpu.sm_count"),
    ('{"nvlink": 5}', "nvlink"),
    ('{"nccl": {"protocols": {"LL256": {}}}}', "nccl.protocols.LL256"),
])
def test_malformed_profile_names_the_field(tmp_path, text, field):
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(HardwareError, match=field.replace(".", r"\.")):
        load_hardware(str(p))


def test_profile_that_is_not_json(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{nope")
    with pytest.raises(HardwareError, match="must be valid JSON"):
        load_hardware(str(p))


# ---------------------------------------------------------------- topology as data


@pytest.mark.parametrize("name, gpus_per_node, nic_Bps, nics, nvlink_Bps", [
    ("dgx-h100", 8, 50e9, 8, 450e9),  # 8x ConnectX-7 400 Gb/s, NVLink4 900 GB/s both ways
    ("dgx-h200", 8, 50e9, 8, 478e9),  # the h200x4 machine's measured NV18 figure
    ("gb200-nvl72", 72, 50e9, 72, 900e9),  # one NVLink 5 domain of 72, a CX-7 per GPU
    ("dgx-a100", 8, 25e9, 8, 300e9),  # 8x ConnectX-6 HDR 200 Gb/s
    ("dgx2-v100", 16, 12.5e9, 8, 150e9),  # CoCoNet's DGX-2: 8x EDR 100 Gb/s for 16 GPUs
])
def test_cluster_presets_describe_their_topology(name, gpus_per_node, nic_Bps, nics,
                                                 nvlink_Bps):
    c = preset(name)
    assert (c.gpus_per_node, c.nic.bandwidth_Bps, c.nics_per_node, c.nvlink.bandwidth_Bps) \
        == (gpus_per_node, nic_Bps, nics, nvlink_Bps)
    assert c.nic_per_gpu_Bps == nic_Bps * nics / gpus_per_node
    assert c.fabric.oversubscription == 1.0


def test_existing_presets_keep_one_nic_per_gpu_on_the_ndr_fabric():
    for name in MACHINE_PRESETS:
        c = preset(name, nodes=2048)
        assert c.nics_per_node == 0 and c.nic_per_gpu_Bps == c.nic.bandwidth_Bps
        # InfiniBand's 0.96 of line rate over 2 nodes, 6 % less per doubling (issue 23)
        assert c.node_injection_Bps(2048) == pytest.approx(
            c.gpus_per_node * c.nic.bandwidth_Bps * 0.96 * 0.94 ** 10)


def test_oversubscription_divides_what_crosses_the_spine():
    import dataclasses

    c = preset("dgx-h100", nodes=64)
    half = dataclasses.replace(c, fabric=dataclasses.replace(c.fabric, oversubscription=2.0))
    eff = c.fabric.efficiency_at
    assert half.node_injection_Bps(32) == c.node_injection_Bps(32) == 400e9 * eff(32)  # a leaf
    assert half.node_injection_Bps(64) == 200e9 * eff(64)  # two leaves: through the spine


@pytest.mark.parametrize("profile, message", [
    ({"base": "dgx-h100", "nic": {"bandwidth_Bps": -1}},
     "bad.json field nic.bandwidth_Bps must be a finite number >= 1 and <= 1e+18 (per "
     "second), e.g. 3.3e12 for 3.3 TB/s, got a number < 1; fix the profile"),
    ({"base": "dgx-h100", "fabric": {"oversubscription": 0.5}},
     "bad.json field fabric.oversubscription must be a finite number >= 1 and <= "
     "1000000 (downlink : uplink), e.g. 1, got a number < 1; fix the profile"),
    ({"base": "dgx-h100", "fabric": {"kind": "torus"}},
     "fabric.kind must be one of rail-optimized, fat-tree, got 'torus'; rail-optimized is "
     "what DGX SuperPODs use"),
    ({"base": "dgx-h100", "nvlink": {"bandwidth_Bps": "fast"}},
     "bad.json field nvlink.bandwidth_Bps must be a finite number >= 1 and <= 1e+18 "
     "(per second), e.g. 3.3e12 for 3.3 TB/s, got a string"),
])
def test_bad_topology_profiles_name_the_field(tmp_path, profile, message):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(profile))
    with pytest.raises(HardwareError) as e:
        load_hardware(str(p))
    assert message in str(e.value)


def test_missing_or_negative_link_bandwidth_is_refused():
    import dataclasses

    from cost_model.hardware import Link

    c = preset("dgx-h100")
    with pytest.raises(HardwareError) as e:
        dataclasses.replace(c, nic=Link("nic", -5e9, 1e-6))
    assert str(e.value) == ("nic.bandwidth_Bps must be a positive number (bytes per second per "
                            "direction), got -5000000000.0; give the link's bandwidth in the "
                            "profile")
    with pytest.raises(HardwareError, match=r"^nvlink must be a link with bandwidth_Bps and "
                                            r"latency_s, got None; give both in the profile$"):
        dataclasses.replace(c, nvlink=None)


def test_a_topology_that_does_not_hold_the_ranks_is_refused():
    with pytest.raises(HardwareError) as e:
        preset("dgx2-v100", nodes=1024)
    assert str(e.value) == ("fabric must hold the cluster's 1024 nodes, got a 2-tier fabric of "
                            "36-port switches that holds 648; use fewer --nodes or a profile "
                            "with more fabric.tiers")
    assert preset("dgx2-v100", nodes=648).world_size == 648 * 16
