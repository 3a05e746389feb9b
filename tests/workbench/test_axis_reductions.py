"""Reductions over one axis (ReduceAxis, keep-dims): the interpreter against numpy, the DSL's
one-line RMSNorm / LayerNorm / softmax, the transforms that move a per-row reduction onto row
slices and fuse it into a collective with several gathers (original vs transformed programs on
random data), and the pinned errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import (
    AllReduce,
    Local,
    Max,
    Mean,
    Min,
    Norm,
    P,
    Prod,
    Program,
    ReduceTensor,
    Replicated,
    Size,
    Sliced,
    Sum,
    Tensor,
    Variable,
    WorkbenchError,
    bfloat16,
    float16,
    float32,
    ir,
    layer_norm,
    rms_norm,
    schedule,
    softmax,
)
from workbench.errors import IllegalTransform, LayoutError, ShapeError, VerifyError
from workbench.interpreter import (
    RTOL,
    assert_equivalent,
    max_relative_error,
    random_inputs,
    run,
)
from workbench.transforms import CopyEngines, Fuse, Reorder, Split
from workbench.transforms.fusion import gathers_last

DTYPES = {"f32": float32, "f16": float16, "bf16": bfloat16}


def _numpy_reduce(kind: str, x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype(np.float64)
    if kind == "sum":
        return x.sum(axis, keepdims=True)
    if kind == "mean":
        return x.mean(axis, keepdims=True)
    if kind == "norm":
        return np.sqrt((x * x).sum(axis, keepdims=True))
    return (x.max if kind == "max" else x.min)(axis, keepdims=True)


def _dsl_reduce(kind: str, x, axis: int):
    if kind == "mean":
        return Mean(x, axis)
    if kind == "norm":
        return Norm(x, axis=axis)
    return ReduceTensor({"sum": Sum, "max": Max, "min": Min}[kind], x, axis=axis)


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(ir.AXIS_REDUCTIONS), axis=st.sampled_from([0, 1, -1]),
       dtype=st.sampled_from(sorted(DTYPES)), layout=st.sampled_from(["rep", "local", "rows"]),
       Pv=st.integers(1, 4), tq=st.integers(1, 3), h=st.integers(1, 9), seed=st.integers(0, 99))
def test_interpreter_reduces_each_rank_over_the_axis(kind, axis, dtype, layout, Pv, tq, h, seed):
    """Each rank's reduction over the axis, keep-dims, equals numpy's (f64, rounded once)."""
    T, H = Size("T", multiple_of=P), Size("H")
    if layout == "rows" and axis == 0:
        axis = 1  # the rows' own axis is refused (pinned below)
    lay = {"rep": Replicated, "local": Local, "rows": Sliced(0)}[layout]
    x = Tensor(DTYPES[dtype], [T, H], lay, "x")
    y = _dsl_reduce(kind, x, axis)
    prog = Program([x], [y], name="red")
    sizes = {"T": Pv * tq, "H": h, "P": Pv}
    inputs = random_inputs(prog, sizes, seed)
    (got,) = run(prog, inputs, sizes).values()
    ax = axis % 2
    want = _numpy_reduce(kind, inputs["x"], ax + (1 if layout == "local" else 0))
    assert got.shape == want.shape
    want = want.astype(np.float32).astype(got.dtype)
    assert max_relative_error(got, want) == 0.0


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_one_line_rmsnorm_layernorm_softmax_match_numpy(dtype):
    T, H = Size("T"), Size("H")
    x = Tensor(DTYPES[dtype], [T, H], Replicated, "x")
    g = Tensor(DTYPES[dtype], [H], Replicated, "g")
    b = Tensor(DTYPES[dtype], [H], Replicated, "b")
    rms, ln, sm = rms_norm(x, g), layer_norm(x, g, b), softmax(x)
    prog = Program([x, g, b], [rms, ln, sm], name="norms")
    sizes = {"T": 7, "H": 33, "P": 1}
    inp = random_inputs(prog, sizes, 3)
    out = run(prog, inp, sizes)
    X, G, B = (inp[k].astype(np.float64) for k in "xgb")
    mu = X.mean(1, keepdims=True)
    e = np.exp(X - X.max(1, keepdims=True))
    want = [X / np.sqrt((X * X).mean(1, keepdims=True) + 1e-6) * G,
            (X - mu) / np.sqrt(((X - mu) ** 2).mean(1, keepdims=True) + 1e-5) * G + B,
            e / e.sum(1, keepdims=True)]
    for v, w in zip(prog.outputs, want):
        assert max_relative_error(out[v.name], w) <= RTOL[dtype], v.name


# ---------------------------------------------------------------- transforms


def _allreduce_then(norm: str, dtype=float16):
    """y Local -> AllReduce -> `norm` of the sum (one statement per reduction)."""
    T, H = Size("T", multiple_of=P), Size("H")
    y = Tensor(dtype, [T, H], Local, "y")
    g = Tensor(dtype, [H], Replicated, "g")
    b = Tensor(dtype, [H], Replicated, "b")
    s = AllReduce(Sum, y)
    out = {"rms": lambda: rms_norm(s, g), "ln": lambda: layer_norm(s, g, b),
           "softmax": lambda: softmax(s)}[norm]()
    prog = Program([y, g, b], [out], name=norm)
    stats = [st_.out.name for st_ in prog.stmts if isinstance(st_.op, ir.ReduceAxis)]
    final = prog.outputs[0].name

    @schedule(prog)
    def fused(sc):
        rs, ag = sc.split(s)
        moved = sc.reorder(*stats, final, before=ag)
        sc.fuse(rs, *moved, final)

    return prog, fused


@pytest.mark.parametrize("norm", ["rms", "ln", "softmax"])
@settings(max_examples=10, deadline=None)
@given(Pv=st.integers(1, 6), tq=st.integers(1, 3), h=st.integers(1, 17), seed=st.integers(0, 99))
def test_per_row_reductions_move_onto_row_slices_and_fuse(norm, Pv, tq, h, seed):
    prog, fused = _allreduce_then(norm)
    scheduled = fused.apply()
    (region,) = [s for s in scheduled.stmts if isinstance(s.op, ir.Fused)]
    assert region.op.kind == "allreduce"
    assert any(isinstance(s.op, ir.ReduceAxis) and s.out.type.layout == Sliced(0)
               for s in region.op.body)
    assert_equivalent(prog, scheduled, {"T": Pv * tq, "H": h, "P": Pv}, seed)


def test_the_fused_allreduce_rmsnorm_gathers_both_outputs_in_one_kernel(study):
    f = study("studies/allreduce_rmsnorm.py")
    fused = f.schedules["fuse-rs-c-ag"].apply()
    (region,) = fused.stmts
    ops = [type(s.op).__name__ for s in region.op.body]
    assert ops == ["ReduceScatter", "Compute", "ReduceAxis", "Compute", "AllGather", "AllGather"]
    assert [v.name for v in fused.outputs] == ["out", "h"]
    for Pv in (1, 2, 4):
        assert_equivalent(f.program, fused, {"T": 2 * Pv, "H": 24, "P": Pv}, seed=Pv)


def test_gathers_last_keeps_a_gather_that_a_later_member_reads(study):
    f = study("studies/allreduce_rmsnorm.py")
    body = list(f.schedules["fuse-rs-c-ag"].apply().stmts[0].op.body)
    ag_h = body[4]
    reader = ir.Stmt((ir.Value("z", ag_h.out.type),), ir.Compute(ir.Ref("h")))
    moved = gathers_last([body[0], body[1], ag_h, reader])
    assert moved[2] is ag_h  # z reads h: the gather must stay before it
    assert gathers_last([body[0], body[1], ag_h, body[2]])[-1] is ag_h


def test_a_mutated_row_statistic_fails_the_comparison(study):
    """The equivalence checks can fail: the mean of squares replaced by their sum."""
    f = study("studies/allreduce_rmsnorm.py")
    sched = f.schedules["rs-c-ag"].apply()
    stmts = [ir.Stmt(s.outs, ir.ReduceAxis("sum", s.op.expr, s.op.axis), s.loc)
             if isinstance(s.op, ir.ReduceAxis) else s for s in sched.stmts]
    with pytest.raises(VerifyError, match="output 'out' must match the original"):
        assert_equivalent(f.program, sched.with_stmts(stmts), {"T": 4, "H": 16, "P": 2})


# ---------------------------------------------------------------- pinned errors


def test_axis_out_of_range_is_refused_at_the_users_line():
    T, H = Size("T"), Size("H")
    x = Tensor(float32, [T, H], Replicated, "x")
    with pytest.raises(WorkbenchError, match=r"^mean over an axis: axis must be an int in "
                                             r"\[-2, 2\) for a tensor of rank 2, got 2 \(at "
                                             r"test_axis_reductions\.py:\d+\)$"):
        Mean(x, 2)


def test_a_mean_over_the_sliced_dim_is_refused_a_sum_is_each_ranks_partial():
    """Issue 39 item 3: a sum, max or min over the Sliced axis is each rank's partial (Local,
    for an AllReduce of the same op); a mean of partials is not combined so: refused."""
    T, H = Size("T"), Size("H", multiple_of=P)
    x = Tensor(float32, [T, H], Sliced(1), "x")
    with pytest.raises(LayoutError, match=(
            r"^ReduceAxis\(mean, x, axis=1\): a reduction over the Sliced axis must be one of "
            r"\('sum', 'max', 'min'\) \(each rank's partial, combined by an AllReduce of the same "
            r"op\), got 'mean' over axis 1 of a Sliced\(1\) value; reduce 'sum' \(of squares for "
            r"a norm\), AllReduce\(Sum, \.\.\.\) it, and divide \(or take the sqrt\) after "
            r"\(at ")):
        Mean(x, -1)
    assert str(ReduceTensor(Sum, x, axis=-1).type.layout) == "Local"


def test_reorder_refuses_a_row_reduction_when_the_split_slices_the_reduced_dim():
    T, H = Size("T"), Size("H", multiple_of=P)  # only H divides: split scatters dim 1
    y = Tensor(float16, [T, H], Local, "y")
    g = Tensor(float16, [H], Replicated, "g")
    s = AllReduce(Sum, y)
    prog = Program([y, g], [rms_norm(s, g)], name="cols")
    after = Split("s").apply(prog)
    ms = next(st_.out.name for st_ in prog.stmts if isinstance(st_.op, ir.ReduceAxis))
    reason = Reorder((ms, prog.outputs[0].name), "s").check(after).reason
    out = prog.outputs[0].name
    assert reason == (f"reorder({ms}, {out}, before=s): {ms} = ReduceAxis(mean, Cast(f32, s) * "
                      "Cast(f32, s), axis=1) must not move onto slices of the dim it reduces "
                      "(axis 1: each rank would hold a partial of every row), got a split that "
                      f"scatters dim 1; leave {ms} after the gather")
    # a sum or a max would type as each rank's partial (Local): refused the same way
    x = Tensor(float16, [T, H], Local, "x")
    ar = AllReduce(Sum, x)
    p2 = Program([x], [softmax(ar)], name="cols_softmax")
    names = [st_.out.name for st_ in p2.stmts[1:]]
    reason = Reorder(tuple(names), "ar").check(Split("ar").apply(p2)).reason
    assert "must not move onto slices of the dim it reduces" in reason, reason


def test_prod_over_an_axis_and_unknown_reductions_are_refused():
    T = Size("T")
    x = Tensor(float32, [T, 4], Replicated, "x")
    with pytest.raises(WorkbenchError, match=r"^a reduction over an axis must be Sum, Max or Min, "
                                             r"got Prod; use Mean\(x, axis\) or Norm"):
        ReduceTensor(Prod, x, axis=0)
    env = {"x": x.type}
    with pytest.raises(VerifyError, match=r"reduction must be one of \('sum', 'max', 'min', "
                                          r"'mean', 'norm'\), got 'median'$"):
        ir.ReduceAxis("median", ir.Ref("x"), 0).infer(env, "m")


def test_a_scalar_has_no_axis_to_reduce():
    lr = Variable(float32, "lr")
    with pytest.raises(ShapeError, match=r"a reduction over an axis must reduce a tensor, got a "
                                         r"scalar; use a tensor of rank >= 1"):
        Mean(lr, 0)


def test_copy_engines_refuse_a_region_with_a_row_reduction(study):
    f = study("studies/allreduce_rmsnorm.py")
    fused = f.schedules["fuse-rs-c-ag"].apply()
    with pytest.raises(IllegalTransform, match=r"a fused collective moved by copy engines must "
                                               r"be one kernel, got the reduction t0_s inside"):
        CopyEngines("summed_rs").apply(fused)


def test_fuse_kinds_with_axis_reductions(study):
    f = study("studies/allreduce_rmsnorm.py")
    p = f.program
    fused = Fuse(("h", "t0", "out")).apply(p)  # residual + RMSNorm: one row kernel
    assert fused.stmts[1].op.kind == "compute"
    assert_equivalent(p, fused, {"T": 6, "H": 10, "P": 2})


ROW_SPECS = [f"studies/rmsnorm.py:{n}_{d}" for n in ("axis", "rmsnorm", "layernorm",
                                                             "softmax", "residual")
             for d in ("f16", "bf16", "f32")]


@pytest.mark.parametrize("spec", ROW_SPECS)
@settings(max_examples=5, deadline=None)
@given(t=st.integers(1, 9), h=st.integers(1, 40), seed=st.integers(0, 99))
def test_fused_row_regions_compute_what_the_statements_do(study, spec, t, h, seed):
    """Fusing the statistics and the normalization into one row region (the GPU script's
    `fused` schedules) keeps the values."""
    f = study(spec)
    assert_equivalent(f.program, f.schedules["fused"].apply(), {"T": t, "H": h, "P": 1}, seed)
