"""Hardware profiles whose numbers are not numbers (issue 26): NaN, inf, "nan", YAML .nan,
efficiencies of 1e9, fractional counts, unbounded fabric tiers, zero FLOP/s, subnormal
bandwidths, binary and huge files. Each is refused by the public loader with one message
naming the field, what it must be and the fix; `workbench simulate` exits 2 with it."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_model.hardware import load_hardware
from cost_model.validate import MAX_PROFILE_BYTES, profile_value
from workbench.cli.main import main
from workbench.errors import HardwareError

RATE = "a finite number >= 1 and <= 1e+18 (per second)"


def _json(tmp_path, text: str) -> str:
    p = tmp_path / "prof.json"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("text, message", [
    ('{"gpu": {"hbm_bandwidth_Bps": NaN}}',
     f"hardware profile field gpu.hbm_bandwidth_Bps must be {RATE}, got nan; fix the profile "
     "(e.g. 3.3e12 for 3.3 TB/s)"),
    ('{"gpu": {"hbm_bandwidth_Bps": "nan"}}',
     f"hardware profile field gpu.hbm_bandwidth_Bps must be {RATE}, got 'nan'"),
    ('{"nvlink": {"bandwidth_Bps": Infinity}}',
     f"hardware profile field nvlink.bandwidth_Bps must be {RATE}, got inf"),
    ('{"nic": {"bandwidth_Bps": 5e-324}}',
     f"hardware profile field nic.bandwidth_Bps must be {RATE}, got 5e-324"),
    ('{"nvlink": {"latency_s": -Infinity}}',
     "hardware profile field nvlink.latency_s must be a finite number >= 0 and <= 3600 "
     "(seconds), got -inf"),
    ('{"nccl": {"protocols": {"Simple": {"efficiency": 1e9}}}}',
     "hardware profile field nccl.protocols.Simple.efficiency must be a finite number >= 0.001 "
     "and <= 1 (a share of the peak), got 1000000000.0; fix the profile (e.g. 0.85)"),
    ('{"nccl": {"allreduce_bandwidth_factor": 5e-324}}',
     "hardware profile field nccl.allreduce_bandwidth_factor must be a finite number >= 0.001 "
     "and <= 4 (AllReduce vs RS/AG bus bandwidth), got 5e-324; fix the profile (e.g. 0.95)"),
    ('{"nccl": {"max_channels": 0.2}}',
     "hardware profile field nccl.max_channels must be an integer >= 1 and <= 1024 (NCCL "
     "channels), got 0.2; fix the profile (e.g. 32)"),
    ('{"nics_per_node": 0.4}',
     "hardware profile field nics_per_node must be an integer >= 0 and <= 100000 (0: one NIC "
     "per GPU), got 0.4"),
    ('{"fabric": {"tiers": 1e9}}',
     "hardware profile field fabric.tiers must be an integer >= 1 and <= 6 (switch levels), "
     "got 1000000000.0; fix the profile (e.g. 3)"),
    ('{"fabric": {"switch_radix": 1e300}}',
     "hardware profile field fabric.switch_radix must be an integer >= 2 and <= 4096"),
    ('{"gpu": {"sm_count": Infinity}}',
     "hardware profile field gpu.sm_count must be an integer >= 1 and <= 100000 (SMs), got inf"),
    ('{"gpu": {"sm_count": NaN}}', "hardware profile field gpu.sm_count must be an integer"),
    ('{"gpu": {"sm_count": 0.5}}',
     "hardware profile field gpu.sm_count must be an integer >= 1 and <= 100000 (SMs), got 0.5"),
    ('{"gpu": {"peak_flops": {"f32": 0}}}',
     f"hardware profile field gpu.peak_flops.f32 must be {RATE}, got 0"),
    ('{"gpu": {"peak_flops": {"f16": NaN}}}',
     f"hardware profile field gpu.peak_flops.f16 must be {RATE}, got nan"),
    ('{"nccl": {"collective_latency_s": {"allreduce": Infinity}}}',
     "hardware profile field nccl.collective_latency_s.allreduce must be a finite number >= 0"),
    ('{"gpu": {"sm_count": true}}', "hardware profile field gpu.sm_count must be an integer"),
    ('{"nvls": 1}', "hardware profile field nvls must be true or false, got 1"),
])
def test_json_numbers_that_are_not_numbers(tmp_path, text, message):
    with pytest.raises(HardwareError) as e:
        load_hardware(_json(tmp_path, text))
    assert message in str(e.value)


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", ".NaN"])
def test_yaml_nan_and_inf(tmp_path, value):
    p = tmp_path / "prof.yaml"
    p.write_text(f"gpu:\n  hbm_bandwidth_Bps: {value}\n")
    with pytest.raises(HardwareError, match=r"gpu\.hbm_bandwidth_Bps must be a finite number"):
        load_hardware(str(p))


def test_integral_floats_are_counts_and_zero_means_not_known(tmp_path):
    c = load_hardware(_json(tmp_path, '{"base": "dgx-h100", "gpu": {"sm_count": 132.0}, '
                                      '"nics_per_node": 0, "p2p_bandwidth_Bps": 0, '
                                      '"nvls": false}'))
    assert c.gpu.sm_count == 132 and type(c.gpu.sm_count) is int
    assert c.nics_per_node == 0 and c.p2p_bandwidth_Bps == 0.0 and c.nvls is False


@pytest.mark.parametrize("raw, message", [
    ("{}".encode("utf-16"), "must be UTF-8 text (JSON or YAML), got undecodable bytes"),
    (b"\x7fELF\x02\x01\x01\x00\x00", "must be UTF-8 text (JSON or YAML), got a NUL byte"),
    (b" " * (MAX_PROFILE_BYTES + 1),
     f"must be a JSON or YAML file of at most {MAX_PROFILE_BYTES} bytes, got "
     f"{MAX_PROFILE_BYTES + 1} bytes"),
])
def test_binary_utf16_and_huge_files(tmp_path, raw, message):
    p = tmp_path / "prof.json"
    p.write_bytes(raw)
    with pytest.raises(HardwareError) as e:
        load_hardware(str(p))
    assert message in str(e.value)


@pytest.mark.parametrize("text", ['{"fabric": {"tiers": 1e9}}', '{"gpu": {"sm_count": 0.5}}',
                                  '{"gpu": {"hbm_bandwidth_Bps": NaN}}'])
def test_simulate_exits_2_with_one_message(tmp_path, capsys, text):
    code = main(["simulate", "studies/sgd.py", "--hardware", _json(tmp_path, text)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: hardware profile field ") and err.count("\n") == 1


_WEIRD = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**30, 10**30),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "fast", "", None, True, [], {}]))


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(["sm_count", "max_channels", "tiers", "switch_radix", "efficiency",
                            "hbm_bandwidth_Bps", "latency_s", "nics_per_node",
                            "oversubscription", "hbm_capacity_bytes", "host_overhead_s"]),
       value=_WEIRD)
def test_every_accepted_value_is_finite_and_in_range(key, value):
    """Fuzz: whatever a file holds, profile_value returns a finite number of the right type
    within its rule, or raises HardwareError naming the field."""
    try:
        got = profile_value(f"x.{key}", key, value)
    except HardwareError as e:
        assert f"field x.{key} must be" in str(e)
        return
    assert got == got and abs(got) < 1e31
    if key in ("sm_count", "max_channels", "tiers", "switch_radix", "nics_per_node"):
        assert type(got) is int and (key == "nics_per_node" or got >= 1)
    if key == "efficiency":
        assert 0 < got <= 1


def test_valid_profile_round_trips(tmp_path):
    data = {"base": "dgx-h100", "gpu": {"sm_count": 132, "hbm_bandwidth_Bps": "3.0e12"},
            "fabric": {"tiers": 2, "switch_radix": 64}, "nccl": {"max_channels": 16}}
    c = load_hardware(_json(tmp_path, json.dumps(data)), nodes=4)
    assert (c.gpu.hbm_bandwidth_Bps, c.fabric.tiers, c.nccl.max_channels) == (3e12, 2, 16)
    assert c.fabric.max_nodes == 2 * 32 ** 2


_FIELDS = [("gpu", "sm_count"), ("gpu", "hbm_bandwidth_Bps"), ("gpu", "launch_latency_s"),
           ("nvlink", "bandwidth_Bps"), ("nvlink", "latency_s"), ("nccl", "max_channels"),
           ("nccl", "min_channel_bytes"), ("nccl", "host_overhead_s"),
           ("nccl", "allreduce_bandwidth_factor"), ("fabric", "tiers"),
           ("fabric", "switch_radix"), ("fabric", "oversubscription"), (None, "nics_per_node"),
           (None, "peer_load_bandwidth_Bps"), (None, "fused_fixed_s")]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(_FIELDS), value=st.one_of(
    st.floats(), st.integers(-10, 10**12), st.sampled_from([5e-324, 1e308, "nan", "1e3", 0.5])))
def test_fuzz_simulate_is_finite_or_refused(tmp_path, capsys, field, value):
    """Whatever one profile field holds, simulate exits 0 with finite times for every schedule
    it predicts, or exits 2 with one message."""
    import pandas as pd

    section, key = field
    profile = {"base": "dgx-h100", **({section: {key: value}} if section else {key: value})}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile))
    csv = tmp_path / "out.csv"
    csv.unlink(missing_ok=True)
    code = main(["simulate", "studies/sgd.py", "--hardware", str(path), "--nodes", "2",
                 "--csv", str(csv)])
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err, err
    if code == 0:
        df = pd.read_csv(csv)
        predicted = df[df["time_ms"].notna()]
        assert len(predicted) and predicted["time_ms"].map(lambda t: 0 < t < float("inf")).all()
    else:
        assert err.strip().splitlines()[-1].startswith("error: ")


def test_an_allreduce_factor_near_zero_is_refused(tmp_path):
    # 5e-324 made the ring AllReduce that the ring-fused form prices take forever (inf in
    # simulate's table); measured factors are 0.95 to 1.3
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"base": "dgx-h100",
                                "nccl": {"allreduce_bandwidth_factor": 5e-324}}))
    with pytest.raises(HardwareError, match=r"nccl.allreduce_bandwidth_factor must be a finite "
                       r"number >= 0.001 and <= 4 \(AllReduce vs RS/AG bus bandwidth\), got "
                       r"5e-324; fix the profile \(e.g. 0.95\)"):
        load_hardware(str(path))


@pytest.mark.parametrize("suffix, text, where", [
    (".yaml", "gpu:\n  hbm: 1\n password: hunter2-SECRET\n", "at line 3 column 2"),
    (".yml", "key: [SECRET-TOKEN\n", "at line 2 column 1"),
    (".json", '{"base": "SECRET-TOKEN",\n', "at line 2 column 1"),
])
def test_a_profile_parse_error_quotes_no_content(tmp_path, suffix, text, where):
    """A YAML parse error quoted the offending line: with the profile a link to a file of
    secrets, the secret (issue 40). Now the error says where, not what."""
    path = tmp_path / f"p{suffix}"
    path.write_text(text)
    with pytest.raises(HardwareError) as e:
        load_hardware(str(path))
    assert "SECRET" not in str(e.value) and where in str(e.value)
    assert str(e.value).startswith(f"hardware profile {path} must be valid ")


def test_an_unknown_collective_in_the_latency_table_is_refused(tmp_path):
    """A misspelt collective in collective_latency_s was kept and never read (issue 40)."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"nccl": {"collective_latency_s": {"allreduse": 1e-5}}}))
    with pytest.raises(HardwareError, match=r"hardware profile field "
                       r"nccl.collective_latency_s.allreduse must name one of allreduce, "
                       r"reducescatter, allgather, broadcast, reduce, alltoall, got 'allreduse'"):
        load_hardware(str(path))
