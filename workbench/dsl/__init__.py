"""The user-facing DSL. CoCoNet's SGD reads:

    N = Size("N", multiple_of=P)
    g = Tensor(float32, [N], Local, "g")
    w = Tensor(float32, [N], Replicated, "w")
    lr = Variable(float32, "lr")
    g1 = AllReduce(Sum, g)
    w1 = Update(w, w - lr * g1)
    program = Program(inputs=[g, w, lr], outputs=[w1])

Every call type-checks at once, with the IR's own rules, so a wrong shape or layout is reported
at the line the user wrote. `Program(...)` traces the graph into an `ir.Program`: each
communication op, Update, MatMul, reduction and explicit `Compute` is one statement; arithmetic
between them is inlined into the statement that consumes it. Values are named after the
variables the caller bound them to (w1, g1, ...), or `t0, t1, ...` where no name is found.

Modules: `trace` (the graph nodes and their eager type checks), `ops` (declarations,
elementwise functions, statements), `nn` (activations and normalisations built from those),
`program` (tracing into an ir.Program). Every public name is re-exported here.
"""

from workbench.dsl.nn import (  # noqa: F401
    gelu,
    gelu_tanh,
    layer_norm,
    rms_norm,
    silu,
    softmax,
)
from workbench.dsl.ops import (  # noqa: F401
    AllGather,
    AllReduce,
    AllToAll,
    Broadcast,
    Cast,
    Compute,
    Dropout,
    Gather,
    MatMul,
    Max,
    Mean,
    Min,
    Norm,
    Prod,
    Reduce,
    ReduceScatter,
    ReduceTensor,
    Scalar,
    Send,
    Stage,
    Sum,
    Tensor,
    TopK,
    Update,
    Variable,
    equal,
    erf,
    exp,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    maximum,
    minimum,
    not_equal,
    rsqrt,
    sigmoid,
    sqrt,
    tanh,
    where,
)
from workbench.dsl.program import Pipeline, Program  # noqa: F401
from workbench.dsl.trace import (  # noqa: F401
    ArithNode,
    ConstNode,
    InputNode,
    Node,
    Size,
    SizeNode,
    StmtNode,
    check_name,
)
