"""GEMM and attention efficiency per shape (cost_model.efficiency, decision 105): the grid's
log-space interpolation, clamping, the presets' cited table, the host's launch time in
simulate-step, and the pinned refusals of a bad table (issue 37's bad input)."""

import dataclasses
import json
import math

import pytest

from cost_model import efficiency as eff
from cost_model import training as ct
from cost_model.hardware import preset
from cost_model.profiles import load_hardware
from simulator.training import Side, simulate_step
from workbench.cli.main import main
from workbench.errors import HardwareError

# a 2 x 2 x 2 grid: efficiency 0.1 at the small corner, 0.8 at the large one
GRID = tuple((eff.entry_key("gemm", "bf16", (m, n, k)),
              0.8 if (m, n, k) == (4096, 4096, 4096) else 0.1)
             for m in (256, 4096) for n in (256, 4096) for k in (256, 4096))


def test_grid_points_are_exact_and_between_them_log_space():
    assert eff.efficiency_at(GRID, "gemm", "bf16", (256, 256, 256)) == pytest.approx(0.1)
    assert eff.efficiency_at(GRID, "gemm", "bf16", (4096, 4096, 4096)) == pytest.approx(0.8)
    # halfway in log2 on every axis: the geometric mean over the corners' logs (1 of 8 is 0.8)
    mid = eff.efficiency_at(GRID, "gemm", "bf16", (1024, 1024, 1024))
    assert mid == pytest.approx(math.exp((7 * math.log(0.1) + math.log(0.8)) / 8))
    # halfway on one axis only, the others at the large corner: between 0.1 and 0.8
    one = eff.efficiency_at(GRID, "gemm", "bf16", (4096, 4096, 1024))
    assert one == pytest.approx(math.sqrt(0.1 * 0.8))


def test_above_the_grid_the_trend_goes_on_below_it_the_time_stays():
    peak = 1e15
    # the trend rises past 0.8: capped at the best the grid measured
    big = eff.seconds(GRID, "gemm", "bf16", (8192, 8192, 8192), 2 * 8192**3, peak)
    assert big == pytest.approx(2 * 8192**3 / (0.8 * peak))
    # one dim above the grid, the others at the small corner: the 0.1 edge's trend (flat
    # there) stays 0.1, never below the edge
    assert eff.efficiency_at(GRID, "gemm", "bf16", (65536, 256, 256)) == pytest.approx(0.1)
    # H100's table: a weight gradient's K of 65536 tokens continues the K trend, above the
    # 4096 edge's efficiency and at most the best measured (0.79)
    table = preset("h100x8").gpu.efficiency_table
    edge = eff.efficiency_at(table, "gemm", "bf16", (768, 2304, 4096))
    long_k = eff.efficiency_at(table, "gemm", "bf16", (768, 2304, 65536))
    assert edge < long_k <= 783.328793548203 / 989 + 1e-12
    small = eff.seconds(GRID, "gemm", "bf16", (64, 64, 64), 2 * 64**3, peak)
    assert small == pytest.approx(2 * 256**3 / (0.1 * peak))  # the 256^3 kernel's time
    assert eff.seconds(GRID, "gemm", "f32", (64, 64, 64), 1, peak) is None  # no f32 entries


def test_h100_preset_carries_xlas_measured_rates():
    gpu = preset("h100x8").gpu
    # data/gemm_h100_xla.csv: 783.33 TFLOP/s at 4096^3, 6.45 at 256^3, on 989 peak
    assert eff.efficiency_at(gpu.efficiency_table, "gemm", "bf16", (4096,) * 3) == \
        pytest.approx(783.328793548203 / 989)
    assert eff.efficiency_at(gpu.efficiency_table, "gemm", "bf16", (256,) * 3) == \
        pytest.approx(6.452775384615 / 989)
    assert preset("h200x4").gpu.efficiency_table == gpu.efficiency_table  # the same GH100
    assert preset("dgx-h100").gpu.efficiency_table == gpu.efficiency_table


def test_kernel_time_follows_the_table_and_a_given_ratio_sets_it_aside():
    cluster = preset("h100x8")
    k = ct._gemm("g", "forward", 4096, 4096, 4096, 2)
    want = 2 * 4096**3 / 783.328793548203e12
    assert ct.kernel_s(cluster, k, "bf16", 0.5) == pytest.approx(
        cluster.gpu.launch_latency_s + want)
    bare = dataclasses.replace(cluster, gpu=dataclasses.replace(cluster.gpu,
                                                                efficiency_table=()))
    util = ct.gemm_utilization(4096, 4096, 132)
    assert ct.kernel_s(bare, k, "bf16", 0.5) == pytest.approx(
        bare.gpu.launch_latency_s + 2 * 4096**3 / (0.5 * util * 989e12))
    # a small GEMM at its own measured rate (6.45 TFLOP/s at 256^3: 5.2 us), not 0.79's
    small = ct._gemm("s", "forward", 256, 256, 256, 2)
    assert ct.kernel_s(cluster, small, "bf16", 0.79) == pytest.approx(
        cluster.gpu.launch_latency_s + 2 * 256**3 / 6.452775384615e12)


def test_attention_entries_price_attention():
    shape = ct.GptShape(1024, 1, 8, seq=1024, batch=8, dtype="bf16")
    attn = next(k for k in ct.forward_kernels(shape) if k.attention)
    assert attn.attention == (8, 8, 1024, 128)
    table = tuple((eff.entry_key("attention", "bf16", (b, h, s, d)), 0.25)
                  for b in (1, 8) for h in (8, 32) for s in (512, 2048) for d in (64, 128))
    c = preset("h100x8")
    c = dataclasses.replace(c, gpu=dataclasses.replace(c.gpu, efficiency_table=table))
    assert ct.kernel_s(c, attn, "bf16", 0.79) == pytest.approx(
        c.gpu.launch_latency_s + attn.work.flops / (0.25 * 989e12))


def test_table_from_rates_refuses_a_rate_above_peak():
    rates = {eff.entry_key("gemm", "bf16", (256, 256, 256)): 2e15}
    with pytest.raises(HardwareError, match=r"the measured rate of gemm:bf16:256x256x256 must "
                       r"be within the GPU's peak_flops\[bf16\] = 9\.89e\+14, got 2e\+15 "
                       r"FLOP/s; calibrate against a --base whose peak_flops is this GPU's"):
        eff.table_from_rates(rates, {"bf16": 989e12})
    got = eff.table_from_rates({eff.entry_key("gemm", "bf16", (256, 256, 256)): 494.5e12},
                               {"bf16": 989e12})
    assert got == {"gemm:bf16:256x256x256": pytest.approx(0.5)}


# ------------------------------------------------------------------- the host's launches

def test_a_small_step_is_host_bound_and_cuda_graphs_remove_it():
    tiny = ct.GptShape(128, 2, 4, seq=64, batch=2, dtype="bf16")
    cluster = preset("h100x8")
    # a host slower than the GPU's 4 us launch gap (eager PyTorch's per-op cost)
    cluster = dataclasses.replace(cluster, gpu=dataclasses.replace(cluster.gpu,
                                                                   host_launch_s=20e-6))
    host = simulate_step(tiny, cluster, 1, Side("torch", ddp=False), 0.79)
    graphs = dataclasses.replace(cluster, gpu=dataclasses.replace(cluster.gpu,
                                                                  host_launch_s=0.0))
    device = simulate_step(tiny, graphs, 1, Side("torch", ddp=False), 0.79)
    kernels = sum(1 for r in host.rows if r.resource == "stream")
    assert host.host_bound and not device.host_bound
    assert host.host_issue_s == pytest.approx(kernels * 20e-6)
    # host-bound: the step is the host's issue time (the last kernel after its issue)
    assert host.step_s >= host.host_issue_s > device.step_s


def test_a_large_step_is_not_host_bound():
    big = ct.GptShape(2048, 4, 16, seq=1024, batch=8, dtype="bf16")
    r = simulate_step(big, preset("h100x8"), 1, Side("torch", ddp=False), 0.79)
    assert not r.host_bound and r.host_issue_s < 0.1 * r.step_s


def test_cudagraphs_flag_and_host_columns(capsys, tmp_path):
    js, slow = tmp_path / "s.json", tmp_path / "slow-host.json"
    slow.write_text(json.dumps({"base": "h100x8", "gpu": {"host_launch_s": 20e-6}}))
    args = ["simulate-step", "--d-model", "128", "--layers", "2", "--heads", "4", "--batch",
            "2", "--seq", "64", "--gpus", "1", "--schedule", "fuse-rs-c-ag", "--dtype", "bf16",
            "--hardware", str(slow)]
    assert main([*args, "--json", str(js)]) == 0
    host = json.loads(js.read_text())["rows"][0]
    assert main([*args, "--cudagraphs", "--json", str(js)]) == 0
    graphs = json.loads(js.read_text())["rows"][0]
    capsys.readouterr()
    assert host["host_bound"] and not graphs["host_bound"]
    assert graphs["host_issue_ms"] == 0 and graphs["step_ms"] < host["step_ms"]


# ------------------------------------------------------------------- bad input (issue 37)

def _profile(tmp_path, table):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"base": "h100x8", "gpu": {"efficiency_table": table}}))
    return str(p)


GRID_1 = {f"gemm:bf16:{m}x256x256": 0.5 for m in (256, 1024)}


@pytest.mark.parametrize("table, message", [
    ({**GRID_1, "gemm:bf16:1024x256x256": 1.3},
     "p.json field gpu.efficiency_table.gemm:bf16:1024x256x256 must be a finite "
     "number > 0 and <= 1 (achieved / peak_flops for its dtype), e.g. 0.75, got a number > 1; "
     "fix the profile"),
    ({**GRID_1, "gemm:bf16:1024x256x256": 0},
     "p.json field gpu.efficiency_table.gemm:bf16:1024x256x256 must be a finite "
     "number > 0 and <= 1 (achieved / peak_flops for its dtype), e.g. 0.75, got a number <= 0"),
    ({**GRID_1, "gemm:bf16:256x1024x256": 0.5},
     "gpu.efficiency_table's gemm:bf16 entries must form a full grid (every combination of "
     "[256, 1024] x [256, 1024] x [256]), got 1 missing, first gemm:bf16:1024x1024x256; "
     "measure the whole grid (workbench calibrate --step-table) or drop that axis value"),
    ({"matmul:bf16:256x256x256": 0.5},
     "gpu.efficiency_table key must be KIND:DTYPE:DIMS with KIND one of gemm, attention, got "
     "'matmul:bf16:256x256x256'"),
    ({"gemm:bf16:256x256": 0.5},
     "gpu.efficiency_table key 'gemm:bf16:256x256' must give 3 positive integer dims "
     "(M x N x K), got '256x256'"),
])
def test_a_bad_efficiency_table_exits_2_naming_the_field(capsys, tmp_path, table, message):
    code = main(["simulate-step", "--hardware", _profile(tmp_path, table), "--gpus", "1",
                 "--d-model", "128", "--layers", "1", "--heads", "4", "--batch", "1"])
    err = capsys.readouterr().err
    assert code == 2 and message in " ".join(err.split()), err


@pytest.mark.parametrize("fabric, message", [
    ({"efficiency": 1.2}, "p.json field fabric.efficiency must be a finite number >= 0.001 and "
                          "<= 1 (a share of the peak), e.g. 0.85, got a number > 1; fix the "
                          "profile"),
    ({"efficiency": 0}, "p.json field fabric.efficiency must be a finite number >= 0.001 and "
                        "<= 1 (a share of the peak), e.g. 0.85, got a number < 0.001; fix the "
                        "profile"),
])
def test_a_fabric_efficiency_outside_0_1_exits_2(capsys, tmp_path, fabric, message):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"base": "h100x8", "fabric": fabric}))
    code = main(["simulate-step", "--hardware", str(p), "--gpus", "1", "--d-model", "128",
                 "--layers", "1", "--heads", "4", "--batch", "1"])
    err = capsys.readouterr().err
    assert code == 2 and message in " ".join(err.split()), err


def test_a_profile_table_replaces_the_presets(tmp_path):
    gpu = load_hardware(_profile(tmp_path, GRID_1)).gpu
    assert dict(gpu.efficiency_table) == GRID_1


def test_host_launch_out_of_range_is_refused(tmp_path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"base": "h100x8", "gpu": {"host_launch_s": 0.5}}))
    with pytest.raises(HardwareError, match=r"gpu.host_launch_s must be a time in \[0, 1 ms\] "
                       r"\(host seconds per kernel launch\), got 0.5; e.g. 5e-6"):
        load_hardware(str(p))


@pytest.mark.gpu
def test_calibrate_step_table_measures_a_grid_on_the_gpu():
    from workbench.runtime.calibrate_step import measure_rates

    rates = measure_rates("bf16", gemm_dims=(256, 1024), attention_grid=((1,), (8,), (512,),
                                                                          (64,)),
                          warmup=1, reps=3)
    table = eff.table_from_rates(rates, dict(preset("h100x8").gpu.peak_flops))
    assert len(table) == 9
    assert table["gemm:bf16:1024x1024x1024"] > table["gemm:bf16:256x256x256"]


# ------------------------------------------------------------------- calibrate --step-table

def _fake_rates(dtype="bf16", **_):
    """What measure_rates returns, without a GPU: a 2 x 2 x 2 GEMM grid at 40 % and 70 % of
    989 TFLOP/s and one attention shape at 30 %."""
    rates = {eff.entry_key("gemm", dtype, (m, n, k)): (0.7 if m == 4096 else 0.4) * 989e12
             for m in (256, 4096) for n in (256, 4096) for k in (256, 4096)}
    rates[eff.entry_key("attention", dtype, (8, 16, 2048, 128))] = 0.3 * 989e12
    return rates


def test_step_table_writes_a_profile_simulate_step_reads(monkeypatch, tmp_path, capsys):
    from workbench.runtime import calibrate_step

    monkeypatch.setattr(calibrate_step, "measure_rates", _fake_rates)
    out = tmp_path / "h100-table.json"
    assert main(["calibrate", "--gpus", "1", "--step-table", "bf16", "--base", "h100x8",
                 "--out", str(out)]) == 0
    assert f"wrote {out} (9 shapes)" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["base"] == "h100x8"
    assert data["gpu"]["efficiency_table"]["gemm:bf16:4096x256x256"] == pytest.approx(0.7)
    gpu = load_hardware(str(out)).gpu
    assert eff.efficiency_at(gpu.efficiency_table, "attention", "bf16", (8, 16, 2048, 128)) \
        == pytest.approx(0.3)
    assert main(["simulate-step", "--hardware", str(out), "--gpus", "1", "--dtype", "bf16",
                 "--d-model", "256", "--layers", "1", "--heads", "4", "--batch", "2",
                 "--schedule", "fuse-rs-c-ag"]) == 0


def test_step_table_refuses_a_non_json_out_before_measuring(monkeypatch, tmp_path, capsys):
    from workbench.runtime import calibrate_step

    def no_gpu(*a, **k):
        raise AssertionError("measured before checking --out")

    monkeypatch.setattr(calibrate_step, "measure_rates", no_gpu)
    code = main(["calibrate", "--gpus", "1", "--step-table", "bf16", "--out",
                 str(tmp_path / "p.txt")])
    assert code == 2
    assert "--out must name a .json profile, got" in capsys.readouterr().err
