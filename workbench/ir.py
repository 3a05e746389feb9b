"""The symbolic IR: values, elementwise expressions, ops (one class each, with its type rule),
statements and programs.

A Program is straight-line SSA: `inputs`, then `stmts` in order, then `outputs`. Each statement
defines one or more named values. Elementwise arithmetic lives inside `Compute` and `Update`
statements as an expression tree over earlier values, so one statement is one kernel in the
unscheduled program. Transforms (workbench.transforms) rewrite programs into programs; fused
kernels are statements whose op (`Fused`, `Overlapped`) holds a body of ordinary statements that
one kernel executes, so their meaning is always "run the body in order".

Every class here is a frozen, slotted dataclass holding tuples, so programs compare and hash
structurally and a transform can never mutate its input.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum

import sympy

from workbench.errors import DTypeError, LayoutError, ShapeError, VerifyError
from workbench.types import (
    DType,
    Group,
    Local,
    LocalLayout,
    OnRoot,
    Replicated,
    ReplicatedLayout,
    Shape,
    Sliced,
    TensorType,
    float32,
    promote,
    shape_str,
)

# ---------------------------------------------------------------- reduction operators


class ReduceOp(Enum):
    """The reduction of a collective or of ReduceTensor."""

    Sum = "Sum"
    Max = "Max"
    Min = "Min"
    Prod = "Prod"

    def __str__(self) -> str:
        return self.value


# ---------------------------------------------------------------- symbolic helpers


def proven_equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    """True only when sympy proves a == b; 'cannot decide' counts as not proven."""
    if a == b:
        return True
    return sympy.simplify(a - b) == 0


def proven_divisible(expr: sympy.Expr, by: sympy.Expr, facts: Facts) -> bool:
    """True when expr / by is provably an integer, given the `multiple_of` facts of sizes.

    Each fact (N, m) says N is a multiple of m: substitute N -> m * N_q with a fresh positive
    integer N_q and ask sympy whether the quotient is an integer.
    """
    subs = {sym: multiple * sympy.Symbol(f"{sym.name}__q", integer=True, positive=True)
            for sym, multiple in facts}
    quotient = sympy.simplify(sympy.sympify(expr).subs(subs) / sympy.sympify(by).subs(subs))
    return bool(quotient.is_integer)


Facts = tuple[tuple[sympy.Symbol, sympy.Expr], ...]


# ---------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class Value:
    """A named SSA value and its type."""

    name: str
    type: TensorType

    def __str__(self) -> str:
        return self.name


# ---------------------------------------------------------------- elementwise expressions


@dataclass(frozen=True, slots=True)
class Ref:
    """A use of an earlier value inside an elementwise expression."""

    name: str


@dataclass(frozen=True, slots=True)
class Const:
    """A literal number; it takes the dtype of the tensor it meets (a 'weak' scalar)."""

    value: float


BINARY_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "max": "max",
              "min": "min"}
UNARY_OPS = ("neg", "sqrt", "rsqrt", "exp", "log", "abs")


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


Expr = Ref | Const | Binary | Unary | Cast | Dropout


def expr_nodes(expr: Expr) -> Iterator[Expr]:
    """Every node of an expression tree, parents before their children."""
    yield expr
    match expr:
        case Binary(_, a, b):
            yield from expr_nodes(a)
            yield from expr_nodes(b)
        case Unary(_, a) | Cast(_, a) | Dropout(_, _, a):
            yield from expr_nodes(a)


def expr_refs(expr: Expr) -> Iterator[str]:
    """Names of the values an expression reads, in first-use order, with repeats."""
    match expr:
        case Ref(name):
            yield name
        case Const():
            return
        case Binary(_, a, b):
            yield from expr_refs(a)
            yield from expr_refs(b)
        case Unary(_, a) | Cast(_, a) | Dropout(_, _, a):
            yield from expr_refs(a)


def rename_expr(expr: Expr, mapping: Mapping[str, str]) -> Expr:
    """The expression with each Ref renamed through `mapping` (names not in it are kept)."""
    match expr:
        case Ref(name):
            return Ref(mapping.get(name, name))
        case Const():
            return expr
        case Binary(op, a, b):
            return Binary(op, rename_expr(a, mapping), rename_expr(b, mapping))
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
    return Sliced(layout.dim + result_rank - operand_rank) if isinstance(layout, Sliced) else layout


def combine_layouts(a, b, what: str):
    """Layout of an elementwise op on operands of layouts a and b (already in result dims)."""
    if a == b:
        return a
    pair = {type(a), type(b)}
    if pair == {ReplicatedLayout, LocalLayout}:
        return Local
    if ReplicatedLayout in pair and (Sliced in pair or OnRoot in pair):
        return a if not isinstance(a, ReplicatedLayout) else b
    if pair == {Sliced}:
        raise LayoutError(
            f"{what}: Sliced operands must be sliced along the same dim, got {a} and {b}; "
            "AllGather one of them first"
        )
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
        case Const():
            return WEAK
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


_PRECEDENCE = {"add": 1, "sub": 1, "mul": 2, "div": 2, "pow": 4}


def format_expr(expr: Expr, parent: int = 0) -> str:
    """Print an expression with the fewest parentheses that keep its meaning."""
    match expr:
        case Ref(name):
            return name
        case Const(v):
            text = repr(float(v)) if not float(v).is_integer() else str(int(v))
            return f"({text})" if v < 0 else text
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


# ---------------------------------------------------------------- ops


def _require_layout(what: str, t: TensorType, allowed: tuple, fix: str) -> None:
    if not isinstance(t.layout, allowed):
        names = " or ".join(a.__name__.replace("Layout", "") for a in allowed)
        raise LayoutError(f"{what}: input must be {names}, got {t.layout}; {fix}")


@dataclass(frozen=True, slots=True)
class Compute:
    """An elementwise expression computed into a new tensor (one kernel)."""

    expr: Expr

    def operands(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(expr_refs(self.expr)))

    def rename(self, m: Mapping[str, str]) -> Compute:
        return Compute(rename_expr(self.expr, m))

    def infer(self, env: Mapping[str, TensorType], what: str) -> TensorType:
        t = expr_type(self.expr, env, what)
        if t is WEAK:
            raise VerifyError(f"{what}: a computation must read at least one tensor, got only "
                              "literals; use a Variable for a runtime scalar")
        return t

    def __str__(self) -> str:
        return format_expr(self.expr)


@dataclass(frozen=True, slots=True)
class Update:
    """Assign an expression to an existing tensor in place: w1 = Update(w, w - lr * g).

    The result has the target's dtype (the expression is cast, as in-place ops do) and the
    expression's layout: a Sliced expression updates only each rank's own slice.
    """

    target: str
    expr: Expr

    def operands(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.target, *expr_refs(self.expr))))

    def rename(self, m: Mapping[str, str]) -> Update:
        return Update(m.get(self.target, self.target), rename_expr(self.expr, m))

    def infer(self, env: Mapping[str, TensorType], what: str) -> TensorType:
        if self.target not in env:
            raise VerifyError(f"{what}: update target '{self.target}' must be defined before use")
        target = env[self.target]
        t = expr_type(self.expr, env, what)
        if t is WEAK:
            return target
        if t.group != target.group:
            raise LayoutError(f"{what}: the new value must be in the target's group "
                              f"{target.group}, got {t.group}")
        if len(t.shape) != len(target.shape) or not all(
            proven_equal(a, b) for a, b in zip(t.shape, target.shape)
        ):
            raise ShapeError(f"{what}: the new value must have the target's shape "
                             f"{shape_str(target.shape)}, got {shape_str(t.shape)}")
        layout = t.layout
        if isinstance(target.layout, ReplicatedLayout) and isinstance(layout, LocalLayout):
            raise LayoutError(
                f"{what}: a Replicated target must be updated with a Replicated or Sliced value, "
                "got Local; its replicas would diverge: AllReduce the value first"
            )
        if isinstance(target.layout, Sliced) and layout != target.layout and not isinstance(
            layout, ReplicatedLayout
        ):
            raise LayoutError(f"{what}: a {target.layout} target must be updated with a value "
                              f"of the same layout, got {layout}")
        if isinstance(target.layout, Sliced) and isinstance(layout, ReplicatedLayout):
            layout = target.layout
        return target.with_(layout=layout)

    def __str__(self) -> str:
        return f"Update({self.target}, {format_expr(self.expr)})"


@dataclass(frozen=True, slots=True)
class AllReduce:
    """Reduce a Local tensor over the group; every rank gets the Replicated result."""

    op: ReduceOp
    x: str

    def operands(self) -> tuple[str, ...]:
        return (self.x,)

    def rename(self, m):
        return AllReduce(self.op, m.get(self.x, self.x))

    def infer(self, env, what):
        t = env[self.x]
        _require_layout(what, t, (LocalLayout,), "only per-rank (Local) values need reducing")
        return t.with_(layout=Replicated)

    def __str__(self):
        return f"AllReduce({self.op}, {self.x})"


@dataclass(frozen=True, slots=True)
class ReduceScatter:
    """Reduce a Local tensor over the group; rank r gets slice r (Sliced(dim))."""

    op: ReduceOp
    x: str
    dim: int = 0

    def operands(self):
        return (self.x,)

    def rename(self, m):
        return ReduceScatter(self.op, m.get(self.x, self.x), self.dim)

    def infer(self, env, what):
        t = env[self.x]
        _require_layout(what, t, (LocalLayout,), "only per-rank (Local) values need reducing")
        if not 0 <= self.dim < t.rank:
            raise ShapeError(f"{what}: dim must be in [0, {t.rank}), got {self.dim}")
        return t.with_(layout=Sliced(self.dim))

    def __str__(self):
        return f"ReduceScatter({self.op}, {self.x}" + (f", dim={self.dim})" if self.dim else ")")


@dataclass(frozen=True, slots=True)
class AllGather:
    """Gather the slices of a Sliced tensor; every rank gets the whole (Replicated) tensor."""

    x: str

    def operands(self):
        return (self.x,)

    def rename(self, m):
        return AllGather(m.get(self.x, self.x))

    def infer(self, env, what):
        t = env[self.x]
        _require_layout(what, t, (Sliced,), "gather only what is sliced")
        return t.with_(layout=Replicated)

    def __str__(self):
        return f"AllGather({self.x})"


@dataclass(frozen=True, slots=True)
class Broadcast:
    """Copy rank `root`'s tensor to every rank."""

    x: str
    root: int = 0

    def operands(self):
        return (self.x,)

    def rename(self, m):
        return Broadcast(m.get(self.x, self.x), self.root)

    def infer(self, env, what):
        t = env[self.x]
        _require_layout(what, t, (LocalLayout, OnRoot), "broadcast a per-rank value")
        return t.with_(layout=Replicated)

    def __str__(self):
        return f"Broadcast({self.x}, root={self.root})"


@dataclass(frozen=True, slots=True)
class Reduce:
    """Reduce a Local tensor over the group onto rank `root` only."""

    op: ReduceOp
    x: str
    root: int = 0

    def operands(self):
        return (self.x,)

    def rename(self, m):
        return Reduce(self.op, m.get(self.x, self.x), self.root)

    def infer(self, env, what):
        t = env[self.x]
        _require_layout(what, t, (LocalLayout,), "only per-rank (Local) values need reducing")
        return t.with_(layout=OnRoot(self.root))

    def __str__(self):
        return f"Reduce({self.op}, {self.x}, root={self.root})"


@dataclass(frozen=True, slots=True)
class Send:
    """Send each rank's tensor to the same rank of the next pipeline stage's group."""

    x: str
    dst: Group

    def operands(self):
        return (self.x,)

    def rename(self, m):
        return Send(m.get(self.x, self.x), self.dst)

    def infer(self, env, what):
        t = env[self.x]
        if t.group == self.dst:
            raise LayoutError(f"{what}: Send must go to another group, got its own {self.dst}")
        if not proven_equal(t.group.size, self.dst.size):
            raise LayoutError(f"{what}: the destination group must have the source's size "
                              f"{t.group.size}, got {self.dst}")
        return t.with_(group=self.dst)

    def __str__(self):
        return f"Send({self.x}, to={self.dst.name})"


@dataclass(frozen=True, slots=True)
class Slice:
    """Each rank takes its own slice of a Replicated tensor: Replicated -> Sliced(dim).

    No data moves (a view at an offset); schedules insert it so that a reduction such as
    Norm(w) runs on 1/P of the data once the update it feeds runs on slices.
    """

    x: str
    dim: int = 0

    def operands(self):
        return (self.x,)

    def rename(self, m):
        return Slice(m.get(self.x, self.x), self.dim)

    def infer(self, env, what):
        t = env[self.x]
        if t.layout == Sliced(self.dim):
            return t  # already each rank's own slice (an as-slice'd input): the view is itself
        _require_layout(what, t, (ReplicatedLayout,), "only a Replicated tensor can be viewed "
                        "as slices; a Local one must be reduced (ReduceScatter)")
        if not 0 <= self.dim < t.rank:
            raise ShapeError(f"{what}: dim must be in [0, {t.rank}), got {self.dim}")
        return t.with_(layout=Sliced(self.dim))

    def __str__(self):
        return f"Slice({self.x}" + (f", dim={self.dim})" if self.dim else ")")


@dataclass(frozen=True, slots=True)
class MatMul:
    """a @ b for a of shape [..., M, K] and a 2-D b of shape [K, N], with Megatron's layouts.

    Replicated x Sliced(1) -> Sliced(last)   (column-parallel: each rank owns output columns)
    Sliced(last) x Sliced(0) -> Local       (row-parallel: partial sums, AllReduce them)
    Sliced(0) x Replicated -> Sliced(0)      (data-parallel rows)
    Replicated x Replicated -> Replicated;  Local x Replicated -> Local
    """

    a: str
    b: str

    def operands(self):
        return (self.a, self.b)

    def rename(self, m):
        return MatMul(m.get(self.a, self.a), m.get(self.b, self.b))

    def infer(self, env, what):
        ta, tb = env[self.a], env[self.b]
        if ta.group != tb.group:
            raise LayoutError(f"{what}: operands must be in the same group, got {ta.group} and "
                              f"{tb.group}")
        if ta.rank < 2 or tb.rank != 2:
            raise ShapeError(f"{what}: operands must be [..., M, K] and [K, N], got "
                             f"{shape_str(ta.shape)} and {shape_str(tb.shape)}")
        if not proven_equal(ta.shape[-1], tb.shape[0]):
            raise ShapeError(f"{what}: inner dims must match, got {shape_str(ta.shape)} @ "
                             f"{shape_str(tb.shape)} ({ta.shape[-1]} vs {tb.shape[0]})")
        if ta.dtype != tb.dtype:
            raise DTypeError(f"{what}: operands must share a dtype, got {ta.dtype} and "
                             f"{tb.dtype}; Cast one of them")
        shape = ta.shape[:-1] + (tb.shape[1],)
        last = len(shape) - 1
        la, lb = ta.layout, tb.layout
        rules = {
            (ReplicatedLayout, ReplicatedLayout): Replicated,
            (LocalLayout, ReplicatedLayout): Local,
            (ReplicatedLayout, LocalLayout): Local,
            (LocalLayout, LocalLayout): Local,
        }
        key = (type(la), type(lb))
        if key in rules:
            layout = rules[key]
        elif isinstance(la, ReplicatedLayout) and lb == Sliced(1):
            layout = Sliced(last)
        elif la == Sliced(ta.rank - 1) and lb == Sliced(0):
            layout = Local
        elif isinstance(la, Sliced) and la.dim < ta.rank - 1 and isinstance(lb, ReplicatedLayout):
            layout = la
        else:
            raise LayoutError(
                f"{what}: layouts {la} @ {lb} are not a supported parallel MatMul; use "
                "Replicated @ Sliced(1) (column-parallel), Sliced(last) @ Sliced(0) "
                "(row-parallel, then AllReduce) or Sliced(0) @ Replicated"
            )
        return TensorType(ta.dtype, shape, layout, ta.group)

    def __str__(self):
        return f"MatMul({self.a}, {self.b})"


@dataclass(frozen=True, slots=True)
class ReduceTensor:
    """Reduce all elements of a tensor to a scalar (accumulated in f32).

    Over a Sliced tensor each rank reduces its slice and the partials are all-reduced, so the
    result is Replicated: this op communicates when its input is Sliced.
    """

    op: ReduceOp
    x: str

    def operands(self):
        return (self.x,)

    def rename(self, m):
        return ReduceTensor(self.op, m.get(self.x, self.x))

    def infer(self, env, what):
        return _reduction_type(env[self.x])

    def __str__(self):
        return f"ReduceTensor({self.op}, {self.x})"


@dataclass(frozen=True, slots=True)
class Norm:
    """The L2 norm of a tensor, a scalar in f32; over a Sliced tensor it all-reduces the
    partial sums of squares (so it communicates)."""

    x: str

    def operands(self):
        return (self.x,)

    def rename(self, m):
        return Norm(m.get(self.x, self.x))

    def infer(self, env, what):
        return _reduction_type(env[self.x])

    def __str__(self):
        return f"Norm({self.x})"


def _reduction_type(t: TensorType) -> TensorType:
    layout = Replicated if isinstance(t.layout, Sliced) else t.layout
    return TensorType(float32, (), layout, t.group)


# Fused kernels: what each kind's body must look like, stage by stage (see Fused.infer).
FUSED_KINDS = ("compute", "allreduce", "reducescatter", "allgather", "send")


@dataclass(frozen=True, slots=True)
class Fused:
    """Several statements executed by one kernel; meaning: run `body` in order.

    kind          | body pattern; C = elementwise (Compute, Update) or a reduction on slices
    --------------+----------------------------------------------------------------------
    compute       | C C+                      consecutive elementwise kernels as one
    allreduce     | ReduceScatter C* AllGather+   CoCoNet's FusedAllReduce
    reducescatter | ReduceScatter C+          the reduced slice is consumed in-kernel
    allgather     | C+ AllGather+             computed slices are gathered in-kernel
    send          | [ReduceScatter] C* Send   computation fused into the P2P transfer

    "Reduction on slices" is Slice, Norm or ReduceTensor: a norm inside a fused collective
    needs a grid-wide, cross-GPU reduction of one scalar between the kernel's phases.
    """

    kind: str
    body: tuple[Stmt, ...]
    # Who moves a fused collective's bytes: "sm", the kernel itself by NVLink peer loads and
    # stores (CoCoNet's fused collectives); "copy", the GPU's copy engines, `chunks` pieces of
    # each rank's slice at a time, while a kernel without communication computes on the
    # pieces that have arrived (transforms.CopyEngines). Time, not meaning.
    engine: str = "sm"
    chunks: int = 1

    def operands(self):
        defined, used = set(), []
        for s in self.body:
            used += [n for n in s.op.operands() if n not in defined]
            defined.update(v.name for v in s.outs)
        return tuple(dict.fromkeys(used))

    def rename(self, m):
        return Fused(self.kind, tuple(s.rename(m) for s in self.body), self.engine, self.chunks)

    def __str__(self):
        via = f"[copy engines, chunks={self.chunks}]" if self.engine == "copy" else ""
        return f"Fused{self.kind.capitalize()}{via}"


@dataclass(frozen=True, slots=True)
class Overlapped:
    """Producer and consumer kernels that run concurrently, chunk by chunk.

    The body is [producer, consumer]: chunk i of the consumer starts when chunk i of the
    producer is done (CoCoNet's overlap of a MatMul with the AllReduce of its output).
    Meaning: run the body in order; `chunks` changes time, not values.
    """

    chunks: int
    body: tuple[Stmt, ...]

    def operands(self):
        return Fused.operands(self)  # same rule: uses not defined earlier in the body

    def rename(self, m):
        return Overlapped(self.chunks, tuple(s.rename(m) for s in self.body))

    def __str__(self):
        return f"Overlapped(chunks={self.chunks})"


Op = (Compute | Update | AllReduce | ReduceScatter | AllGather | Broadcast | Reduce | Send
      | Slice | MatMul | ReduceTensor | Norm | Fused | Overlapped)
COMMUNICATION_OPS = (AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, Send)
ELEMENTWISE_OPS = (Compute, Update)
REGION_OPS = (Fused, Overlapped)
# What may sit between the collective stages of a fused kernel.
FUSABLE_COMPUTATION = (Compute, Update, Slice, Norm, ReduceTensor)


# ---------------------------------------------------------------- statements and programs


@dataclass(frozen=True, slots=True)
class Stmt:
    """`outs = op`. A plain op defines one value; a Fused/Overlapped op defines every value
    of its body. `loc` is where the user wrote it (file:line), kept out of equality."""

    outs: tuple[Value, ...]
    op: Op
    loc: str = field(default="", compare=False)

    @property
    def out(self) -> Value:
        if len(self.outs) != 1:
            raise ValueError(f"statement defines {len(self.outs)} values, not one")
        return self.outs[0]

    @property
    def name(self) -> str:
        return self.outs[0].name if len(self.outs) == 1 else ",".join(v.name for v in self.outs)

    def rename(self, m: Mapping[str, str]) -> Stmt:
        """Rename the values this statement reads (not the ones it defines)."""
        return Stmt(self.outs, self.op.rename(m), self.loc)

    def leaves(self) -> Iterator[Stmt]:
        """The plain statements inside, in execution order (itself if it is plain)."""
        if isinstance(self.op, REGION_OPS):
            for s in self.op.body:
                yield from s.leaves()
        else:
            yield self


@dataclass(frozen=True, slots=True)
class Program:
    """A distributed program: inputs, straight-line statements, outputs.

    `facts` holds what the user declared about sizes: (N, m) means N is a multiple of m, which
    is what proves a Sliced dim divisible by the group size.
    """

    name: str
    inputs: tuple[Value, ...]
    stmts: tuple[Stmt, ...]
    outputs: tuple[Value, ...]
    facts: Facts = ()
    # Where random test inputs are drawn from, per input: (name, low, high); e.g. a second
    # moment must be >= 0. Inputs not listed draw from a standard normal.
    input_ranges: tuple[tuple[str, float, float], ...] = ()

    def groups(self) -> tuple[Group, ...]:
        seen = dict.fromkeys(v.type.group for v in self.all_values())
        return tuple(seen)

    def all_values(self) -> Iterator[Value]:
        yield from self.inputs
        for s in self.stmts:
            yield from s.outs

    def value(self, name: str) -> Value:
        for v in self.all_values():
            if v.name == name:
                return v
        raise KeyError(name)

    def stmt_defining(self, name: str) -> Stmt:
        """The top-level statement that defines `name` (a region, if it is defined inside one)."""
        for s in self.stmts:
            if any(v.name == name for v in s.outs):
                return s
        raise KeyError(name)

    def leaves(self) -> Iterator[Stmt]:
        for s in self.stmts:
            yield from s.leaves()

    def dead_after(self, name: str, leaf: Stmt) -> bool:
        """No leaf after `leaf` reads `name`, and it is no program output: a collective on
        `name` at `leaf` may then run in place (the GPU backend's storage rule, which the cost
        model must price alike)."""
        leaves = list(self.leaves())
        later = leaves[next(i for i, s in enumerate(leaves) if s is leaf) + 1:]
        return (not any(name in s.op.operands() for s in later)
                and not any(v.name == name for v in self.outputs))

    def symbols(self) -> tuple[sympy.Symbol, ...]:
        """Every size symbol the program's types use, sorted by name (group sizes included)."""
        syms: set[sympy.Symbol] = set()
        for v in self.all_values():
            for d in (*v.type.shape, v.type.group.size):
                syms |= sympy.sympify(d).free_symbols
        return tuple(sorted(syms, key=lambda s: s.name))

    def with_stmts(self, stmts, outputs=None, inputs=None) -> Program:
        return Program(self.name, tuple(inputs if inputs is not None else self.inputs),
                       tuple(stmts), tuple(outputs if outputs is not None else self.outputs),
                       self.facts, self.input_ranges)

    def __str__(self) -> str:
        return format_program(self)


# ---------------------------------------------------------------- printed form
# The stable printed form of a program (what `workbench show` prints and golden tests pin):
#
#     program sgd(N, P) where N % P == 0
#       in  g: f32[N] Local
#       g1 = AllReduce(Sum, g)                       : f32[N] Replicated
#       out w1
#
# It lives beside Program, whose __str__ it is, so the IR has no import circle.

_TYPE_COLUMN = 48


def _format_stmt(stmt: Stmt, indent: str) -> list[str]:
    if isinstance(stmt.op, (Fused, Overlapped)):
        lines = [f"{indent}{', '.join(v.name for v in stmt.outs)} = {stmt.op} {{"]
        for inner in stmt.op.body:
            lines += _format_stmt(inner, indent + "  ")
        return lines + [f"{indent}}}"]
    head = f"{indent}{stmt.out.name} = {stmt.op}"
    return [f"{head.ljust(_TYPE_COLUMN)} : {stmt.out.type}"]


def format_program(program: Program, mark: str | None = None) -> str:
    """Print a program; `mark` names a value whose statement gets a '>>' marker (errors)."""
    symbols = ", ".join(s.name for s in program.symbols())
    facts = ", ".join(f"{s} % {m} == 0" for s, m in program.facts)
    lines = [f"program {program.name}({symbols})" + (f" where {facts}" if facts else "")]
    groups = program.groups()
    if len(groups) > 1:
        lines += [f"  group {g}" for g in groups]
    ranges = {name: (lo, hi) for name, lo, hi in program.input_ranges}
    lines += [f"  in  {v.name}: {v.type}"
              + (f" in [{ranges[v.name][0]:g}, {ranges[v.name][1]:g}]" if v.name in ranges else "")
              for v in program.inputs]
    for stmt in program.stmts:
        text = _format_stmt(stmt, "  ")
        if mark is not None and any(v.name == mark for v in stmt.outs):
            text = [">> " + line[2:] for line in text]
        lines += text
    lines.append("  out " + ", ".join(v.name for v in program.outputs))
    return "\n".join(lines)
