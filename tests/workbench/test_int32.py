"""Issue 39 item 2 (in part): int32 inputs, masks and outputs are generated. An int32 id
compared with `equal` selects with `where` (the mask's dtype types nothing), int32 arithmetic
is computed in f32 and stored truncated, as the interpreter does (exact below 2^24), and the
kernels load and store `int` (tests/programs/users/ce_int_targets.py; its CUDA is golden and
compiled by nvcc in tests/codegen)."""

from __future__ import annotations

import numpy as np
from conftest import ROOT

from codegen.lower import lower
from codegen.plan import KernelStep, NcclStep
from codegen.render import render
from workbench import P, Program, Replicated, Size, Tensor, equal, float32, int32, where
from workbench.interpreter import random_inputs, run
from workbench.loader import load

SPEC = str(ROOT / "tests/programs/users/ce_int_targets.py")


def test_int32_ids_pick_the_target_logit():
    pf = load(SPEC)
    sizes = {"T": 4, "V": 32, "P": 2}
    x = random_inputs(pf.program, sizes, seed=3)
    assert x["ids"].dtype == np.int32 and 0 <= x["ids"].min() and x["ids"].max() < 16
    out = run(pf.program, x, sizes)
    want = np.where(x["cols"] == x["ids"], x["logits"], 0).sum(axis=1, keepdims=True)
    assert (want != 0).any()  # ids in [0, 16) repeat: some columns match
    np.testing.assert_allclose(out["picked"], want, rtol=1e-6)
    assert out["next_ids"].dtype == np.int32
    np.testing.assert_array_equal(out["next_ids"], x["ids"] + 1)


def test_a_mask_of_ints_selects_floats():
    N = Size("N", multiple_of=P)
    i = Tensor(int32, [N], Replicated, "i")
    j = Tensor(int32, [N], Replicated, "j")
    a = Tensor(float32, [N], Replicated, "a")
    y = where(equal(i, j), a, 0.0)
    assert y.type.dtype == float32
    Program(inputs=[i, j, a], outputs=[y], name="p")


def test_int32_kernels_load_and_store_int():
    pf = load(SPEC)
    steps = lower(pf.schedules["fuse-pick"].apply(), 2).steps
    assert [type(s).__name__ for s in steps] == ["KernelStep", "NcclStep", "KernelStep"]
    assert isinstance(steps[1], NcclStep) and steps[1].dtype == "f32"
    source = render(steps[2].spec)  # next_ids = ids + 1
    assert isinstance(steps[2], KernelStep)
    assert "const int* __restrict__ p_ids" in source and "int* __restrict__ p_next_ids" in source
