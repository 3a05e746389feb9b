"""The DSL's vocabulary: input declarations, elementwise functions and the statements
(collectives, MatMul, reductions, Update, Compute). Each call type-checks at once."""

from __future__ import annotations

import math

import sympy

from workbench import ir
from workbench.dsl import trace as _trace
from workbench.dsl.trace import (
    ArithNode,
    InputNode,
    Node,
    StmtNode,
    _arith,
    _at,
    _binary,
    _node,
    _stmt,
    _unary,
    _user_location,
    positive_integer,
)
from workbench.errors import WorkbenchError
from workbench.ir import ReduceOp
from workbench.types import (
    WORLD,
    DType,
    Group,
    Layout,
    Replicated,
    TensorType,
    as_shape,
)

Sum, Max, Min, Prod = ReduceOp.Sum, ReduceOp.Max, ReduceOp.Min, ReduceOp.Prod


# ---------------------------------------------------------------- declarations


def Tensor(dtype: DType, shape, layout: Layout, name: str, group: Group = WORLD,
           range: tuple[float, float] | None = None) -> InputNode:
    """An input tensor of logical (global) `shape`, laid out over `group` as `layout`.

    `range=(low, high)` says where its values live (Adam's second moment is >= 0); random test
    inputs are drawn uniformly from it, and from a standard normal otherwise."""
    if not isinstance(dtype, DType):
        raise WorkbenchError(f"Tensor {name}: dtype must be float16, bfloat16, float32 or int32, "
                             f"got {dtype!r}")
    _trace.check_name("Tensor", name)
    try:
        dims = list(shape)
    except TypeError:
        dims = None
    if dims is None:
        raise WorkbenchError(f"Tensor {name}: shape must be a list of sizes, got {shape!r}; "
                             f"e.g. [N] or [B, H]")
    shape = [positive_integer(f"Tensor {name}: dim {i} of the shape", d,
                              "use a Size (e.g. N = Size('N')) or a positive int")
             for i, d in enumerate(dims)]
    t = TensorType(dtype, as_shape(shape), layout, group)
    return InputNode(name, t, _value_range("Tensor", name, range), _trace.declared_facts(t))


def _value_range(kind: str, name: str, range) -> tuple[float, float] | None:
    """An input's declared `range=(low, high)` as floats, or None; anything else refused."""
    if range is None:
        return None
    try:
        well_formed = (len(range) == 2 and range[0] < range[1]
                       and all(math.isfinite(bound) for bound in range))
    except TypeError:  # not a pair of numbers
        well_formed = False
    if not well_formed:
        raise WorkbenchError(f"{kind} {name}: range must be (low, high) with low < high, both "
                             f"finite, got {range!r}")
    return float(range[0]), float(range[1])


def Variable(dtype: DType, name: str, group: Group = WORLD,
             range: tuple[float, float] | None = None) -> InputNode:
    """A runtime scalar, the same on every rank (a learning rate, a step count).

    `range=(low, high)` says where its value lives (an Adam beta below 1, a step count from
    1); random test inputs are drawn uniformly from it, and from (0.5, 1) otherwise."""
    _trace.check_name("Variable", name)
    t = TensorType(dtype, (), Replicated, group)
    return InputNode(name, t, _value_range("Variable", name, range), _trace.declared_facts(t))


# Another name for Variable: a runtime scalar.
Scalar = Variable


def Stage(name: str, size: sympy.Expr | int | None = None) -> Group:
    """A pipeline stage: a process group of `size` ranks (default P, the world's size). Its
    inputs are declared with `group=` the stage, a `Send(x, stage)` moves values into it, and
    the program is a `Pipeline` of the stages in order (studies/pipeline.py)."""
    _trace.check_name("Stage", name)
    return Group(name, sympy.sympify(size) if size is not None else WORLD.size)


# ---------------------------------------------------------------- elementwise functions


def sqrt(x):
    """The square root of x, elementwise (computed in f32)."""
    return _unary("sqrt", x)


def rsqrt(x):
    """1 / sqrt(x), elementwise (computed in f32)."""
    return _unary("rsqrt", x)


def exp(x):
    """e to the x, elementwise (computed in f32)."""
    return _unary("exp", x)


def log(x):
    """The natural logarithm of x, elementwise (computed in f32)."""
    return _unary("log", x)


def tanh(x):
    """The hyperbolic tangent of x, elementwise (computed in f32)."""
    return _unary("tanh", x)


def erf(x):
    """The error function of x, elementwise (computed in f32; GeLU's exact form uses it)."""
    return _unary("erf", x)


def sigmoid(x):
    """1 / (1 + exp(-x)), elementwise (computed in f32)."""
    return _unary("sigmoid", x)


def maximum(a, b):
    """The larger of a and b, elementwise (numpy broadcasting)."""
    return _binary("max", a, b)


def minimum(a, b):
    """The smaller of a and b, elementwise (numpy broadcasting)."""
    return _binary("min", a, b)


def less(a, b):
    """The mask a < b: 1 where true, 0 elsewhere (as `a < b`), for `where`."""
    return _binary("lt", a, b)


def less_equal(a, b):
    """The mask a <= b: 1 where true, 0 elsewhere (as `a <= b`), for `where`."""
    return _binary("le", a, b)


def greater(a, b):
    """The mask a > b: 1 where true, 0 elsewhere (as `a > b`), for `where`."""
    return _binary("gt", a, b)


def greater_equal(a, b):
    """The mask a >= b: 1 where true, 0 elsewhere (as `a >= b`), for `where`."""
    return _binary("ge", a, b)


def equal(a, b):
    """The mask a == b: 1 where equal, 0 elsewhere, for `where` (`==` on values stays
    Python's identity test): `where(equal(cols, ids), logits, 0.0)` picks a target's logit."""
    return _binary("eq", a, b)


def not_equal(a, b):
    """The mask a != b: 1 where different, 0 elsewhere, for `where`."""
    return _binary("ne", a, b)


def where(cond, a, b):
    """a where `cond` is nonzero, else b, elementwise (numpy broadcasting over all three); a
    comparison (`x > 0`, `less(x, y)`) gives the 1/0 mask a condition reads."""
    return _arith("where", (), (_node(cond), _node(a), _node(b)))


def Cast(dtype: DType, x) -> Node:
    """Convert x to dtype (round to nearest even); a cast to x's own dtype is x itself."""
    x = _node(x)
    if x.type is not None and x.type.dtype == dtype:
        return x
    return _arith("cast", (dtype,), (_node(x),))


def Dropout(x, p: float, seed: int | None = None) -> ArithNode:
    """Dropout with probability p, elementwise: each element is kept (scaled by 1 / (1 - p))
    or zeroed, by a hash of (seed, the element's global index) that the interpreter and the
    kernels compute alike (ir.Dropout), so a schedule drops the same elements. Without a
    seed, each Dropout of a program gets its own, in order of appearance."""
    return _arith("dropout", (float(p), seed), (_node(x),))


# ---------------------------------------------------------------- statements


def AllReduce(op: ReduceOp, x, name: str | None = None) -> StmtNode:
    """Reduce a Local tensor over its group; the result is Replicated."""
    return _stmt(lambda a: ir.AllReduce(op, a[0]), [x], [False], name)


def ReduceScatter(op: ReduceOp, x, dim: int = 0, name: str | None = None) -> StmtNode:
    """Reduce a Local tensor over its group; rank r keeps slice r of `dim` (Sliced(dim))."""
    return _stmt(lambda a: ir.ReduceScatter(op, a[0], dim), [x], [False], name)


def AllGather(x, name: str | None = None) -> StmtNode:
    """Gather a Sliced tensor onto every rank (Replicated), along the dim x is Sliced on (its
    layout says it: no dim argument)."""
    if name is not None and not isinstance(name, str):
        layout = getattr(getattr(x, "type", None), "layout", None)
        along = f" (here {layout})" if layout is not None else ""
        raise _at(_user_location(), WorkbenchError(
            f"AllGather's second argument is the statement's name and must be a string, got "
            f"{name!r}; AllGather gathers along the dim its input is Sliced on{along}, so "
            "drop the dim: AllGather(x), or AllGather(x, name='y')"))
    return _stmt(lambda a: ir.AllGather(a[0]), [x], [False], name)


def Broadcast(x, root: int = 0, name: str | None = None) -> StmtNode:
    """Copy rank `root`'s value of x to every rank."""
    return _stmt(lambda a: ir.Broadcast(a[0], root), [x], [False], name)


def Reduce(op: ReduceOp, x, root: int = 0, name: str | None = None) -> StmtNode:
    """Reduce a Local tensor onto rank `root` only."""
    return _stmt(lambda a: ir.Reduce(op, a[0], root), [x], [False], name)


def Send(x, to: Group, name: str | None = None) -> StmtNode:
    """Send each rank's x to the same rank of pipeline stage `to` (a Group made by Stage; the
    receive is implied there): a pipeline's boundary. The program is a `Pipeline` of its
    stages, each Send going from a stage to the next (studies/pipeline.py):

        s0, s1 = Stage("s0"), Stage("s1")
        x = Tensor(float16, [T, H], Replicated, "x", group=s0)
        y = Send(Compute(gelu(x)), s1)
        program = Pipeline([s0, s1], inputs=[x], outputs=[y])
    """
    if not isinstance(to, Group):
        raise _at(_user_location(), WorkbenchError(
            f"Send's destination must be a pipeline stage (a Group made by Stage), got "
            f"{to!r}; e.g. s1 = Stage('s1') and Send(x, s1), the inputs of x declared with "
            "group=s0"))
    return _stmt(lambda a: ir.Send(a[0], to), [x], [False], name)


def AllToAll(x, dim: int = 0, name: str | None = None) -> StmtNode:
    """Exchange blocks: each rank splits its Local x into P equal blocks along `dim`, sends
    block j to rank j and keeps what rank s sent as its block s (an MoE dispatch or combine;
    each destination gets the same count, fixed when the program is traced)."""
    return _stmt(lambda a: ir.AllToAll(a[0], dim), [x], [False], name)


def MatMul(a, b, name: str | None = None) -> StmtNode:
    """a @ b with Megatron's layout rules (see ir.MatMul)."""
    return _stmt(lambda n: ir.MatMul(n[0], n[1]), [a, b], [False, False], name)


def ReduceTensor(op: ReduceOp, x, name: str | None = None, axis: int | None = None
                 ) -> StmtNode:
    """Reduce every element of x to a scalar; with `axis`, reduce x (which may be an
    elementwise expression) over that axis only, keeping it as a dim of size 1 so the result
    broadcasts back: ReduceTensor(Max, x, axis=-1) is each row's maximum, [T, 1]."""
    if axis is None:
        return _stmt(lambda a: ir.ReduceTensor(op, a[0]), [x], [False], name)
    if op not in _AXIS_OPS:
        raise _at(_user_location(), WorkbenchError(
            f"a reduction over an axis must be Sum, Max or Min, got {op}; use Mean(x, axis) "
            "or Norm(x, axis=...) for those"))
    return _reduce_axis(_AXIS_OPS[op], x, axis, name)


def Norm(x, name: str | None = None, axis: int | None = None) -> StmtNode:
    """The L2 norm of x (a Replicated scalar; over a Sliced x this communicates); with `axis`,
    the L2 norm of each slice along that axis, kept as a dim of size 1."""
    if axis is None:
        return _stmt(lambda a: ir.Norm(a[0]), [x], [False], name)
    return _reduce_axis("norm", x, axis, name)


def Mean(x, axis: int | None = None, name: str | None = None) -> Node:
    """The mean of x (a tensor or an elementwise expression) over `axis`, kept as a dim of
    size 1: RMSNorm's Mean(x * x, axis=-1) is [T, 1] for x of [T, H]. Without an axis, the
    mean of every element (a Replicated scalar; over a Sliced x it communicates, as
    ReduceTensor does)."""
    if axis is None:
        node = _node(x)
        if node.type is None or node.type.rank == 0:
            raise _at(_user_location(), WorkbenchError(
                f"Mean must reduce a tensor, got {'a literal' if node.type is None else 'a scalar'}"
                "; pass a tensor of rank >= 1"))
        numel = sympy.Mul(*node.type.shape)
        return ReduceTensor(ReduceOp.Sum, x, name=name) * (1.0 / numel)
    return _reduce_axis("mean", x, axis, name)


_AXIS_OPS = {ReduceOp.Sum: "sum", ReduceOp.Max: "max", ReduceOp.Min: "min"}


def _reduce_axis(kind: str, x, axis: int, name: str | None) -> StmtNode:
    """A ReduceAxis statement; a negative axis counts from the last dim, as numpy's."""
    node = _node(x)
    rank = node.type.rank if node.type is not None else 0
    if not isinstance(axis, int) or isinstance(axis, bool) or not -rank <= axis < max(rank, 1):
        raise _at(_user_location(), WorkbenchError(
            f"{kind} over an axis: axis must be an int in [{-rank}, {rank}) for a tensor of "
            f"rank {rank}, got {axis!r}"))
    ax = axis % rank if rank else axis
    return _stmt(lambda a: ir.ReduceAxis(kind, a[0], ax), [node], [True], name)


def Gather(table, ids, name: str | None = None) -> StmtNode:
    """An embedding lookup: the rows of `table` ([V, D]) named by the int32 `ids` ([T] or any
    shape S), shape S + [D]. An id outside [0, V) gives a row of zeros. With the table
    Sliced(0) over the vocabulary, each rank looks up the ids in its own rows and zeroes the
    others (a Local partial): `AllReduce(Sum, Gather(table, ids))` is the vocab-parallel
    embedding (studies/vocab_parallel_embedding.py). Layout rules: ir.Gather."""
    return _stmt(lambda a: ir.Gather(a[0], a[1]), [table, ids], [False, False], name)


def TopK(x, k: int, name: str | None = None, axis: int = -1) -> tuple[StmtNode, StmtNode]:
    """The k largest elements of x along its last axis and their int32 indices, as two
    statements `(values, indices)`, each [..., k], in descending order (ties: the lower index
    first; NaN after every number). k = 1 is argmax. An MoE router:
    `gate, expert = TopK(softmax(logits), 2)` (studies/moe_router.py). The axis must be whole
    on every rank and k at most min(32, its length); `axis` may only name the last axis (a
    row is contiguous: the kernel gives each row a warp). `name` names the values; the
    indices are `name + "_idx"`."""
    rank = getattr(getattr(x, "type", None), "rank", 0)
    # (a scalar x is the IR rule's to refuse: it names the rank it needs)
    if not (isinstance(axis, int) and not isinstance(axis, bool)) or (
            rank and axis not in (-1, rank - 1)):
        raise _at(_user_location(), WorkbenchError(
            f"TopK's axis must be the last axis (-1 or {rank - 1} for a tensor of rank {rank}),"
            f" got {axis!r}; move the axis last (its rows are what a warp sorts), e.g. compute "
            "the scores as [tokens, experts]"))
    idx_name = None if name is None else f"{_trace.check_name('statement', name)}_idx"
    values = _stmt(lambda a: ir.TopK(a[0], k, "values"), [x], [False], name)
    indices = _stmt(lambda a: ir.TopK(a[0], k, "indices"), [x], [False], idx_name)
    return values, indices


def Update(target, value, name: str | None = None) -> StmtNode:
    """Assign `value` to the existing tensor `target` in place (an optimizer update)."""
    if not isinstance(target, (InputNode, StmtNode)):
        raise WorkbenchError("Update target must be a declared tensor or a statement result, "
                             f"got {type(target).__name__}")
    return _stmt(lambda a: ir.Update(a[0], a[1]), [target, value], [False, True], name)


def Compute(value, name: str | None = None) -> StmtNode:
    """Materialise an elementwise expression as its own statement (its own kernel)."""
    return _stmt(lambda a: ir.Compute(a[0]), [value], [True], name)
