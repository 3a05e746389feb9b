"""Issue 39 item 5: a fuse either changes what runs or is refused with the reason. A MatMul
with one epilogue statement that no GEMM library runs (the erf GeLU) was accepted and lowered
to exactly the unscheduled plan; a whole AllReduce with an elementwise epilogue said "match no
fused kernel"; an expression built in a schedule printed a 2.6 KB repr."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

from codegen.lower import lower
from codegen.plan import GemmStep, KernelStep
from workbench import (
    AllReduce,
    Compute,
    Local,
    MatMul,
    P,
    Program,
    Replicated,
    Size,
    Sliced,
    Sum,
    Tensor,
    bfloat16,
    gelu,
    gelu_tanh,
    rms_norm,
    schedule,
)
from workbench.errors import IllegalTransform, WorkbenchError
from workbench.interpreter import assert_equivalent
from workbench.loader import load
from workbench.transforms import Fuse, Reorder, Split

SIZES = {"T": 8, "H": 8, "F": 16, "P": 2}


def _sizes():
    """The sizes, declared where a program is built: Size records its multiple_of fact in the
    DSL's registry (read when a Program is built), which a Size of the same name in another
    test file of the same xdist worker may have replaced since this file was imported."""
    return Size("T", multiple_of=P), Size("H", multiple_of=P), Size("F", multiple_of=P)


def _mlp(fn):
    T, H, F = _sizes()
    x = Tensor(bfloat16, [T, H], Replicated, "x")
    W1 = Tensor(bfloat16, [H, F], Sliced(1), "W1")
    b1 = Tensor(bfloat16, [F], Sliced(0), "b1")
    mm = MatMul(x, W1, name="mm")
    h = Compute(fn(mm + b1), name="h")
    return Program(inputs=[x, W1, b1], outputs=[h], name="mlp")


def _kinds(program):
    return [type(s).__name__ + (f":{s.epilogue}" if isinstance(s, GemmStep) else "")
            for s in lower(program, 2).steps]


def test_an_erf_gelu_epilogue_fuse_that_would_change_nothing_is_refused():
    p = _mlp(gelu)
    assert _kinds(p) == ["GemmStep:", "KernelStep"]  # already the GEMM and one kernel
    with pytest.raises(IllegalTransform, match=(
            r"^fuse\(mm, h\): a MatMul's epilogue must be one the GEMM library runs \(bias, "
            r"bias \+ ReLU or bias \+ GeLU-tanh, in the MatMul's dtype\) or several statements "
            r"to make one kernel, got h = 0\.5 \* \(mm \+ b1\) \* \(1 \+ erf\(\(mm \+ b1\) \* "
            r"0\.70710678\d+\)\), one "
            r"statement that already runs as one kernel after the GEMM \(the fuse would change "
            r"nothing\); leave it unfused, or write gelu_tanh\(mm \+ b\) for cuBLASLt's GeLU "
            r"epilogue \(the tanh approximation\)$")):
        Fuse(("mm", "h")).apply(p)
    assert not Fuse(("mm", "h")).check(p).ok  # so the autotuner never proposes it


def test_a_library_epilogue_fuse_runs_in_the_gemm():
    p = _mlp(gelu_tanh)
    fused = Fuse(("mm", "h")).apply(p)
    assert _kinds(p) == ["GemmStep:", "KernelStep"]
    assert _kinds(fused) == ["GemmStep:bias_gelu_tanh"]
    assert_equivalent(p, fused, SIZES)


def test_a_two_statement_epilogue_becomes_one_kernel_after_the_gemm():
    pf = load(str(ROOT / "studies/kernel_ops.py:epilogue_erf_f16"))
    fused = pf.schedules["fuse-mm-epilogue"].apply()
    before, after = lower(pf.program, 2).steps, lower(fused, 2).steps
    assert sum(isinstance(s, KernelStep) for s in before) == 2
    assert sum(isinstance(s, KernelStep) for s in after) == 1
    assert_equivalent(pf.program, fused, {"T": 4, "H": 4, "F": 8, "P": 1})


def _ar_program():
    T, H, _ = _sizes()
    y = Tensor(bfloat16, [T, H], Local, "y")  # per-rank partial sums
    r = Tensor(bfloat16, [T, H], Replicated, "r")
    g = Tensor(bfloat16, [H], Replicated, "g")
    ar = AllReduce(Sum, y, name="ar")
    h = Compute(ar + r, name="h")
    out = Compute(rms_norm(h, g), name="out")
    return Program(inputs=[y, r, g], outputs=[out], name="ar_epilogue"), ar, r, h


def test_a_whole_allreduce_with_an_elementwise_epilogue_says_to_split_it():
    p, *_ = _ar_program()
    with pytest.raises(IllegalTransform, match=(
            r"^fuse\(ar, h\): a whole AllReduce fuses with computation that reduces along rows "
            r"\(a norm or softmax: ReduceAxis statements\), got \[AllReduce, Compute\]; for an "
            r"elementwise epilogue split it first: rs, ag = s.split\(ar\); moved = "
            r"s.reorder\(h, before=ag\); s.fuse\(rs, \*moved, h\)$")):
        Fuse(("ar", "h")).apply(p)
    # the fix the message gives, and the whole AllReduce with the norm's rows: both fuse
    split = Split("ar").apply(p)
    reorder = Reorder(("h",), "ar")
    moved = reorder.results(split, None)
    fixed = Fuse(("ar_rs", *moved, "h")).apply(reorder.apply(split))
    rows = Fuse(("ar", "h", "t0", "out")).apply(p)
    for q in (fixed, rows):
        assert_equivalent(p, q, {"T": 4, "H": 8, "P": 2})


def test_an_expression_built_in_a_schedule_is_named_shortly():
    p, ar, r, _ = _ar_program()

    @schedule(p)
    def fuse_inline(s):
        s.fuse(ar, ar + r)

    with pytest.raises(WorkbenchError) as e:
        fuse_inline.apply()
    text = str(e.value)
    assert len(text) < 500 and "0x" not in text
    assert re.search(
        r"^schedule fuse-inline \(test_fuse_changes_the_plan\.py:(\d+)\): schedule argument "
        r"must be a value of the program \(a DSL handle of a statement, or its name\), got the "
        r"expression ar \+ r, built at test_fuse_changes_the_plan\.py:\1, which no statement "
        r"computes \(inline arithmetic is computed inside each statement that reads it\); make "
        r"it a statement in the program, `h = Compute\(ar \+ r, name=\"h\"\)`, and pass h$",
        text), text
