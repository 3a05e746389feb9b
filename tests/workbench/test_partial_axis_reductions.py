"""Issue 39 item 3: a reduction over the Sliced axis gives each rank's partial (Local), ready for
an AllReduce of the same op: the vocab-parallel softmax and cross-entropy written naturally
(tests/programs/users/vocab_parallel_ce.py) is Megatron's, checked against numpy on the whole
vocabulary; a mean or a norm of partials, which no AllReduce combines, is refused with the fix;
and a size named like a kernel template's identifier (the vocabulary V) is generated."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT

from codegen.lower import lower
from codegen.render import render
from workbench import Mean, Norm, P, Program, Size, Sliced, Tensor, float32
from workbench.errors import LayoutError
from workbench.interpreter import random_inputs, run
from workbench.loader import load
from workbench.types import LocalLayout

SPEC = str(ROOT / "tests/programs/users/vocab_parallel_ce.py")


@pytest.mark.parametrize("P_", [1, 2, 4])
def test_vocab_parallel_cross_entropy_is_the_whole_vocabularys(P_):
    pf = load(SPEC)
    sizes = {"T": 3 * P_, "V": 8 * P_, "P": P_}
    x = random_inputs(pf.program, sizes, seed=P_)
    out = run(pf.program, x, sizes)
    z = x["logits"].astype(np.float64)  # [T, V], every rank's columns side by side
    m = z.max(axis=1, keepdims=True)
    s = np.exp(z - m).sum(axis=1, keepdims=True)
    loss = np.log(s) + m - (z * x["onehot"]).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(out["loss"], loss, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["probs"], np.exp(z - m) / s, rtol=1e-5, atol=1e-7)


def test_each_ranks_partial_is_local_and_lowers_to_a_row_kernel_on_its_columns():
    pf = load(SPEC)
    part = pf.program.stmt_defining("m_part").out.type
    assert isinstance(part.layout, LocalLayout) and [str(d) for d in part.shape] == ["T", "1"]
    step = lower(pf.program, 4).steps[0]
    assert step.spec.kind == "rows" and str(step.cols) == "V/4"
    source = render(step.spec)
    assert "long long size_V" in source and "long long V" not in source


@pytest.mark.parametrize("make,op", [(lambda x: Mean(x, axis=1), "mean"),
                                     (lambda x: Norm(x, axis=1), "norm")])
def test_a_mean_or_norm_over_the_sliced_axis_is_refused_with_the_fix(make, op):
    T, V = Size("T"), Size("V", multiple_of=P)
    x = Tensor(float32, [T, V], Sliced(1), "x")
    with pytest.raises(LayoutError, match=(
            rf"a reduction over the Sliced axis must be one of \('sum', 'max', 'min'\) \(each "
            rf"rank's partial, combined by an AllReduce of the same op\), got '{op}' over axis 1 "
            r"of a Sliced\(1\) value; reduce 'sum' \(of squares for a norm\), AllReduce\(Sum, "
            r"\.\.\.\) it, and divide \(or take the sqrt\) after")):
        Program(inputs=[x], outputs=[make(x)], name="p")

