"""The reference interpreter: runs a program on P virtual ranks with numpy. It is the semantic
oracle for every transform and every generated kernel.

Modules: `sizes` (dtypes, size binding, logical values <-> per-rank arrays), `machine` (the
interpreter: one rule per op class, INTERPRETER_RULES), `bounds` (the exact reference and the
error bound of a correct implementation, per element: what GPU results are checked against),
`oracle` (random inputs, where a reference goes non-finite, tolerances, comparing programs).
Every public name is re-exported.
"""

from workbench.interpreter.bounds import (  # noqa: F401
    SAFETY,
    UNIT_ROUNDOFF,
    BoundedReference,
    bounded_reference,
    gamma,
    kernel_sum_roundings,
    within_bounds,
)
from workbench.interpreter.machine import (  # noqa: F401
    INTERPRETER_RULES,
    InterpreterRule,
    dropout_keep,
    run,
)
from workbench.interpreter.oracle import (  # noqa: F401
    ERROR_CHUNK,
    RTOL,
    assert_equivalent,
    compare_programs,
    first_nonfinite,
    input_scales,
    max_relative_error,
    output_tolerance,
    random_inputs,
    relative_error_where,
)
from workbench.interpreter.sizes import (  # noqa: F401
    NUMPY_DTYPES,
    bind_sizes,
    concrete,
    concrete_shape,
    from_ranks,
    numpy_dtype,
    to_ranks,
)
