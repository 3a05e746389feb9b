"""tanh, erf, sigmoid and the activations built on them (GeLU in both of torch's forms, SiLU):
the interpreter against their closed forms, and the generated kernel compiles (nvcc)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from workbench import (
    Compute,
    P,
    Program,
    Replicated,
    Size,
    Tensor,
    float32,
    gelu,
    gelu_tanh,
    sigmoid,
    silu,
    tanh,
)
from workbench.interpreter import run

FUNCTIONS = {
    "tanh": (tanh, np.tanh),
    "sigmoid": (sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "silu": (silu, lambda x: x / (1 + np.exp(-x))),
    "gelu": (gelu, lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))),
    "gelu_tanh": (gelu_tanh, lambda x: 0.5 * x * (1 + np.tanh(
        math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))),
}


def _program(fn):
    N = Size("N", multiple_of=P)
    x = Tensor(float32, [N], Replicated, "x")
    y = Compute(fn(x), name="y")
    return Program(inputs=[x], outputs=[y], name="act")


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_interpreter_computes_the_closed_form(name):
    fn, want = FUNCTIONS[name]
    x = np.random.default_rng(0).normal(scale=3.0, size=4096).astype(np.float32)
    got = run(_program(fn), {"x": x}, {"N": 4096, "P": 2})["y"]
    np.testing.assert_allclose(got, want(x.astype(np.float64)), rtol=2e-6, atol=2e-6)


@pytest.mark.skipif(shutil.which("nvcc") is None
                    and not Path("/usr/local/cuda/bin/nvcc").exists(),
                    reason="nvcc (CUDA toolkit) not installed")
def test_the_kernel_of_every_function_compiles(cubin_cache):
    from codegen.lower import lower
    from codegen.render import include_dir, render
    from workbench.runtime.compiler import compile_cubin

    N = Size("N", multiple_of=P)
    x = Tensor(float32, [N], Replicated, "x")
    y = Compute(gelu(x) + gelu_tanh(x) + silu(x) + tanh(x), name="y")
    (spec,) = lower(Program(inputs=[x], outputs=[y], name="acts"), 2).kernels()
    source = render(spec)
    assert all(f in source for f in ("erff(", "tanhf(", "expf(-"))
    assert compile_cubin(spec.name, source, include_dir()).stat().st_size > 0
