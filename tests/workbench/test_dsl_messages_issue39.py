"""Issue 39 items 7 and 8: what users wrote and what they were told, each message pinned."""

from __future__ import annotations

import pytest

from workbench import (
    Broadcast,
    Compute,
    Local,
    OnRoot,
    P,
    Program,
    Reduce,
    Replicated,
    Send,
    Size,
    Sum,
    Tensor,
    Update,
    float32,
)
from workbench.errors import WorkbenchError
from workbench.interpreter import random_inputs, run


def test_send_to_a_number_names_the_stage_it_needs():
    N = Size("N")
    x = Tensor(float32, [N], Replicated, "x")
    with pytest.raises(WorkbenchError, match=r"Send's destination must be a pipeline stage \(a "
                                             r"Group made by Stage\), got 1; e\.g\. s1 = "
                                             r"Stage\('s1'\) and Send\(x, s1\), the inputs of x "
                                             r"declared with group=s0 \(at "
                                             r"test_dsl_messages_issue39"):
        Send(Compute(x * 2.0), 1)


def test_on_root_is_usable_in_a_program():
    """A parameter server whose weights live on rank 0 only (OnRoot(0), as `show` prints)."""
    N = Size("N", multiple_of=P)
    g = Tensor(float32, [N], Local, "g")
    w = Tensor(float32, [N], OnRoot(0), "w")
    w1 = Update(w, w - 0.1 * Reduce(Sum, g, 0))
    out = Broadcast(w1, 0)
    program = Program(inputs=[g, w], outputs=[out], name="ps")
    sizes = {"N": 8, "P": 2}
    x = random_inputs(program, sizes, 0)
    got = run(program, x, sizes)["out"]
    assert abs(got - (x["w"] - 0.1 * x["g"].sum(axis=0))).max() < 1e-5
