"""Checks against the interpreter (sampled and full) and the result table; CPU only."""

import numpy as np
import pytest
from conftest import load_study

from workbench import interpreter
from workbench.cli.results_table import NVLINK_BPS, table
from workbench.runtime import checks
from workbench.runtime.worker import comm_bytes


def test_sampled_reference_equals_the_full_one(monkeypatch):
    pf = load_study("studies/adam.py")
    sizes = {"N": 2**12, "P": 2}
    inputs = interpreter.random_inputs(pf.program, sizes, 3)
    full = checks.reference(pf.program, inputs, sizes, 2)
    assert full.indices is None
    monkeypatch.setattr(checks, "FULL_CHECK_MAX_NUMEL", 2**10)
    monkeypatch.setattr(checks, "SAMPLE_NUMEL", 2**9)
    sampled = checks.reference(pf.program, inputs, sizes, 2)
    idx = sampled.indices
    assert idx is not None and len(idx) == 2**9 and sampled.sizes["N"] == 2**9
    for name in ("w1", "m1", "v1"):
        np.testing.assert_array_equal(sampled.values[name], full.values[name][idx])
        np.testing.assert_array_equal(sampled.bounds[name], full.bounds[name][idx])


def _gpu_like_outputs(program, sched, values, rank, P):
    return {vs.name: checks.rank_part(values[vo.name], vs.type, rank, P).astype(np.float32)
            for vs, vo in zip(sched.outputs, program.outputs)}


@pytest.mark.parametrize("sampled", [False, True])
def test_compare_passes_exact_and_locates_a_planted_error(sampled, monkeypatch):
    pf = load_study("studies/adam.py")
    sched = pf.schedules["fuse-rs-c-ag"].apply()  # m and v stay Sliced: outputs differ in layout
    sizes = {"N": 2**12, "P": 2}
    inputs = interpreter.random_inputs(pf.program, sizes, 5)
    full = checks.reference(pf.program, inputs, sizes, 2)
    if sampled:
        monkeypatch.setattr(checks, "FULL_CHECK_MAX_NUMEL", 2**10)
        monkeypatch.setattr(checks, "SAMPLE_NUMEL", 2**11)
    ref = checks.reference(pf.program, inputs, sizes, 2)
    idx = ref.indices
    for rank in range(2):
        got = _gpu_like_outputs(pf.program, sched, full.values, rank, 2)
        ok = checks.compare(got, sched, pf.program, ref, rank, 2, 2**12)
        assert ok.ok and ok.max_error <= ok.tolerance
    got = _gpu_like_outputs(pf.program, sched, full.values, 1, 2)
    bad_at = int(idx[-1]) if sampled else 2**12 - 1  # an element rank 1's slice holds
    got["m1_s"] = got["m1_s"].copy()
    got["m1_s"][bad_at - 2**11] = np.float32(np.nan)
    bad = checks.compare(got, sched, pf.program, ref, 1, 2, 2**12)
    assert not bad.ok and bad.output == "m1_s"
    assert f"index {bad_at}" in bad.where and "got nan" in bad.where
    assert bad.status().startswith("MISMATCH m1_s")


def test_table_speedup_and_floor():
    pf = load_study("studies/adam.py")
    sizes = {"N": 2**28, "P": 2}
    cb = comm_bytes(pf.program, sizes, 2)
    assert cb == 4 * 2**28  # 2(P-1)/P x 4N bytes
    base = {"spec": "adam", "program": "adam", "sizes": sizes, "P": 2, "comm_bytes": cb,
            "p10_ms": 1.0, "p90_ms": 1.2, "min_ms": 1.0, "reps": 30, "check": "ok"}
    recs = [dict(base, schedule="unscheduled", kind="workbench", median_ms=6.0),
            dict(base, schedule="fuse-rs-c-ag", kind="workbench", median_ms=3.0)]
    df = table(recs)
    row = df[df.schedule == "fuse-rs-c-ag"].iloc[0]
    assert row.speedup == pytest.approx(2.0)
    floor_ms = cb / NVLINK_BPS * 1e3
    assert row.floor_ms == pytest.approx(floor_ms) and 2.2 < floor_ms < 2.3
    assert row.x_floor == pytest.approx(3.0 / floor_ms)


def test_rank_part_matches_the_interpreter():
    from workbench.runtime.gpu import rank_part as _rank_part

    pf = load_study("studies/adam.py")
    sched = pf.schedules["fuse-rs-c-ag"].apply()
    sizes = {"N": 64, "P": 4}
    inputs = interpreter.random_inputs(pf.program, sizes, 1)
    bound = interpreter.bind_sizes(sched, sizes)
    for v in sched.inputs:
        parts = interpreter.to_ranks(inputs[v.name], v.type, bound)
        for r in range(4):
            np.testing.assert_array_equal(_rank_part(inputs[v.name], v.type, r, 4), parts[r])


def test_matmul_outputs_are_bounded_by_their_sums_not_their_results():
    """A MatMul's bound grows with |A| |B| (its K-long sum), not with the result, so cuBLAS's
    other summation order passes even where the sum nearly cancels; a wrong row fails (the
    errors a chunking or indexing bug makes)."""
    pf = load_study("studies/model_parallel.py")
    sizes = {"T": 16, "H": 32, "P": 2}
    inputs = interpreter.random_inputs(pf.program, sizes, 3)
    ref = checks.reference(pf.program, inputs, sizes, 2)
    want = ref.values["out"]
    exact = checks.compare({"out": want.astype(np.float16)}, pf.program, pf.program, ref, 0, 2,
                           None)
    assert exact.ok and exact.status() == "ok"
    # the GEMM as the in-dtype interpreter runs it: f32 sums, every statement rounded to f16
    got = interpreter.run(pf.program, inputs, sizes)["out"]
    assert checks.compare({"out": got}, pf.program, pf.program, ref, 0, 2, None).ok
    swapped = want.astype(np.float16)
    swapped[[3, 4]] = swapped[[4, 3]]
    bad = checks.compare({"out": swapped}, pf.program, pf.program, ref, 1, 2, None)
    assert not bad.ok and bad.status().startswith("MISMATCH out: err")


def test_the_headline_is_the_speedup_over_the_fastest_baseline():
    """Every row carries the fastest baseline of its program and sizes; the headline line
    names the fastest schedule and that baseline (design note 54)."""
    from workbench.cli.results_table import format_table, headline

    base = {"spec": "adam", "program": "adam", "sizes": {"N": 2**26, "P": 1}, "P": 1,
            "comm_bytes": 0, "p10_ms": 1.0, "p90_ms": 1.0, "min_ms": 1.0, "reps": 30,
            "check": "ok"}
    recs = [dict(base, schedule="unscheduled", kind="workbench", median_ms=1.2),
            dict(base, schedule="fuse-rs-c-ag", kind="workbench", median_ms=0.483),
            dict(base, schedule="nccl all_reduce + torch._fused_adam_", kind="baseline",
                 median_ms=0.572),
            dict(base, schedule="nccl all_reduce + torch.compile adam", kind="baseline",
                 median_ms=0.514)]
    df = table(recs)
    row = df[df.schedule == "fuse-rs-c-ag"].iloc[0]
    assert row.fastest_baseline == "nccl all_reduce + torch.compile adam"
    assert row.x_fastest_baseline == pytest.approx(0.514 / 0.483)
    assert headline(df) == ["adam N=67108864 P=1: fuse-rs-c-ag 0.483 ms, 1.06x the fastest "
                            "baseline (nccl all_reduce + torch.compile adam, 0.514 ms)"]
    assert "x_fastest_baseline" in format_table(df)
    no_base = table(recs[:2])
    assert headline(no_base) == [] and no_base.x_fastest_baseline.isna().all()


def test_a_reference_row_is_never_the_fastest_baseline():
    """GPU run 22 (H100, P = 1, T = H = 2048): the MatMul alone (0.039 ms, a floor without the
    all_reduce and the epilogue) was taken as the layer's fastest baseline. It is a
    reference, tagged so by the worker (workbench.runtime.baselines.row_kind) and, in results
    written
    before that, known by its name."""
    from workbench.cli.results_table import headline
    from workbench.runtime.baselines import REFERENCES, row_kind

    assert row_kind("cublas matmul alone") == "reference"
    assert row_kind("cublas matmul + nccl all_reduce + torch epilogue") == "baseline"
    base = {"spec": "studies/model_parallel.py", "program": "model_parallel",
            "sizes": {"T": 2048, "H": 2048, "P": 1}, "P": 1, "comm_bytes": 0, "p10_ms": 0.0,
            "p90_ms": 0.0, "min_ms": 0.0, "reps": 20, "check": "ok"}
    layer = "cublas matmul + nccl all_reduce + torch epilogue"
    for old_tag in ("baseline", "reference"):  # as run 22 wrote it, and as the worker now does
        recs = [dict(base, schedule="unscheduled", kind="workbench", median_ms=0.076),
                dict(base, schedule="fuse-ar-c", kind="workbench", median_ms=0.080),
                dict(base, schedule=layer, kind="baseline", median_ms=0.110),
                dict(base, schedule=next(iter(REFERENCES)), kind=old_tag, median_ms=0.039)]
        df = table(recs)
        assert set(df.fastest_baseline) == {layer}
        assert headline(df) == ["studies/model_parallel.py T=2048 H=2048 P=1: unscheduled "
                                f"0.076 ms, 1.45x the fastest baseline ({layer}, 0.110 ms)"]
