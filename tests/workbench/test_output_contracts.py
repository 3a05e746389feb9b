"""Output contracts: a schedule returns every output as the program as written does, unless
the program declared that it may stay sliced; the autotuner proposes nothing else."""

from __future__ import annotations

import pytest

from studies import adam, sgd
from workbench import (
    AllReduce,
    Local,
    P,
    Program,
    Replicated,
    Size,
    Sum,
    Tensor,
    Update,
    WorkbenchError,
    float32,
)
from workbench.autotune import search
from workbench.errors import IllegalTransform
from workbench.transforms import AsSlice, Reorder, Split


def _sgd(may_stay_sliced=False):
    N = Size("N", multiple_of=P)
    g = Tensor(float32, [N], Local, "g")
    w = Tensor(float32, [N], Replicated, "w")
    g1 = AllReduce(Sum, g)
    w1 = Update(w, w - 0.1 * g1)
    return Program(inputs=[g, w], outputs=[w1], name="sgd",
                   may_stay_sliced=[w1] if may_stay_sliced else [])


def _sliced_weights(program):
    program = Split("g1").apply(program)
    program = Reorder(("w1",), "g1").apply(program)
    return AsSlice(("w",)).apply(program)


def test_keeping_an_output_sliced_is_illegal_unless_declared():
    with pytest.raises(IllegalTransform, match=r"as-slice must keep output w1 stored as the "
                       r"program returns it \(Replicated\), got Sliced\(0\); if each rank needs "
                       r"only its slice \(optimizer state, ZeRO-style\), declare it: "
                       r"Program\(\.\.\., may_stay_sliced=\[w1\]\)"):
        _sliced_weights(_sgd())
    assert str(_sliced_weights(_sgd(may_stay_sliced=True)).outputs[0].type.layout) == "Sliced(0)"


def test_may_stay_sliced_names_outputs_only():
    N = Size("N", multiple_of=P)
    g = Tensor(float32, [N], Local, "g")
    with pytest.raises(WorkbenchError, match="may_stay_sliced must name outputs of the program, "
                       "got g"):
        Program(inputs=[g], outputs=[AllReduce(Sum, g)], may_stay_sliced=[g])


@pytest.mark.parametrize("program", [_sgd(), sgd.program, sgd.mixed, adam.program, adam.mixed],
                         ids=["sgd-undeclared", "sgd", "sgd-mixed", "adam", "adam-mixed"])
def test_the_autotuner_proposes_only_schedules_that_keep_the_contract(program):
    for cand in search(program).candidates:
        for k, (old, new) in enumerate(zip(program.outputs, cand.program.outputs)):
            assert old.type.layout == new.type.layout or k in program.may_stay_sliced, (
                cand.name, old.name, new.type.layout)


def test_the_studies_weights_stay_whole():
    """A data-parallel forward pass reads whole weights: Adam's w1 is never left sliced."""
    w1 = adam.program.outputs.index(adam.program.value("w1"))
    assert w1 not in adam.program.may_stay_sliced
