"""Row kernels (codegen.lower_rows): the passes of RMSNorm, LayerNorm and softmax, the fused
AllReduce + residual + RMSNorm as one collective kernel with two peer-store gathers, and the
pinned refusals (push mode, a reduction over a non-last axis, rows longer than the cache)."""

import re

import pytest
import sympy
from conftest import ROOT

from codegen.lower import lower
from codegen.lower_rows import ROW_CACHE, row_passes
from codegen.plan import KernelStep, row_cols_fault
from codegen.spec import THREADS
from workbench import Mean, P, Program, Replicated, Size, Tensor, float32
from workbench.errors import RuntimeFault, WorkbenchError
from workbench.loader import load
from workbench.options import CodegenOptions


def test_the_fused_allreduce_rmsnorm_is_one_row_collective_kernel(study):
    f = study("studies/allreduce_rmsnorm.py")
    plan = lower(f.schedules["fuse-rs-c-ag"].apply(), P=2)
    (step,) = plan.steps
    assert isinstance(step, KernelStep) and step.spec.kind == "collective"
    row = step.spec.row
    assert row.cache == ROW_CACHE and len(row.passes) == 2
    first, second = row.passes
    assert [r.kind for r in first.reductions] == ["mean"]
    assert first.cached_out == ("r_h_s",) and second.cached_in == ("r_h_s",)
    # the residual is gathered in pass 0, the normalized rows in pass 1, each into both ranks
    assert [len(s.peers) for s in first.stores] == [2]
    assert [len(s.peers) for s in second.stores] == [2]
    assert [ld.mode for ld in first.loads] == ["reduce", "contig"]
    assert step.extent == sympy.Symbol("T", integer=True, positive=True) / 2


def test_softmax_runs_three_passes_without_a_cache():
    pf = load(str(ROOT / "studies/rmsnorm.py:softmax_f16"))
    (step,) = lower(pf.schedules["fused"].apply(), P=1).steps
    row = step.spec.row
    assert step.spec.kind == "rows" and row.cache == 0  # x is reloaded, nothing is carried
    assert [[r.kind for r in p.reductions] for p in row.passes] == [["max"], ["sum"], []]


def test_row_passes_follow_the_reductions_they_read(study):
    f = study("studies/allreduce_rmsnorm.py")
    leaves = list(f.schedules["fuse-rs-c-ag"].apply().stmts[0].leaves())
    # rs, h_s, mean, out_s (reads the mean), gather h (with h_s), gather out (with out_s)
    assert row_passes(leaves) == [0, 0, 0, 1, 0, 1]


def test_push_mode_is_refused_for_a_row_collective(study):
    f = study("studies/allreduce_rmsnorm.py")
    with pytest.raises(RuntimeFault, match=r"a fused collective with an axis reduction must "
                                           r"reduce-scatter by peer loads \(--collective-mode "
                                           r"pull\), got push"):
        lower(f.schedules["fuse-rs-c-ag"].apply(), P=2, collective_mode="push")


def test_a_reduction_over_the_first_axis_is_not_generated():
    T, H = Size("T", multiple_of=P), Size("H")
    x = Tensor(float32, [T, H], Replicated, "x")
    prog = Program([x], [Mean(x, 0, name="colmean")], name="cols")
    with pytest.raises(RuntimeFault, match=r"an axis reduction on GPUs must reduce the last axis "
                                           r"\(rows are contiguous\), got axis 0 of"):
        lower(prog, P=1)


def test_rows_longer_than_the_cache_are_refused_before_launch(study):
    f = study("studies/allreduce_rmsnorm.py")
    (step,) = lower(f.schedules["fuse-rs-c-ag"].apply(), P=2).steps
    assert row_cols_fault(step, THREADS * ROW_CACHE) is None  # 16384: the largest hidden size
    assert re.search(r"a row kernel's rows must have at most 16384 elements .* got 16385; "
                     r"reduce over a shorter axis", row_cols_fault(step, THREADS * ROW_CACHE + 1))


def _residual_spec(dt="f16", **options):
    pf = load(str(ROOT / f"studies/rmsnorm.py:residual_{dt}"))
    (step,) = lower(pf.schedules["fused"].apply(), P=1, options=CodegenOptions(**options)).steps
    return step.spec


def test_row_kernels_keep_two_blocks_per_sm_resident():
    from codegen.lower_rows import ROW_MIN_BLOCKS
    from codegen.render import render

    spec = _residual_spec()
    assert spec.row.min_blocks == ROW_MIN_BLOCKS == 2
    assert f"__launch_bounds__({THREADS}, 2)" in render(spec)
    # the cached residual h is kept as f16 (two per register), as f32 in an f32 kernel
    assert spec.row.passes[0].cached_types == ("__half",)
    assert _residual_spec("f32").row.passes[0].cached_types == ("float",)
    assert "wb::RowCache<__nv_bfloat16, K>" in render(_residual_spec("bf16"))


def test_the_min_blocks_knob_names_a_different_kernel(study):
    from codegen.render import render

    spec3 = _residual_spec(row_min_blocks=3)
    assert spec3.row.min_blocks == 3 and f"__launch_bounds__({THREADS}, 3)" in render(spec3)
    spec1 = _residual_spec(row_min_blocks=1)
    assert spec1.row.min_blocks == 1 and spec1.name != spec3.name
    # a fused collective's blocks spin on their peers: never fewer than 2 resident per SM
    f = study("studies/allreduce_rmsnorm.py")
    (step,) = lower(f.schedules["fuse-rs-c-ag"].apply(), P=2,
                    options=CodegenOptions(row_min_blocks=1)).steps
    assert step.spec.row.min_blocks == 2


def test_the_environment_is_read_at_the_edge_only(monkeypatch):
    # lowering never reads WB_* variables: CodegenOptions.from_env does, once, for the CLI
    monkeypatch.setenv("WB_ROW_MIN_BLOCKS", "3")
    monkeypatch.setenv("WB_ROW_PREFETCH", "1")
    assert _residual_spec().row.min_blocks == 2 and not _residual_spec().row.prefetch
    opts = CodegenOptions.from_env()
    assert (opts.row_min_blocks, opts.row_prefetch) == (3, True)


@pytest.mark.parametrize("bad", ["0", "5", "two"])
def test_a_bad_min_blocks_knob_is_refused(monkeypatch, bad):
    monkeypatch.setenv("WB_ROW_MIN_BLOCKS", bad)
    shown = f"'{bad}'" if bad == "two" else bad
    with pytest.raises(WorkbenchError, match=r"WB_ROW_MIN_BLOCKS must be one of \(1, 2, 3, 4\) "
                                             r"\(minimum blocks per SM of a row kernel\), got "
                                             rf"{shown}; unset it for the default 2"):
        CodegenOptions.from_env()


def test_the_prefetch_knob_asks_l2_for_the_next_row(monkeypatch):
    from codegen.render import render

    off = _residual_spec()
    assert not off.row.prefetch and "prefetch_row_l2" not in render(off)
    on = _residual_spec(row_prefetch=True)
    text = render(on)
    assert on.row.prefetch and on.name != off.name
    # x and r (the inputs read from memory), in the vector and the single-element loops
    assert text.count("wb::prefetch_row_l2(p_x + (0LL) + next, cols);") == 2
    assert text.count("wb::prefetch_row_l2(p_r + (0LL) + next, cols);") == 2
    monkeypatch.setenv("WB_ROW_PREFETCH", "yes")
    with pytest.raises(WorkbenchError, match=r"WB_ROW_PREFETCH must be 0 or 1 \(prefetch each "
                                             r"block's next row into L2\), got 'yes'; unset it "
                                             r"for no prefetch"):
        CodegenOptions.from_env()
