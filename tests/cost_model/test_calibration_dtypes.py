"""Calibration of f16/bf16 NCCL, of f16 HBM streams and of the fused kernel's block curve:
synthetic raw data from a known cluster is recovered, the cost model and the simulator use
what the profile gains (and only then), older raw files still fit, bad sections fail with
pinned messages."""

import dataclasses
import json
from pathlib import Path

import pytest
from plan_priced import priced
from test_calibration import _known_split

from cost_model import calibration, collectives
from cost_model.collectives import collective_time, fused_block_fraction
from cost_model.hardware import load_hardware, preset
from simulator import simulate
from workbench.errors import HardwareError
from workbench.interpreter import bind_sizes
from workbench.loader import load

NBYTES = [2**k for k in range(16, 31, 2)]
FUSED = [2**k for k in (22, 26, 28, 30)]
COMMITTED_RAW = Path("records/calibration/h200x2/profile.raw.json")
CURVE = (("4", 0.06), ("8", 0.12), ("16", 0.25), ("33", 0.5), ("66", 0.8), ("132", 0.97),
         ("264", 1.0))
F16_KERNEL = (("f32_write", 2.43e12), ("f16_read", 3.2e12))


def _known():
    """test_calibration's known cluster (unlike the base preset in every field calibration
    fitted before) with the new fields too: f16 NCCL slower than f32 (20 % lower protocol
    efficiencies, a lower AllReduce factor), bf16 10 % slower, both with f32's latencies (the
    model's premise); kernels with f16 arrays writing f32 at 2.43 TB/s (as on 2x H200) and
    reading f16 at 3.2 TB/s (f32 kernels: read 4.1, write 3.3), and a block curve."""
    c = _known_split()

    def slower(factor, ar_factor):
        return dataclasses.replace(
            c.nccl, allreduce_bandwidth_factor=ar_factor,
            protocols=tuple(dataclasses.replace(p, efficiency=p.efficiency * factor)
                            for p in c.nccl.protocols))

    f16, bf16 = slower(0.8, 1.0), slower(0.9, 1.1)
    gpu = dataclasses.replace(c.gpu, hbm_f16_kernel_Bps=F16_KERNEL)
    return dataclasses.replace(c, gpu=gpu, nccl_dtypes=(("f16", f16), ("bf16", bf16)),
                               fused_block_bandwidth=CURVE)


@pytest.fixture(scope="module")
def fitted():
    known = _known()
    raw = calibration.synthetic_raw(known, 2, NBYTES, FUSED)
    return known, raw, calibration.fit(raw, nccl_maxiter=40, nccl_popsize=8)


# ---------------------------------------------------------------- recovery


def test_fit_recovers_per_dtype_nccl_times(fitted):
    known, raw, cal = fitted
    assert sorted(raw["collectives_by_dtype"]) == ["bf16", "f16"]
    assert sorted(cal.profile["nccl_dtypes"]) == ["bf16", "f16"]
    assert sorted(dict(cal.cluster.nccl_dtypes)) == ["bf16", "f16"]
    for dtype in ("f16", "bf16"):
        assert cal.nccl_dtype_worst_error[dtype] < 0.03  # on the bandwidth-bound points
        fitted, true = cal.cluster.for_dtype(dtype), known.for_dtype(dtype)
        assert fitted.nccl.host_overhead_s == cal.cluster.nccl.host_overhead_s  # f32's
        for n in (2**16, 2**24, 2**30):  # small sizes: as good as the f32 fit's latencies
            for kind in ("allreduce", "reducescatter"):
                assert collective_time(kind, n, 2, fitted) == pytest.approx(
                    collective_time(kind, n, 2, true), rel=0.08)
    # f16 is 25 % slower than f32 at 1 GiB in the known cluster, and so in the fitted one
    f32_t = collective_time("allreduce", 2**30, 2, cal.cluster)
    assert collective_time("allreduce", 2**30, 2, cal.cluster.for_dtype("f16")) > 1.2 * f32_t
    assert "NCCL f16 (nccl_dtypes.f16: bandwidth constants fitted on the" in \
        calibration.fit_report(cal)


def test_fit_selects_and_recovers_the_mixed_kernel_rates(fitted):
    _, raw, cal = fitted
    assert len(raw["device"]["streams_f16"]) == len(calibration.F16_STREAM_SHAPES)
    rates = dict(cal.cluster.gpu.hbm_f16_kernel_Bps)
    assert sorted(rates) == ["f16_read", "f32_write"]  # only the classes that differ
    for c, v in F16_KERNEL:
        assert rates[c] == pytest.approx(v, rel=2e-3)
    assert max(abs(e) for _, e in cal.hbm_f16.errors) < 2e-3
    assert max(abs(e) for _, e in cal.hbm_f16.errors_f32_rates) > 0.1  # what the rates fix
    assert "gpu.hbm_f16_kernel_Bps: f32_write 2.430 TB/s" in calibration.fit_report(cal)


def test_fit_recovers_the_block_curve(fitted):
    _, raw, cal = fitted
    assert [r["blocks"] for r in raw["fused_blocks"]] == [4, 8, 16, 33, 66, 132, 264]
    got = {int(b): f for b, f in cal.cluster.fused_block_bandwidth}
    for b, f in CURVE:
        assert got[int(b)] == pytest.approx(f, rel=2e-3)
    assert max(abs(e) for _, _, e in cal.fused_block_errors) < 5e-3
    assert "fused AllReduce on fewer blocks worst relative error" in calibration.fit_report(cal)


def test_written_profile_with_new_fields_loads_as_fitted(fitted, tmp_path):
    _, _, cal = fitted
    calibration.write(cal, tmp_path / "profile.json")
    loaded = load_hardware(str(tmp_path / "profile.json"))
    assert dataclasses.asdict(loaded) == dataclasses.asdict(cal.cluster)
    data = json.loads((tmp_path / "profile.json").read_text())
    assert set(data["nccl_dtypes"]["f16"]) == {"protocols", "allreduce_bandwidth_factor",
                                               "host_overhead_s", "collective_latency_s"}
    assert data["fused_block_bandwidth"]["264"] == 1.0


def test_f16_streams_at_f32_rates_write_nothing():
    # the known cluster without f16 rates: its mixed rows stream at the f32 rates
    known = _known()
    gpu = dataclasses.replace(known.gpu, hbm_f16_kernel_Bps=())
    known = dataclasses.replace(known, gpu=gpu, nccl_dtypes=(), fused_block_bandwidth=())
    raw = calibration.synthetic_raw(known, 1, [], [])
    cal = calibration.fit(raw)
    assert cal.hbm_f16.rates == {} and cal.cluster.gpu.hbm_f16_kernel_Bps == ()
    assert max(abs(e) for _, e in cal.hbm_f16.errors) < 1e-3
    assert "hbm_f16_kernel_Bps" not in cal.profile["gpu"]
    assert "nothing written: the f32 rates predict every mixed kernel within 5%" in \
        calibration.fit_report(cal)


def test_a_class_that_buys_little_is_not_selected():
    # f16 reads 3 % slower than f32's: within the tolerance, nothing is written
    known = _known()
    gpu = dataclasses.replace(known.gpu, hbm_f16_kernel_Bps=(("f16_read", 4.1e12 / 1.03),))
    raw = calibration.synthetic_raw(dataclasses.replace(known, gpu=gpu), 1, [], [])
    assert calibration.fit_hbm_f16_kernels(raw["device"]["streams_f16"], 4.1e12, 3.3e12) == {}


# ---------------------------------------------------------------- older raw files


def test_committed_raw_without_new_sections_fits_as_before():
    raw = calibration.read_raw(COMMITTED_RAW, 2)
    assert not {"collectives_by_dtype", "fused_blocks"} & set(raw)
    assert "streams_f16" not in raw["device"]
    cal = calibration.fit(raw, nccl_maxiter=5, nccl_popsize=5)
    assert not {"nccl_dtypes", "fused_block_bandwidth"} & set(cal.profile)
    assert "hbm_f16_kernel_Bps" not in cal.profile["gpu"]
    assert cal.hbm_f16 is None and cal.nccl_dtype_errors == {} and not cal.fused_block_errors
    # the fields an older fit wrote are fitted the same way (the NCCL constants need the full
    # differential evolution: not compared here)
    committed = json.loads(COMMITTED_RAW.with_name("profile.json").read_text())
    for key in ("peer_load_bandwidth_Bps", "peer_store_bandwidth_Bps", "fused_fixed_s"):
        assert cal.profile[key] == committed[key]
    assert cal.profile["gpu"] == committed["gpu"]


def test_synthetic_raw_without_new_sections_fits(fitted, tmp_path):
    _, raw, _ = fitted
    old = json.loads(json.dumps(raw))
    for key in ("collectives_by_dtype", "fused_blocks"):
        del old[key]
    del old["device"]["streams_f16"]
    p = tmp_path / "old.raw.json"
    p.write_text(json.dumps(old))
    cal = calibration.fit(calibration.read_raw(p, 2), nccl_maxiter=5, nccl_popsize=5)
    assert cal.cluster.nccl_dtypes == () and cal.cluster.fused_block_bandwidth == ()
    assert cal.cluster.gpu.hbm_f16_kernel_Bps == ()


# ---------------------------------------------------------------- the cost model uses them


def _adam_mixed(N=2**24):
    program = load("studies/adam.py:mixed").program
    return program, bind_sizes(program, {"N": N, "P": 2})


def test_f16_collective_uses_its_dtype_constants_in_model_and_simulator():
    known = _known()
    without = dataclasses.replace(known, nccl_dtypes=())
    program, bound = _adam_mixed()
    with_cost = priced(program, known, bound)
    without_cost = priced(program, without, bound)
    ar = program.stmts[0]
    assert type(ar.op).__name__ == "AllReduce"
    nbytes = 2 * 2**24  # f16 gradients
    assert with_cost.stmts[0].time_s == pytest.approx(
        collective_time("allreduce", nbytes, 2, known.for_dtype("f16")))
    assert with_cost.stmts[0].time_s > 1.05 * without_cost.stmts[0].time_s
    assert with_cost.stmts[0].host_s == known.for_dtype("f16").nccl.host_overhead_s
    # the simulator prices the same collective the same way
    sim_with = simulate(program, known, bound).time_s
    sim_without = simulate(program, without, bound).time_s
    assert sim_with - sim_without == pytest.approx(with_cost.time_s - without_cost.time_s,
                                                   rel=0.02)
    # an f32 program does not see the f16 constants
    f32 = load("studies/adam.py").program
    b32 = bind_sizes(f32, {"N": 2**24, "P": 2})
    assert priced(f32, known, b32).time_s == priced(f32, without, b32).time_s


def test_f16_hbm_rates_price_mixed_kernels_only():
    known = _known()
    flat = dataclasses.replace(known, gpu=dataclasses.replace(known.gpu, hbm_f16_kernel_Bps=()))
    program, bound = _adam_mixed()
    # m1 = b1 m + (1 - b1) g: reads f32 m (2^26 B) and f16 g (2^25 B), writes f32 m (2^26 B)
    m1 = next(i for i, s in enumerate(program.stmts) if s.name == "m1")
    t_known = priced(program, known, bound).by_statement()[program.stmts[m1].name][0]
    t_flat = priced(program, flat, bound).by_statement()[program.stmts[m1].name][0]
    extra = 2**26 * (1 / 2.43e12 - 1 / 3.3e12) + 2**25 * (1 / 3.2e12 - 1 / 4.1e12)
    assert t_known - t_flat == pytest.approx(extra, rel=1e-6)
    f32 = load("studies/adam.py").program
    b32 = bind_sizes(f32, {"N": 2**24, "P": 2})
    assert priced(f32, known, b32).time_s == priced(f32, flat, b32).time_s
    assert simulate(program, known, bound).time_s > simulate(program, flat, bound).time_s


def test_fused_collective_bandwidth_follows_the_curve():
    c = _known()
    full = (c.peer_load_bandwidth_Bps, c.peer_store_bandwidth_Bps)
    assert collectives.fused_collective_bandwidth(c, 264) == full
    assert collectives.fused_collective_bandwidth(c, 1000) == full
    load_bw, store_bw = collectives.fused_collective_bandwidth(c, 33)
    assert load_bw == pytest.approx(0.5 * full[0]) and store_bw == pytest.approx(0.5 * full[1])
    assert fused_block_fraction(c, 49.5) == pytest.approx(0.65)  # halfway from 33 to 66
    assert fused_block_fraction(c, 2) == pytest.approx(0.03)  # below 4: in proportion
    assert collectives.fused_blocks_on(c, 32) == 64  # the full grid's 2 blocks per SM
    # no curve (the presets): the same bandwidth at any grid
    p = preset("h200x4")
    assert collectives.fused_collective_bandwidth(p, 8) == (p.peer_load_bandwidth_Bps,
                                                            p.peer_store_bandwidth_Bps)


def test_overlapped_fused_collective_time_shares_the_sms_with_a_matmul_with_a_curve():
    from codegen.lower import lower
    from cost_model.plan_cost import PlanContext, step_cost, step_fixed_s

    f = load("studies/model_parallel.py")
    program = f.schedules["overlap-mm-fuse-ar-c"].apply()
    curved = _known()
    flat = dataclasses.replace(curved, fused_block_bandwidth=())
    (step,) = lower(program, 2).steps
    c = step.chunks
    # the closed form: the MatMul at its own speed (a launch per chunk), then the
    # collective's chunks (a launch each, on a chunk's rows) in its gaps on the runtime's
    # grid, a quarter of the full one (codegen.plan.overlap_grid: 66 of 264 blocks on an
    # H200), one kernel's fixed cost per chunk
    from codegen.plan import overlap_grid

    blocks = overlap_grid(2 * curved.gpu.sm_count)
    for sizes in ({"T": 8192, "H": 12288}, {"T": 65536, "H": 4096}):
        bound = bind_sizes(program, {**sizes, "P": 2})
        pc = PlanContext.of(lower(program, 2), curved, bound)
        launch = curved.gpu.launch_latency_s
        tp = step_cost(pc, step.producer).time_s
        chunk = step_cost(pc, step.consumer).time_s  # one chunk's kernel on every SM
        lat = step_fixed_s(pc, step.consumer)
        beside = c * ((chunk - lat) / fused_block_fraction(curved, blocks) + lat)
        model = priced(program, curved, bound).time_s
        assert model == pytest.approx(tp + (c - 1) * launch + beside, rel=1e-9)
        # without a curve (the presets) the overlap stays a pipeline: the slower stage plus
        # one chunk of the other, each stage paying its fixed cost once per chunk
        tp_c, tc_c = tp + (c - 1) * launch, c * chunk
        assert priced(program, flat, bound).time_s == pytest.approx(
            max(tp_c, tc_c) + min(tp_c, tc_c) / c, rel=1e-9)
        # the simulator runs the same schedule: one kernel at a time, within 2 %
        assert simulate(program, curved, bound).time_s == pytest.approx(model, rel=0.02)
    # the fused kernel alone (no overlap) runs on every SM: the curve changes nothing
    alone = f.schedules["fuse-ar-c"].apply()
    fb = bind_sizes(alone, {"T": 65536, "H": 4096, "P": 2})
    assert priced(alone, curved, fb).time_s == priced(alone, flat, fb).time_s


# ---------------------------------------------------------------- bad input, pinned


def _raw_file(tmp_path, raw):
    p = tmp_path / "p.raw.json"
    p.write_text(json.dumps(raw))
    return p


@pytest.fixture
def raw():
    return calibration.synthetic_raw(_known(), 2, NBYTES[:3], FUSED[:2])


def test_collectives_by_dtype_unknown_dtype(tmp_path, raw):
    raw["collectives_by_dtype"]["fp16"] = raw["collectives_by_dtype"].pop("f16")
    with pytest.raises(HardwareError, match=r"field collectives_by_dtype\.fp16 must be one of the "
                       r"known fields \(f16, bf16\), got an unknown field"):
        calibration.read_raw(_raw_file(tmp_path, raw), 2)


def test_collectives_by_dtype_bad_row(tmp_path, raw):
    raw["collectives_by_dtype"]["f16"][1]["reducescatter_ms"] = "slow"
    with pytest.raises(HardwareError, match=r"field collectives_by_dtype\.f16\[1\]\."
                       r"reducescatter_ms must be a positive number \(at most 1e\+15\), "
                       r"got a string"):
        calibration.read_raw(_raw_file(tmp_path, raw), 2)


def test_collectives_by_dtype_empty(tmp_path, raw):
    raw["collectives_by_dtype"]["bf16"] = []
    with pytest.raises(HardwareError, match=r"field collectives_by_dtype\.bf16 must be a non-empty "
                       r"list of collective rows, got an empty list"):
        calibration.read_raw(_raw_file(tmp_path, raw), 2)


def test_streams_f16_bad_row(tmp_path, raw):
    raw["device"]["streams_f16"][0]["f16_inputs"] = 1.5
    with pytest.raises(HardwareError, match=r"field device\.streams_f16\[0\]\.f16_inputs "
                       r"must be an integer >= 0, got a number that is not whole; "
                       r"run"):
        calibration.read_raw(_raw_file(tmp_path, raw), 2)


def test_streams_f16_without_f16(tmp_path, raw):
    raw["device"]["streams_f16"][0].update(f16_inputs=0, f16_outputs=0, f32_inputs=1)
    with pytest.raises(HardwareError, match=r"field device\.streams_f16\[0\] must be a row with "
                       r"at least one of f16_inputs or f16_outputs >= 1, got a mapping that has "
                       r"none of them"):
        calibration.read_raw(_raw_file(tmp_path, raw), 2)


def test_streams_f16_without_f32_streams(tmp_path, raw):
    del raw["device"]["streams"]
    with pytest.raises(HardwareError, match=r"field device\.streams must be the f32 k-stream rows "
                       r"that device\.streams_f16 is fitted against, got nothing"):
        calibration.read_raw(_raw_file(tmp_path, raw), 2)


def test_streams_f16_not_a_list(tmp_path, raw):
    raw["device"]["streams_f16"] = {"f16_inputs": 1}
    with pytest.raises(HardwareError, match=r"field device\.streams_f16 must be a list of mixed "
                       r"stream rows, got a mapping"):
        calibration.read_raw(_raw_file(tmp_path, raw), 2)


def test_streams_f16_of_one_shape_frees_at_most_one_class():
    rows = [dict(f32_inputs=0, f16_inputs=1, f32_outputs=1, f16_outputs=0, numel=2**26,
                 ms=0.2)] * 3
    rates = calibration.fit_hbm_f16_kernels(rows, 4e12, 3e12)
    assert len(rates) == 1  # one shape: one more rate cannot be told apart


def test_fused_blocks_bad_row(tmp_path, raw):
    raw["fused_blocks"][2]["blocks"] = 0
    with pytest.raises(HardwareError, match=r"field fused_blocks\[2\]\.blocks must be a positive "
                       r"integer, got a number < 1"):
        calibration.read_raw(_raw_file(tmp_path, raw), 2)


def test_fused_blocks_not_a_list(tmp_path, raw):
    raw["fused_blocks"] = "264"
    with pytest.raises(HardwareError, match=r"field fused_blocks must be a list of block sweep "
                       r"rows, got a string"):
        calibration.read_raw(_raw_file(tmp_path, raw), 2)


def test_fused_blocks_faster_than_the_fixed_cost():
    with pytest.raises(HardwareError, match=r"fused_blocks rows must take longer than the "
                       r"fused kernel's fixed cost \(20.00 us\) to give a bandwidth, got "
                       r"5.00 us at nbytes 268435456, blocks 8"):
        calibration.fit_fused_blocks([(2**28, 8, 5e-6), (2**28, 264, 1e-3)], 2,
                                     dataclasses.replace(_known(), fused_fixed_s=14e-6))


def _profile(tmp_path, data):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"base": "h200x4", **data}))
    return str(p)


def test_profile_nccl_dtypes_unknown_dtype(tmp_path):
    with pytest.raises(HardwareError, match=r"hardware profile field nccl_dtypes must name one "
                       r"of f16, bf16 \(f32 collectives use nccl\), got 'fp16'"):
        load_hardware(_profile(tmp_path, {"nccl_dtypes": {"fp16": {"host_overhead_s": 1e-5}}}))


def test_profile_nccl_dtypes_bad_field(tmp_path):
    with pytest.raises(HardwareError, match=r"field nccl_dtypes\.f16\.host_overhead_s must be "
                       r"a finite number >= 0 and <= 3600 \(seconds\), e\.g\. 2e-6 for 2 us, "
                       r"got a number < 0"):
        load_hardware(_profile(tmp_path, {"nccl_dtypes": {"f16": {"host_overhead_s": -1}}}))


def test_profile_nccl_dtypes_start_from_the_profiles_nccl(tmp_path):
    c = load_hardware(_profile(tmp_path, {"nccl_dtypes": {"f16": {"host_overhead_s": 3e-5}},
                                          "nccl": {"allreduce_bandwidth_factor": 1.3}}))
    f16 = c.for_dtype("f16").nccl
    assert f16.host_overhead_s == 3e-5 and f16.allreduce_bandwidth_factor == 1.3
    assert c.for_dtype("bf16") is c and c.for_dtype("f32") is c


def test_profile_block_curve_bad_key(tmp_path):
    with pytest.raises(HardwareError, match=r"hardware profile field fused_block_bandwidth must "
                       r"map block counts \(positive integers\) to positive fractions of the "
                       r"full grid's bandwidth, got 'many': 0.5"):
        load_hardware(_profile(tmp_path, {"fused_block_bandwidth": {"many": 0.5}}))


def test_profile_block_curve_zero_fraction(tmp_path):
    with pytest.raises(HardwareError, match=r"fused_block_bandwidth.8 must be a finite number "
                       r">= 0.001 and <= 1 \(a share of the peak\), e\.g\. 0\.85, got a "
                       r"number < 0\.001"):
        load_hardware(_profile(tmp_path, {"fused_block_bandwidth": {"8": 0}}))




def test_profile_f16_kernel_rates_need_the_split(tmp_path):
    with pytest.raises(HardwareError, match=r"gpu.hbm_f16_kernel_Bps must come with "
                       r"gpu.hbm_read_bandwidth_Bps and gpu.hbm_write_bandwidth_Bps \(it "
                       r"refines that split\), got no read/write split"):
        load_hardware(_profile(tmp_path, {"gpu": {"hbm_f16_kernel_Bps": {"f32_write": 3e12}}}))


def test_profile_f16_kernel_rates_bad_class(tmp_path):
    with pytest.raises(HardwareError, match=r"gpu.hbm_f16_kernel_Bps must map byte classes "
                       r"\(f32_read, f16_read, f32_write, f16_write\) to positive rates, got "
                       r"'f16_writes': 3000000000000.0"):
        load_hardware(_profile(tmp_path, {"gpu": {"hbm_read_bandwidth_Bps": 4e12,
                                                  "hbm_write_bandwidth_Bps": 3e12,
                                                  "hbm_f16_kernel_Bps": {"f16_writes": 3e12}}}))


# ---------------------------------------------------------------- per-dtype NCCL bandwidth


def test_fit_nccl_bandwidth_from_the_f32_constants_recovers_f16():
    from cost_model.calibration.nccl import bandwidth_bound, fit_nccl_bandwidth, table_errors

    known = _known()
    raw = calibration.synthetic_raw(known, 2, [2**k for k in range(16, 31)], [])
    table = calibration.nccl_table(raw, "f16")
    points = bandwidth_bound(table, 2, known)
    assert 0 < len(points) < len(table)  # the small sizes are latency bound
    start = max(abs(e) for _, errs in table_errors(points, 2, known) for e in errs.values())
    fit = fit_nccl_bandwidth(table, 2, known)  # from the exact f32 constants
    assert start > 0.15 and fit.worst_error < 0.005
    assert fit.tuning.protocols[-1].efficiency == pytest.approx(
        known.for_dtype("f16").nccl.protocols[-1].efficiency, rel=0.01)
    assert fit.tuning.host_overhead_s == known.nccl.host_overhead_s


def test_fit_nccl_bandwidth_needs_bandwidth_bound_points():
    from cost_model.calibration.nccl import fit_nccl_bandwidth

    table = [(2**16, {"allreduce": 50e-6}), (2**17, {"allreduce": 52e-6})]
    with pytest.raises(HardwareError, match=r"a measured NCCL table must hold bandwidth-bound "
                       r"points \(at least 2x the model's 1-byte time\) to fit bandwidth "
                       r"constants, got sizes \[65536, 131072\]"):
        fit_nccl_bandwidth(table, 2, preset("h200x4"))


RUN2_RAW = Path("records/calibration/h200x2-run2/profile.raw.json")


@pytest.mark.skipif(not RUN2_RAW.is_file(), reason="the 2x H200 run 2 raw file is not here")
def test_the_2x_h200_run_2_raw_file_fits_with_every_new_section():
    # measured by this calibration on 2x H200: the data these fits were shaped by
    cal = calibration.fit(calibration.read_raw(RUN2_RAW, 2), nccl_maxiter=5, nccl_popsize=5)
    assert dict(cal.cluster.gpu.hbm_f16_kernel_Bps) == {"f32_write": pytest.approx(2.427e12,
                                                                                  rel=1e-3)}
    assert max(abs(e) for _, e in cal.hbm_f16.errors) < 0.08  # 0.30 at the f32 rates
    curve = dict(cal.cluster.fused_block_bandwidth)
    assert curve["264"] == 1.0 and curve["16"] == pytest.approx(0.619, abs=0.002)
    assert sorted(dict(cal.cluster.nccl_dtypes)) == ["bf16", "f16"]
    for dtype in ("f16", "bf16"):
        # on the bandwidth-bound points; 5.2 % and 6.6 % after the full f32 fit, more after
        # this test's short one (the latencies kept are the f32 fit's)
        assert cal.nccl_dtype_worst_error[dtype] < 0.12
