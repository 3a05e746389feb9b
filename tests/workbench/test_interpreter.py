"""The reference interpreter against plain numpy implementations of the same math, for random
sizes and group sizes 1..8, plus the semantics of each collective."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from workbench import *
from workbench.errors import SizeError
from workbench.interpreter import dropout_keep, max_relative_error, random_inputs, run

group_sizes = st.integers(1, 8)


def _check(got, want, rtol):
    assert np.all(np.isfinite(np.asarray(want, np.float64))), "test inputs must give finite values"
    assert max_relative_error(got, want) <= rtol


@given(P_=group_sizes, k=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_sgd_matches_numpy(study, P_, k, seed):
    f = study("studies/sgd.py")
    sizes = {"N": P_ * k, "P": P_}
    x = random_inputs(f.program, sizes, seed)
    out = run(f.program, x, sizes)
    want = x["w"] - x["lr"] * x["g"].sum(axis=0, dtype=np.float32)
    _check(out["w1"], want, 1e-6)


def _adam_numpy(x, g):
    m = x["beta1"] * x["m"] + (1 - x["beta1"]) * g
    v = x["beta2"] * x["v"] + (1 - x["beta2"]) * g * g
    m_hat = m / (1 - x["beta1"] ** x["step"])
    v_hat = v / (1 - x["beta2"] ** x["step"])
    return x["w"] - x["lr"] * m_hat / (np.sqrt(v_hat) + x["eps"]), m, v


@given(P_=group_sizes, k=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_adam_matches_numpy(study, P_, k, seed):
    f = study("studies/adam.py")
    sizes = {"N": P_ * k, "P": P_}
    x = random_inputs(f.program, sizes, seed)
    out = run(f.program, x, sizes)
    w, m, v = _adam_numpy(x, x["g"].sum(axis=0, dtype=np.float32))
    for name, want in (("w1", w), ("m1", m), ("v1", v)):
        _check(out[name], want, 2e-6)


@given(P_=group_sizes, k=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_adam_mixed_precision_matches_numpy(study, P_, k, seed):
    f = study("studies/adam.py:mixed")
    sizes = {"N": P_ * k, "P": P_}
    x = random_inputs(f.program, sizes, seed)
    out = run(f.program, x, sizes)
    g16 = x["g"].astype(np.float32).sum(axis=0).astype(np.float16)  # the fp16 all-reduce
    w, m, v = _adam_numpy(x, g16.astype(np.float32))
    _check(out["w1"], w, 2e-6)
    assert out["w16"].dtype == np.float16
    _check(out["w16"], w.astype(np.float16), 1e-3)


@given(P_=group_sizes, k=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_lamb_matches_numpy(study, P_, k, seed):
    f = study("studies/lamb.py")
    sizes = {"N": P_ * k, "P": P_}
    x = random_inputs(f.program, sizes, seed)
    out = run(f.program, x, sizes)
    g = x["g"].sum(axis=0, dtype=np.float32)
    m = x["beta1"] * x["m"] + (1 - x["beta1"]) * g
    v = x["beta2"] * x["v"] + (1 - x["beta2"]) * g * g
    u = m / (1 - x["beta1"] ** x["step"]) / (np.sqrt(v / (1 - x["beta2"] ** x["step"]))
                                              + x["eps"]) + x["wd"] * x["w"]
    w = x["w"] - x["lr"] * (np.linalg.norm(x["w"]) / np.linalg.norm(u)) * u
    _check(out["w1"], w, 1e-5)


def _epilogue(summed, b, r, p, seed):
    idx = np.arange(summed.size, dtype=np.uint64).reshape(summed.shape)
    keep = dropout_keep(seed, idx, p)
    return np.where(keep, (summed + b) / (1 - p), 0) + r


@given(P_=group_sizes, t=st.integers(1, 5), k=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_model_parallel_matches_numpy(study, P_, t, k, seed):
    f = study("studies/model_parallel.py")
    sizes = {"T": P_ * t, "H": P_ * k, "P": P_}
    x = random_inputs(f.program, sizes, seed)
    out = run(f.program, x, sizes)
    f32 = {n: a.astype(np.float32) for n, a in x.items()}
    # The whole layer in numpy: x @ W over the full hidden dim, rounded as the f16 kernels do.
    partial = [(f32["x"][:, r * k:(r + 1) * k] @ f32["W"][r * k:(r + 1) * k]).astype(np.float16)
               for r in range(P_)]
    summed = np.sum([p.astype(np.float32) for p in partial], axis=0).astype(np.float16)
    want = _epilogue(summed.astype(np.float32), f32["b"], f32["r"], 0.1, 1)
    _check(out["out"], want.astype(np.float16), 5e-3)


@given(P_=group_sizes, t=st.integers(1, 5), k=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_pipeline_matches_numpy(study, P_, t, k, seed):
    f = study("studies/pipeline.py")
    sizes = {"T": P_ * t, "H": P_ * k, "P": P_}
    x = random_inputs(f.program, sizes, seed)
    out = run(f.program, x, sizes)
    summed = x["y"].astype(np.float32).sum(axis=0).astype(np.float16).astype(np.float32)
    want = _epilogue(summed, x["b"].astype(np.float32), x["r"].astype(np.float32), 0.1, 1)
    _check(out["out"], want.astype(np.float16), 5e-3)


# ---------------------------------------------------------------- collectives


def _n():
    """N, declared when a test's tensor is: a Size's fact is the last declaration of its name
    in the process, and other test modules declare N without multiple_of at import."""
    return Size("N", multiple_of=P)


def _one(op_builder, layout=Local, dtype=float32):
    x = Tensor(dtype, [_n()], layout, "x")
    return Program(inputs=[x], outputs=[op_builder(x)], name="one")


@pytest.mark.parametrize("rop,fn", [(Sum, np.sum), (Max, np.max), (Min, np.min),
                                    (Prod, np.prod)])
@given(P_=group_sizes, seed=st.integers(0, 99))
def test_allreduce_and_reducescatter(rop, fn, P_, seed):
    sizes = {"N": 2 * P_, "P": P_}
    ar = _one(lambda x: AllReduce(rop, x))
    rs = _one(lambda x: ReduceScatter(rop, x))
    x = random_inputs(ar, sizes, seed)
    want = fn(x["x"], axis=0)
    assert max_relative_error(run(ar, x, sizes)["t0"], want) <= 1e-6
    assert max_relative_error(run(rs, x, sizes)["t0"], want) <= 1e-6


@given(P_=group_sizes, seed=st.integers(0, 99))
def test_allgather_broadcast_reduce(P_, seed):
    sizes = {"N": 3 * P_, "P": P_}
    ag = _one(AllGather, layout=Sliced(0))
    x = random_inputs(ag, sizes, seed)
    assert np.array_equal(run(ag, x, sizes)["t0"], x["x"])
    root = P_ - 1
    bc = _one(lambda t: Broadcast(t, root=root))
    xl = random_inputs(bc, sizes, seed)
    assert np.array_equal(run(bc, xl, sizes)["t0"], xl["x"][root])
    rd = _one(lambda t: Reduce(Sum, t, root=root))
    assert max_relative_error(run(rd, xl, sizes)["t0"], xl["x"].sum(0)) <= 1e-6


def test_norm_over_slices_equals_norm_of_whole():
    x = Tensor(float32, [_n()], Sliced(0), "x")
    prog = Program(inputs=[x], outputs=[Norm(x)], name="n")
    sizes = {"N": 12, "P": 4}
    xs = random_inputs(prog, sizes, 3)
    assert max_relative_error(run(prog, xs, sizes)["t0"], np.linalg.norm(xs["x"])) <= 1e-6


def test_bfloat16_rounds_each_statement():
    x = Tensor(bfloat16, [_n()], Replicated, "x")
    prog = Program(inputs=[x], outputs=[Compute(x * 3.0)], name="bf")
    sizes = {"N": 4, "P": 2}
    xs = random_inputs(prog, sizes, 0)
    out = run(prog, xs, sizes)["t0"]
    assert out.dtype == ml_dtypes.bfloat16
    want = (xs["x"].astype(np.float32) * 3).astype(ml_dtypes.bfloat16)
    assert np.array_equal(out, want)


def test_dropout_mask_rate_and_slicing_invariance():
    idx = np.arange(200_000, dtype=np.uint64)
    keep = dropout_keep(7, idx, 0.25)
    assert abs(keep.mean() - 0.75) < 0.01
    assert not np.array_equal(keep, dropout_keep(8, idx, 0.25))  # the seed matters
    assert np.array_equal(keep[1000:2000], dropout_keep(7, idx[1000:2000], 0.25))


def test_unset_size_and_bad_multiple():
    prog = _one(lambda x: AllReduce(Sum, x))
    with pytest.raises(SizeError, match="size N must be set, got no value; pass it, e.g. --set "
                       "N=1024"):
        run(prog, {}, {"P": 2})
    with pytest.raises(SizeError,
                       match="size N must be a multiple of P = 4, got 10; pad it to N = 12"):
        run(prog, {}, {"P": 4, "N": 10})


def test_relative_error_where_matches_whole_array_numpy_across_chunks(monkeypatch):
    from workbench import interpreter

    monkeypatch.setattr(interpreter, "ERROR_CHUNK", 7)  # many chunks, a ragged last one
    rng = np.random.default_rng(3)
    want = rng.standard_normal((5, 11)).astype(np.float32)
    got = want + rng.standard_normal(want.shape).astype(np.float32) * 1e-3
    got[4, 2] += 0.5  # the worst element, in the last chunks
    err, flat = interpreter.relative_error_where(got, want)
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    plain = np.abs(g64 - w64) / np.maximum(np.abs(w64), 1.0)
    assert err == plain.max() and flat == int(np.argmax(plain)) == 4 * 11 + 2
    # NaN in both places is equal; in one only, a wrong result at that index
    got[1, 1] = want[1, 1] = np.nan
    assert interpreter.relative_error_where(got, want)[0] == plain.max()
    got[0, 3] = np.nan
    assert interpreter.relative_error_where(got, want) == (np.inf, 3)
    assert interpreter.relative_error_where(got[:2], want) == (np.inf, None)


def test_every_op_class_has_an_interpreter_rule():
    """One place per op: regions aside (their meaning is their body), every IR op class has
    its reference semantics in INTERPRETER_RULES."""
    from workbench import ir
    from workbench.interpreter import INTERPRETER_RULES

    assert set(INTERPRETER_RULES) == set(ir.OP_CLASSES) - set(ir.REGION_OPS)
