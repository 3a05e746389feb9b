"""Hardware profiles whose numbers are not numbers (issue 26): NaN, inf, "nan", YAML .nan,
efficiencies of 1e9, fractional counts, unbounded fabric tiers, zero FLOP/s, subnormal
bandwidths, binary and huge files. Each is refused by the public loader with one message
naming the field, what it must be and the fix; `workbench simulate` exits 2 with it."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_model.hardware import load_hardware
from cost_model.validate import MAX_PROFILE_BYTES
from workbench.cli.main import main
from workbench.errors import HardwareError

RATE = "a finite number >= 1 and <= 1e+18 (per second), e.g. 3.3e12 for 3.3 TB/s"
TIME = "a finite number >= 0 and <= 3600 (seconds), e.g. 2e-6 for 2 us"
SHARE = "a finite number >= 0.001 and <= 1 (a share of the peak), e.g. 0.85"
SMS = "an integer >= 1 and <= 100000 (SMs), e.g. 132"


def _json(tmp_path, text: str) -> str:
    p = tmp_path / "prof.json"
    p.write_text(text)
    return str(p)


# The schema names the field, what it must be (with an example) and what it got by kind and,
# for a number past a bound, which bound: never the value (a profile may be a link to a secret).
@pytest.mark.parametrize("text, message", [
    ('{"gpu": {"hbm_bandwidth_Bps": NaN}}',
     f"field gpu.hbm_bandwidth_Bps must be {RATE}, got a non-finite number; fix the profile"),
    ('{"gpu": {"hbm_bandwidth_Bps": "nan"}}',
     f"field gpu.hbm_bandwidth_Bps must be {RATE}, got a non-finite number"),
    ('{"nvlink": {"bandwidth_Bps": Infinity}}',
     f"field nvlink.bandwidth_Bps must be {RATE}, got a non-finite number"),
    ('{"nic": {"bandwidth_Bps": 5e-324}}',
     f"field nic.bandwidth_Bps must be {RATE}, got a number < 1"),
    ('{"nvlink": {"latency_s": -Infinity}}',
     f"field nvlink.latency_s must be {TIME}, got a non-finite number"),
    ('{"nccl": {"protocols": {"Simple": {"efficiency": 1e9}}}}',
     f"field nccl.protocols.Simple.efficiency must be {SHARE}, got a number > 1; fix the "
     "profile"),
    ('{"nccl": {"allreduce_bandwidth_factor": 5e-324}}',
     "field nccl.allreduce_bandwidth_factor must be a finite number >= 0.001 and <= 4 "
     "(AllReduce vs RS/AG bus bandwidth), e.g. 0.95, got a number < 0.001; fix the profile"),
    ('{"nccl": {"max_channels": 0.2}}',
     "field nccl.max_channels must be an integer >= 1 and <= 1024 (NCCL channels), e.g. 32, "
     "got a number that is not whole; fix the profile"),
    ('{"nics_per_node": 0.4}',
     "field nics_per_node must be an integer >= 0 and <= 100000 (0: one NIC per GPU), e.g. 8, "
     "got a number that is not whole"),
    ('{"fabric": {"tiers": 1e9}}',
     "field fabric.tiers must be an integer >= 1 and <= 6 (switch levels), e.g. 3, got a "
     "number > 6; fix the profile"),
    ('{"fabric": {"switch_radix": 1e300}}',
     "field fabric.switch_radix must be an integer >= 2 and <= 4096 (ports per switch), e.g. "
     "64, got a number > 4096"),
    ('{"gpu": {"sm_count": Infinity}}', f"field gpu.sm_count must be {SMS}, got a non-finite "
                                        "number"),
    ('{"gpu": {"sm_count": NaN}}', f"field gpu.sm_count must be {SMS}, got a non-finite number"),
    ('{"gpu": {"sm_count": 0.5}}', f"field gpu.sm_count must be {SMS}, got a number that is not "
                                   "whole"),
    ('{"gpu": {"peak_flops": {"f32": 0}}}',
     f"field gpu.peak_flops.f32 must be {RATE}, got a number < 1"),
    ('{"gpu": {"peak_flops": {"f16": NaN}}}',
     f"field gpu.peak_flops.f16 must be {RATE}, got a non-finite number"),
    ('{"nccl": {"collective_latency_s": {"allreduce": Infinity}}}',
     f"field nccl.collective_latency_s.allreduce must be {TIME}, got a non-finite number"),
    ('{"gpu": {"sm_count": true}}', f"field gpu.sm_count must be {SMS}, got a boolean"),
    ('{"nvls": 1}', "field nvls must be true or false (JSON/YAML booleans), got an integer"),
])
def test_json_numbers_that_are_not_numbers(tmp_path, text, message):
    path = _json(tmp_path, text)
    with pytest.raises(HardwareError) as e:
        load_hardware(path)
    assert f"hardware profile {path} {message}" in str(e.value)


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
    path = _json(tmp_path, text)
    code = main(["simulate", "studies/sgd.py", "--hardware", path])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"error: hardware profile {path} field ") and err.count("\n") == 1


_WEIRD = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**30, 10**30),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "fast", "", None, True, [], {}]))


_COUNTS = ("sm_count", "max_channels", "tiers", "switch_radix", "nics_per_node")
_WHERE = {"sm_count": "gpu", "max_channels": "nccl", "tiers": "fabric", "switch_radix": "fabric",
          "efficiency": "fabric", "hbm_bandwidth_Bps": "gpu", "latency_s": "nvlink",
          "nics_per_node": None, "oversubscription": "fabric", "hbm_capacity_bytes": "gpu",
          "host_overhead_s": "nccl"}


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(_WHERE)), value=_WEIRD)
def test_every_accepted_value_is_finite_and_in_range(tmp_path, key, value):
    """Fuzz: whatever a file holds, the loader takes a finite number of the field's type
    within its rule, or raises HardwareError naming the field."""
    section = _WHERE[key]
    profile = {section: {key: value}} if section else {key: value}
    try:
        text = json.dumps(profile)
    except ValueError:
        return
    try:
        cluster = load_hardware(_json(tmp_path, text))
    except HardwareError as e:
        assert f"field {section + '.' if section else ''}{key}" in str(e), str(e)
        return
    got = getattr(getattr(cluster, section) if section else cluster, key)
    assert got == got and abs(got) < 1e31
    if key in _COUNTS:
        assert type(got) is int and (key == "nics_per_node" or got >= 1)
    else:
        assert type(got) is float
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
                       r"number >= 0.001 and <= 4 \(AllReduce vs RS/AG bus bandwidth\), e\.g\. "
                       r"0\.95, got a number < 0\.001; fix the profile"):
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
    with pytest.raises(HardwareError, match=r"field nccl\.collective_latency_s\.allreduse must "
                       r"be named one of allreduce, reducescatter, allgather, broadcast, reduce, "
                       r"alltoall, got another name; fix the profile"):
        load_hardware(str(path))
