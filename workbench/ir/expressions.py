"""Values and elementwise expressions of the IR: reduction operators, symbolic size helpers,
`Value`, the expression nodes (Ref, Const, Binary, Unary, Cast, Dropout) with their type rule
(`expr_type`, broadcasting and layouts) and printed form.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum

import sympy

from workbench.errors import DTypeError, LayoutError, ShapeError, VerifyError
from workbench.types import (
    DType,
    Local,
    LocalLayout,
    NodeSliced,
    OnRoot,
    ReplicatedLayout,
    Shape,
    Sliced,
    TensorType,
    promote,
    shape_str,
)


class ReduceOp(Enum):
    """The reduction of a collective or of ReduceTensor."""

    Sum = "Sum"
    Max = "Max"
    Min = "Min"
    Prod = "Prod"

    def __str__(self) -> str:
        return self.value


def proven_equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    """True only when sympy proves a == b; 'cannot decide' counts as not proven."""
    if a == b:
        return True
    return _simplifies_to_zero(sympy.sympify(a) - sympy.sympify(b))


# The proofs are pure functions of hashable sympy values, asked again and again of the same
# few sizes (the autotuner verifies every candidate: 460 proofs of 2 distinct questions for
# adam on 32 GPUs, 7 of its 8 s in sympy.simplify): each is proven once per process.
@functools.lru_cache(maxsize=4096)
def _simplifies_to_zero(expr: sympy.Expr) -> bool:
    return sympy.simplify(expr) == 0


def proven_divisible(expr: sympy.Expr, by: sympy.Expr, facts: Facts) -> bool:
    """True when expr / by is provably an integer, given the `multiple_of` facts of sizes.

    Each fact (N, m) says N is a multiple of m: substitute N -> m * N_q with a fresh positive
    integer N_q and ask sympy whether the quotient is an integer.
    """
    return _proven_divisible(sympy.sympify(expr), sympy.sympify(by),
                             tuple((sympy.sympify(s), sympy.sympify(m)) for s, m in facts))


@functools.lru_cache(maxsize=4096)
def _proven_divisible(expr: sympy.Expr, by: sympy.Expr, facts: Facts) -> bool:
    subs = {sym: multiple * sympy.Symbol(f"{sym.name}__q", integer=True, positive=True)
            for sym, multiple in facts}
    quotient = sympy.sympify(expr) / sympy.sympify(by)
    # Facts chain (N a multiple of P, P of the ranks per node): substitute until none applies.
    for _ in range(len(facts)):
        quotient = quotient.subs(subs)
    return bool(sympy.simplify(quotient).is_integer)


Facts = tuple[tuple[sympy.Symbol, sympy.Expr], ...]


@dataclass(frozen=True, slots=True)
class Value:
    """A named SSA value and its type."""

    name: str
    type: TensorType

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Ref:
    """A use of an earlier value inside an elementwise expression."""

    name: str


@dataclass(frozen=True, slots=True)
class Const:
    """A literal number; it takes the dtype of the tensor it meets (a 'weak' scalar)."""

    value: float


BINARY_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "max": "max",
              "min": "min", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}

# Comparisons give a mask: 1 where true, 0 where false, in the operands' dtype (what Where
# reads as its condition: nonzero selects the first branch).
COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")


UNARY_OPS = ("neg", "sqrt", "rsqrt", "exp", "log", "abs", "tanh", "erf", "sigmoid")


@dataclass(frozen=True, slots=True)
class Binary:
    """a <op> b, elementwise with numpy (trailing-dimension) broadcasting."""

    op: str
    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True)
class Unary:
    """fn(a), elementwise."""

    fn: str
    a: Expr


@dataclass(frozen=True, slots=True)
class Cast:
    """Convert a to `dtype` (round to nearest even, as CUDA's __float2half_rn does)."""

    dtype: DType
    a: Expr


@dataclass(frozen=True, slots=True)
class Dropout:
    """Zero each element with probability p, scale the rest by 1/(1-p).

    The mask is a counter-based hash of (seed, global element index), so it does not depend on
    how a tensor is sliced over ranks or chunked over thread blocks: a transform that moves the
    dropout onto slices keeps the mask, and the GPU kernel computes the same mask.
    """

    p: float
    seed: int
    a: Expr


@dataclass(frozen=True, slots=True)
class Where:
    """a where cond is nonzero, else b (elementwise, broadcast over all three)."""

    cond: Expr
    a: Expr
    b: Expr


@dataclass(frozen=True, slots=True)
class SizeValue:
    """A size expression used as a number (`x / H`, `x * (1 / sqrt(H))`): a weak scalar like
    Const whose value is known once the sizes are bound. Evaluated in double precision and
    rounded once to f32, by the interpreter and by the kernel (sizes are kernel parameters)."""

    expr: sympy.Expr


Expr = Ref | Const | Binary | Unary | Cast | Dropout | Where | SizeValue


def expr_nodes(expr: Expr) -> Iterator[Expr]:
    """Every node of an expression tree, parents before their children."""
    yield expr
    match expr:
        case Binary(_, a, b):
            yield from expr_nodes(a)
            yield from expr_nodes(b)
        case Unary(_, a) | Cast(_, a) | Dropout(_, _, a):
            yield from expr_nodes(a)
        case Where(c, a, b):
            yield from expr_nodes(c)
            yield from expr_nodes(a)
            yield from expr_nodes(b)


def expr_refs(expr: Expr) -> Iterator[str]:
    """Names of the values an expression reads, in first-use order, with repeats."""
    match expr:
        case Ref(name):
            yield name
        case Const() | SizeValue():
            return
        case Binary(_, a, b):
            yield from expr_refs(a)
            yield from expr_refs(b)
        case Unary(_, a) | Cast(_, a) | Dropout(_, _, a):
            yield from expr_refs(a)
        case Where(c, a, b):
            yield from expr_refs(c)
            yield from expr_refs(a)
            yield from expr_refs(b)


def rename_expr(expr: Expr, mapping: Mapping[str, str]) -> Expr:
    """The expression with each Ref renamed through `mapping` (names not in it are kept)."""
    match expr:
        case Ref(name):
            return Ref(mapping.get(name, name))
        case Const() | SizeValue():
            return expr
        case Binary(op, a, b):
            return Binary(op, rename_expr(a, mapping), rename_expr(b, mapping))
        case Where(c, a, b):
            return Where(rename_expr(c, mapping), rename_expr(a, mapping),
                         rename_expr(b, mapping))
        case Unary(fn, a):
            return Unary(fn, rename_expr(a, mapping))
        case Cast(dtype, a):
            return Cast(dtype, rename_expr(a, mapping))
        case Dropout(p, seed, a):
            return Dropout(p, seed, rename_expr(a, mapping))
    raise TypeError(f"not an expression: {expr!r}")


def _broadcast_shapes(a: Shape, b: Shape, what: str) -> Shape:
    """numpy broadcasting over trailing dims; dims must be proven equal or be literally 1."""
    out = []
    width = max(len(a), len(b))
    for i in range(1, width + 1):
        da = a[-i] if i <= len(a) else sympy.Integer(1)
        db = b[-i] if i <= len(b) else sympy.Integer(1)
        if da == 1:
            out.append(db)
        elif db == 1 or proven_equal(da, db):
            out.append(da)
        else:
            raise ShapeError(
                f"{what}: shapes must match or broadcast, got {shape_str(a)} and {shape_str(b)} "
                f"(dim {width - i} is {da} vs {db}); reshape or slice one operand"
            )
    return tuple(reversed(out))


def _sliced_dim_in(layout, operand_rank: int, result_rank: int):
    """A Sliced operand's dim counted in the broadcast result's dims."""
    if isinstance(layout, NodeSliced):
        return NodeSliced(layout.dim + result_rank - operand_rank, layout.per_node,
                          layout.reduced)
    return Sliced(layout.dim + result_rank - operand_rank) if isinstance(layout, Sliced) else layout


def combine_layouts(a, b, what: str):
    """Layout of an elementwise op on operands of layouts a and b (already in result dims)."""
    if a == b:
        return a
    pair = {type(a), type(b)}
    if pair == {ReplicatedLayout, LocalLayout}:
        return Local
    if pair == {ReplicatedLayout, NodeSliced} and (a.reduced if isinstance(a, NodeSliced)
                                                    else b.reduced):
        return a if not isinstance(a, ReplicatedLayout) else b
    if ReplicatedLayout in pair and (Sliced in pair or OnRoot in pair):
        return a if not isinstance(a, ReplicatedLayout) else b
    if pair == {Sliced}:
        raise LayoutError(
            f"{what}: Sliced operands must be sliced along the same dim, got {a} and {b}; "
            "AllGather one of them first"
        )
    if OnRoot in pair:
        on = a if isinstance(a, OnRoot) else b
        other = b if on is a else a
        fix = (f"Reduce the Local one onto rank {on.root} first (Reduce(op, x, root="
               f"{on.root})), or Broadcast the OnRoot one (Broadcast(x, {on.root}))"
               if isinstance(other, LocalLayout) else
               f"Broadcast the OnRoot one first (Broadcast(x, {on.root}))")
        raise LayoutError(
            f"{what}: an OnRoot value (held by rank {on.root} only) must meet Replicated "
            f"values or values on the same root, got {a} and {b}; {fix}")
    raise LayoutError(
        f"{what}: operands of layouts {a} and {b} cannot be combined elementwise; a Local "
        "value must be reduced (AllReduce or ReduceScatter) before it meets a Sliced one"
    )


# The type of a weak scalar literal: it has no dtype, shape or group of its own.
WEAK = None


def expr_type(expr: Expr, env: Mapping[str, TensorType], what: str) -> TensorType | None:
    """Infer the type of an elementwise expression; None for an expression of literals only."""
    match expr:
        case Ref(name):
            if name not in env:
                raise VerifyError(f"{what}: value '{name}' must be defined before use")
            return env[name]
        case Const() | SizeValue():
            return WEAK
        case Where(c, a, b):
            tab = _binary_type(expr_type(a, env, what), expr_type(b, env, what), what)
            tc = expr_type(c, env, what)
            if tc is not WEAK and tab is not WEAK:
                tc = tc.with_(dtype=tab.dtype)  # a mask (1/0): its dtype types nothing
            t = _binary_type(tc, tab, what)
            return t if tab is WEAK or t is WEAK else t.with_(dtype=tab.dtype)
        case Unary(fn, a):
            if fn not in UNARY_OPS:
                raise VerifyError(f"{what}: unary function must be one of {UNARY_OPS}, got {fn}")
            return expr_type(a, env, what)
        case Cast(dtype, a):
            t = expr_type(a, env, what)
            return WEAK if t is WEAK else t.with_(dtype=dtype)
        case Dropout(p, _, a):
            if not 0.0 <= p < 1.0:
                raise VerifyError(f"{what}: dropout probability must be in [0, 1), got {p}")
            return expr_type(a, env, what)
        case Binary(op, a, b):
            if op not in BINARY_OPS:
                raise VerifyError(f"{what}: binary op must be one of {list(BINARY_OPS)}, got {op}")
            return _binary_type(expr_type(a, env, what), expr_type(b, env, what), what)
    raise TypeError(f"not an expression: {expr!r}")


def _binary_type(ta: TensorType | None, tb: TensorType | None, what: str) -> TensorType | None:
    if ta is WEAK or tb is WEAK:
        return tb if ta is WEAK else ta
    if ta.group != tb.group:
        raise LayoutError(
            f"{what}: operands must be in the same process group, got {ta.group} and {tb.group}; "
            "Send the value to the other group first"
        )
    shape = _broadcast_shapes(ta.shape, tb.shape, what)
    # Rank-0 operands (scalars such as a learning rate) do not widen the result's dtype.
    if ta.rank == 0 and tb.rank > 0:
        dtype = tb.dtype
    elif tb.rank == 0 and ta.rank > 0:
        dtype = ta.dtype
    else:
        try:
            dtype = promote(ta.dtype, tb.dtype)
        except DTypeError as e:
            raise DTypeError(f"{what}: {e}") from None
    layout = combine_layouts(
        _sliced_dim_in(ta.layout, ta.rank, len(shape)),
        _sliced_dim_in(tb.layout, tb.rank, len(shape)),
        what,
    )
    return TensorType(dtype, shape, layout, ta.group)


_PRECEDENCE = {"lt": 0.5, "le": 0.5, "gt": 0.5, "ge": 0.5, "eq": 0.5, "ne": 0.5,
               "add": 1, "sub": 1, "mul": 2, "div": 2, "pow": 4}


def format_expr(expr: Expr, parent: int = 0) -> str:
    """Print an expression with the fewest parentheses that keep its meaning."""
    match expr:
        case Ref(name):
            return name
        case Const(v):
            text = repr(float(v)) if not float(v).is_integer() else str(int(v))
            return f"({text})" if v < 0 else text
        case SizeValue(e):
            return f"size({e})"
        case Where(c, a, b):
            return f"where({format_expr(c)}, {format_expr(a)}, {format_expr(b)})"
        case Unary("neg", a):
            return f"-{format_expr(a, 3)}"
        case Unary(fn, a):
            return f"{fn}({format_expr(a)})"
        case Cast(dtype, a):
            return f"Cast({dtype}, {format_expr(a)})"
        case Dropout(p, seed, a):
            return f"Dropout({format_expr(a)}, p={p}, seed={seed})"
        case Binary(op, a, b) if op in ("max", "min"):
            return f"{op}({format_expr(a)}, {format_expr(b)})"
        case Binary(op, a, b):
            prec = _PRECEDENCE[op]
            # Print the tree exactly: at equal precedence the right operand (the left one, for
            # the right-associative **) gets parentheses, so a * (b / c) stays as written.
            left, right = (prec + 1, prec) if op == "pow" else (prec, prec + 1)
            text = f"{format_expr(a, left)} {BINARY_OPS[op]} {format_expr(b, right)}"
            return f"({text})" if prec < parent else text
    raise TypeError(f"not an expression: {expr!r}")

