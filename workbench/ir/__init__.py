"""The symbolic IR: values, elementwise expressions, ops (one class each, with its type rule),
statements and programs. `from workbench import ir` and `ir.<Name>` reach every public name.

A Program is straight-line SSA: `inputs`, then `stmts` in order, then `outputs`. Each statement
defines one or more named values. Elementwise arithmetic lives inside `Compute` and `Update`
statements as an expression tree over earlier values, so one statement is one kernel in the
unscheduled program. Transforms (workbench.transforms) rewrite programs into programs; fused
kernels are statements whose op (`Fused`, `Overlapped`) holds a body of ordinary statements that
one kernel executes, so their meaning is always "run the body in order".

Every class here is a frozen, slotted dataclass holding tuples, so programs compare and hash
structurally and a transform can never mutate its input. Modules: `expressions` (values,
expression nodes, their type rule and printed form), `ops` (the ops and op-kind tuples),
`computation` and `communication` (the op classes), `regions` (Stmt, Fused, Overlapped), `ops`
(the op union and op-kind tuples), `program` (Program and its printed form).
"""

from workbench.ir.epilogue import (  # noqa: F401
    LIBRARY_EPILOGUES,
    LibraryEpilogue,
    library_epilogue,
)
from workbench.ir.expressions import (  # noqa: F401
    BINARY_OPS,
    COMPARISONS,
    UNARY_OPS,
    WEAK,
    Binary,
    Cast,
    Const,
    Dropout,
    Expr,
    Facts,
    ReduceOp,
    Ref,
    SizeValue,
    Unary,
    Value,
    Where,
    combine_layouts,
    expr_nodes,
    expr_refs,
    expr_type,
    format_expr,
    proven_divisible,
    proven_equal,
    rename_expr,
)
from workbench.ir.ops import (  # noqa: F401
    AXIS_REDUCTIONS,
    COLLECTIVES,
    COMMUNICATION_OPS,
    ELEMENTWISE_OPS,
    FUSABLE_COMPUTATION,
    FUSED_KINDS,
    INDEX_OPS,
    OP_CLASSES,
    REGION_OPS,
    AllGather,
    AllReduce,
    AllToAll,
    Broadcast,
    Collective,
    Compute,
    Fused,
    Gather,
    MatMul,
    Norm,
    Op,
    Overlapped,
    Reduce,
    ReduceAxis,
    ReduceScatter,
    ReduceTensor,
    Send,
    Slice,
    TopK,
    Update,
    collective_named,
    collective_of,
)
from workbench.ir.program import Program, format_program  # noqa: F401
from workbench.ir.regions import Stmt  # noqa: F401
