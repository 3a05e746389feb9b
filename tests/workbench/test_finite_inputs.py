"""Random inputs keep the reference finite: a MatMul's weights are drawn scaled by 1/sqrt(K);
a declared range= is used as given; and a reference that overflows anyway is named, statement
and fix, instead of being compared with a kernel (workbench.runtime.checks reports it as such)."""

from __future__ import annotations

import numpy as np
import pytest

from workbench import (
    AllReduce,
    Compute,
    MatMul,
    P,
    Program,
    Replicated,
    Size,
    Sliced,
    Sum,
    Tensor,
    float16,
    gelu,
    sqrt,
)
from workbench.interpreter import first_nonfinite, input_scales, random_inputs, run
from workbench.runtime import checks

SIZES = {"T": 16, "H": 256, "F": 1024, "P": 2}


def _mlp_stack(ranges: bool = False):
    """Two Megatron MLP blocks in f16 (column-parallel W1, gelu, row-parallel W2, AllReduce):
    small enough for the CPU, deep enough that unscaled normal inputs overflow f16 (the
    second block's pre-activations reach ~sqrt(F H / 2) * sqrt(H) ~ 1e5)."""
    T, H, F = Size("T", multiple_of=P), Size("H", multiple_of=P), Size("F", multiple_of=P)
    kw = {"range": (-0.06, 0.06)} if ranges else {}
    x = Tensor(float16, [T, H], Replicated, "x")
    w1 = Tensor(float16, [H, F], Sliced(1), "w1", **kw)
    w2 = Tensor(float16, [F, H], Sliced(0), "w2", **kw)
    w3 = Tensor(float16, [H, F], Sliced(1), "w3", **kw)
    w4 = Tensor(float16, [F, H], Sliced(0), "w4", **kw)
    h1 = Compute(gelu(MatMul(x, w1)), name="h1")
    y1 = AllReduce(Sum, MatMul(h1, w2), name="y1")
    h2 = Compute(gelu(MatMul(y1, w3)), name="h2")
    y2 = AllReduce(Sum, MatMul(h2, w4), name="y2")
    return Program(inputs=[x, w1, w2, w3, w4], outputs=[y2], name="mlp2")


def _unscaled(program, sizes, seed=0):
    """What random inputs were before: standard normal everywhere."""
    inputs = random_inputs(program, sizes, seed)
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in inputs.items()}


def test_weights_are_scaled_by_one_over_sqrt_k():
    from workbench.interpreter import bind_sizes

    program = _mlp_stack()
    scales = input_scales(program, bind_sizes(program, SIZES))
    assert scales == pytest.approx({"w1": 1 / 16, "w2": 1 / 32, "w3": 1 / 16, "w4": 1 / 32})
    inputs = random_inputs(program, SIZES, seed=1)
    assert np.std(inputs["w2"].astype(np.float32)) == pytest.approx(1 / 32, rel=0.05)
    assert np.std(inputs["x"].astype(np.float32)) == pytest.approx(1.0, rel=0.1)


def test_unscaled_inputs_overflow_the_reference_and_the_statement_is_named():
    program = _mlp_stack()
    inputs = _unscaled(program, SIZES)
    out = run(program, inputs, SIZES)
    assert not np.isfinite(out["y2"].astype(np.float32)).all()  # the motivating failure
    msg = first_nonfinite(program, inputs, SIZES)
    assert msg is not None
    assert msg.startswith("the reference overflowed f16 at ")
    assert "from finite operands (largest finite f16: 65504); give the inputs that feed it a " \
           "range=(low, high) in Tensor(...) (undeclared: x, w1, w2, w3, w4) so that the " \
           "reference stays finite" in msg


def test_scaled_inputs_keep_the_reference_finite():
    program = _mlp_stack()
    for seed in range(3):
        inputs = random_inputs(program, SIZES, seed)
        out = run(program, inputs, SIZES)
        assert np.isfinite(out["y2"].astype(np.float32)).all()
        assert first_nonfinite(program, inputs, SIZES) is None
        assert 0.05 < float(np.std(out["y2"].astype(np.float32))) < 20


def test_a_declared_range_is_used_and_not_scaled():
    program = _mlp_stack(ranges=True)
    from workbench.interpreter import bind_sizes

    assert input_scales(program, bind_sizes(program, SIZES)) == {}
    inputs = random_inputs(program, SIZES, seed=2)
    assert float(np.abs(inputs["w2"].astype(np.float32)).max()) <= 0.06
    assert np.isfinite(run(program, inputs, SIZES)["y2"].astype(np.float32)).all()


def test_fast_random_inputs_scale_alike():
    program = _mlp_stack()
    fast = checks.fast_random_inputs(program, SIZES, seed=0)
    assert np.std(fast["w1"].astype(np.float32)) == pytest.approx(1 / 16, rel=0.05)


def test_a_reference_that_overflowed_is_reported_as_such_not_as_a_mismatch():
    program = _mlp_stack()
    inputs = _unscaled(program, SIZES)
    ref = checks.reference(program, inputs, SIZES, 2)
    assert ref.problem.startswith("the reference overflowed f16 at ")
    gpu = {"y2": np.clip(ref.values["y2"], -65504, 65504).astype(np.float16)}
    result = checks.compare(gpu, program, program, ref, 0, 2, None)
    assert not result.ok
    assert result.status().startswith("REFERENCE NOT FINITE: the reference overflowed f16 at ")
    assert "MISMATCH" not in result.status()
    finite = random_inputs(program, SIZES)
    assert checks.reference(program, finite, SIZES, 2).problem == ""


def test_nan_from_finite_operands_is_named():
    T = Size("T", multiple_of=P)
    x = Tensor(float16, [T], Replicated, "x")
    y = Compute(sqrt(x * 0.0 - 1.0), name="y")  # sqrt(-1) from finite x
    program = Program(inputs=[x], outputs=[y], name="nan")
    sizes = {"T": 4, "P": 2}
    msg = first_nonfinite(program, random_inputs(program, sizes), sizes)
    assert msg is not None
    assert msg.startswith("the reference made NaN at y = sqrt(x * 0 - 1) (at "
                          "test_finite_inputs.py:")
