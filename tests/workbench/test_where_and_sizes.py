"""where, comparisons (masks) and sizes used as numbers: the interpreter against numpy, the
printed IR, a transform that fuses them keeps their meaning (hypothesis), pinned errors, and
the generated kernel compiles (nvcc)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import (
    Compute,
    P,
    Program,
    Replicated,
    Size,
    Tensor,
    WorkbenchError,
    equal,
    float16,
    float32,
    greater_equal,
    less,
    less_equal,
    maximum,
    minimum,
    not_equal,
    sqrt,
    where,
)
from workbench.interpreter import assert_equivalent, random_inputs, run
from workbench.transforms import Fuse

NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()


def _masked(dtype=float32):
    N, H = Size("N", multiple_of=P), Size("H")
    x = Tensor(dtype, [N, H], Replicated, "x")
    b = Tensor(dtype, [H], Replicated, "b")
    y = Compute(where(x > b, x / H, x * (1 / sympy.sqrt(H))), name="y")
    z = Compute(where(less(y, 0.0), minimum(y, b), maximum(y, 0.5)) + sqrt(H) * (x <= 0),
                name="z")
    return Program(inputs=[x, b], outputs=[y, z], name="masked")


def test_where_and_sizes_compute_what_numpy_does():
    program = _masked()
    sizes = {"N": 8, "H": 16, "P": 2}
    inputs = random_inputs(program, sizes, seed=3)
    out = run(program, inputs, sizes)
    x, b = inputs["x"].astype(np.float64), inputs["b"].astype(np.float64)
    y = np.where(x > b, x / 16, x * 0.25)
    z = np.where(y < 0, np.minimum(y, b), np.maximum(y, 0.5)) + 4.0 * (x <= 0)
    np.testing.assert_allclose(out["y"], y, rtol=1e-6)
    np.testing.assert_allclose(out["z"], z, rtol=1e-6)


def test_every_comparison_is_a_one_zero_mask():
    N = Size("N", multiple_of=P)
    x = Tensor(float32, [N], Replicated, "x")
    y = Tensor(float32, [N], Replicated, "y")
    fns = {"lt": (x < y, np.less), "le": (x <= y, np.less_equal), "gt": (x > y, np.greater),
           "ge": (greater_equal(x, y), np.greater_equal), "eq": (equal(x, y), np.equal),
           "ne": (not_equal(x, y), np.not_equal), "le2": (less_equal(x, y), np.less_equal)}
    outs = [Compute(e, name=k) for k, (e, _) in fns.items()]
    program = Program(inputs=[x, y], outputs=outs, name="cmp")
    xv = np.array([1, 2, 3, 4], np.float32)
    yv = np.array([2, 2, 2, 5], np.float32)
    out = run(program, {"x": xv, "y": yv}, {"N": 4, "P": 2})
    for k, (_, ref) in fns.items():
        np.testing.assert_array_equal(out[k], ref(xv, yv).astype(np.float32))


def test_printed_ir_names_sizes_and_where():
    text = str(_masked())
    assert "y = where(x > b, x / size(H), x * size(1/sqrt(H)))" in text
    assert "program masked(H, N, P)" in text


def test_a_size_used_only_as_a_number_must_be_set():
    N, K = Size("N", multiple_of=P), Size("K")
    x = Tensor(float32, [N], Replicated, "x")
    program = Program(inputs=[x], outputs=[Compute(x / K, name="y")], name="scale")
    assert "K" in [s.name for s in program.symbols()]
    with pytest.raises(WorkbenchError, match=r"size K must be set, got no value"):
        run(program, {"x": np.ones(4, np.float32)}, {"N": 4, "P": 2})
    out = run(program, {"x": np.ones(4, np.float32)}, {"N": 4, "P": 2, "K": 8})
    np.testing.assert_array_equal(out["y"], np.full(4, 0.125, np.float32))


def test_where_needs_shapes_that_broadcast():
    N, M = Size("N", multiple_of=P), Size("M")
    x = Tensor(float32, [N], Replicated, "x")
    m = Tensor(float32, [M], Replicated, "m")
    with pytest.raises(WorkbenchError, match=r"shapes must match or broadcast, got \[M\] and "
                       r"\[N\]"):
        where(m > 0, x, 0.0)


def test_a_complex_size_expression_is_refused():
    N = Size("N", multiple_of=P)
    x = Tensor(float32, [N], Replicated, "x")
    with pytest.raises(WorkbenchError, match=r"a size used as a number must be a real "
                       r"expression of sizes, got"):
        x * sympy.sqrt(-N)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 6), h=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_fusing_where_and_size_arithmetic_keeps_the_meaning(n, h, seed):
    program = _masked(float16)
    fused = Fuse(("y", "z")).apply(program)
    assert_equivalent(program, fused, {"N": 2 * n, "H": h, "P": 2}, seed=seed)


@pytest.mark.skipif(not NVCC, reason="nvcc (CUDA toolkit) not installed")
def test_the_kernel_of_where_and_sizes_compiles(cubin_cache):
    from codegen.lower import lower
    from codegen.render import include_dir, render
    from workbench.runtime.compiler import compile_cubin

    program = Fuse(("y", "z")).apply(_masked(float16))
    (spec,) = lower(program, 2).kernels()
    source = render(spec)
    assert "long long H" in source and "static_cast<float>(" in source
    assert "? 1.0f : 0.0f" in source
    assert compile_cubin(spec.name, source, include_dir()).stat().st_size > 0


def test_a_size_on_the_left_of_an_operator_is_a_number_too():
    N, H = Size("N", multiple_of=P), Size("H")
    x = Tensor(float32, [N], Replicated, "x")
    program = Program(inputs=[x], outputs=[Compute(H * x + x * P - H / x, name="y")],
                      name="left")
    assert "y = size(H) * x + x * size(P) - size(H) / x" in str(program)
    xv = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    out = run(program, {"x": xv}, {"N": 4, "H": 3, "P": 2})
    np.testing.assert_allclose(out["y"], 3 * xv + 2 * xv - 3 / xv, rtol=1e-6)
