"""Hardware presets, multi-node forms and profile files."""

import json

import pytest

from cost_model.hardware import PRESETS, load_hardware, preset
from workbench.errors import HardwareError


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_well_formed(name):
    c = preset(name)
    assert c.world_size == c.gpus_per_node
    assert c.peer_load_bandwidth_Bps <= c.nvlink.bandwidth_Bps
    assert c.gpu.flops_for("f16") >= c.gpu.flops_for("f32")
    multi = preset(name, nodes=4)
    assert multi.world_size == 4 * c.gpus_per_node
    assert multi.nic.bandwidth_Bps == 50e9  # 400 Gb/s per GPU


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
