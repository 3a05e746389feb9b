"""A bf16 reference that goes non-finite is reported as such (issue 24: np.finfo refused
bfloat16 and every rank ended with a ValueError instead)."""

import ml_dtypes
import numpy as np

from workbench import Compute, Local, P, Program, Size, Tensor, bfloat16, exp
from workbench.interpreter import first_nonfinite


def test_a_bf16_overflow_names_the_statement_and_the_largest_finite_bf16():
    N = Size("N", multiple_of=P)
    x = Tensor(bfloat16, [N], Local, "x")
    y = Compute(exp(x * 1000.0), name="y")
    program = Program(inputs=[x], outputs=[y], name="overflow")
    inputs = {"x": np.full((2, 4), 1.0, dtype=ml_dtypes.bfloat16)}
    msg = first_nonfinite(program, inputs, {"N": 4, "P": 2})
    assert msg.startswith("the reference overflowed bf16 at y = exp(x * 1000) (at ")
    assert "(largest finite bf16: 3.38953e+38)" in msg
