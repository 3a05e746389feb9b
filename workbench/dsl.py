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
"""

from __future__ import annotations

import itertools
import linecache
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import sympy

from workbench import ir
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
    float32,
    size_symbol,
)
from workbench.verify import verify

Sum, Max, Min, Prod = ReduceOp.Sum, ReduceOp.Max, ReduceOp.Min, ReduceOp.Prod

_PACKAGE_DIR = str(Path(__file__).resolve().parent)
_ids = itertools.count()

# What users declared with Size(name, multiple_of=m); snapshotted into each Program's facts.
_SIZE_FACTS: dict[sympy.Symbol, sympy.Expr] = {}


def _user_location() -> str:
    """file:line of the innermost frame outside the workbench package (where the user wrote it)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:
        return ""
    return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"


def _at(loc: str, e: WorkbenchError) -> WorkbenchError:
    return type(e)(f"{e} (at {loc})" if loc else str(e))


def check_name(what: str, name) -> str:
    """`name` if it is an identifier (letters, digits, _; not starting with a digit): names
    reach generated CUDA (through codegen's mangle), file names and reports, so a name with a
    newline, a dash or a slash is refused here, where the user wrote it."""
    if not (isinstance(name, str) and name.isidentifier()):
        raise WorkbenchError(f"{what} name must be an identifier (letters, digits and _, not "
                             f"starting with a digit), got {name!r}; e.g. "
                             f"{_identifier_like(name)!r}")
    return name


def _identifier_like(name) -> str:
    text = "".join(c if c.isalnum() or c == "_" else "_" for c in str(name)).strip("_")
    return text if text.isidentifier() else f"x_{text}" if text else "x"


def Size(name: str, multiple_of: sympy.Expr | int | None = None) -> sympy.Symbol:
    """A size symbol (a positive integer). `multiple_of=P` lets a dim of this size be Sliced
    over a group of size P: the verifier needs that proof, and `--set` checks it on values."""
    sym = size_symbol(check_name("Size", name))
    if multiple_of is None:
        _SIZE_FACTS.pop(sym, None)
    else:
        _SIZE_FACTS[sym] = _positive_integer(f"Size {name}: multiple_of", multiple_of,
                                             "e.g. multiple_of=P")
    return sym


def _positive_integer(what: str, value, fix: str) -> sympy.Expr:
    """`value` as a sympy expression that may be a positive integer (a literal must be one;
    an expression must not be provably negative, zero or fractional)."""
    try:
        expr = sympy.sympify(value, strict=True)
    except (sympy.SympifyError, TypeError, ValueError):
        expr = None
    if expr is None or isinstance(value, bool) or expr.is_integer is False \
            or expr.is_positive is False or (expr.is_number and not (expr.is_integer
                                                                     and expr > 0)):
        raise WorkbenchError(f"{what} must be a positive integer or a size expression, got "
                             f"{value!r}; {fix}")
    return expr


# ---------------------------------------------------------------- graph nodes


class Node:
    """A DSL value: an input, the result of a statement, or arithmetic on those.

    `seq` numbers nodes in creation order, which is the order the user wrote them; the tracer
    emits statements in that order (a valid topological order: arguments exist first)."""

    type: TensorType | None  # None for a bare literal (weak scalar)

    def __post_init__(self):
        self.seq = next(_ids)

    def __add__(self, o): return _binary("add", self, o)
    def __radd__(self, o): return _binary("add", o, self)
    def __sub__(self, o): return _binary("sub", self, o)
    def __rsub__(self, o): return _binary("sub", o, self)
    def __mul__(self, o): return _binary("mul", self, o)
    def __rmul__(self, o): return _binary("mul", o, self)
    def __truediv__(self, o): return _binary("div", self, o)
    def __rtruediv__(self, o): return _binary("div", o, self)
    def __pow__(self, o): return _binary("pow", self, o)
    def __rpow__(self, o): return _binary("pow", o, self)
    # Comparisons give a mask (1 where true, 0 elsewhere) for `where`; == and != stay Python's
    # identity tests (nodes are kept in dicts and lists): use equal / not_equal for masks.
    def __lt__(self, o): return _binary("lt", self, o)
    def __le__(self, o): return _binary("le", self, o)
    def __gt__(self, o): return _binary("gt", self, o)
    def __ge__(self, o): return _binary("ge", self, o)
    def __neg__(self): return _unary("neg", self)
    def __abs__(self): return _unary("abs", self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.type}>"


@dataclass(eq=False)
class InputNode(Node):
    name: str
    type: TensorType
    range: tuple[float, float] | None = None


@dataclass(eq=False)
class ConstNode(Node):
    value: float
    type: None = None


@dataclass(eq=False)
class SizeNode(Node):
    """A size expression used as a number (`x / H`): a weak scalar, bound with the sizes."""

    value: sympy.Expr
    type: None = None


@dataclass(eq=False)
class ArithNode(Node):
    """Inline arithmetic; `_build_arith` makes its ir.Expr once its leaves have names."""

    kind: str  # "binary" | "unary" | "cast" | "dropout"
    params: tuple
    args: tuple[Node, ...]
    type: TensorType | None
    loc: str


@dataclass(eq=False)
class StmtNode(Node):
    """A statement: `make(names)` builds its ir op from the names of its materialised args."""

    make: object  # callable(list[str | ir.Expr]) -> ir.Op
    args: tuple[Node, ...]
    expr_args: tuple[bool, ...]  # which args are elementwise expressions (inlined, not named)
    type: TensorType
    loc: str
    name: str | None = None


def _node(x) -> Node:
    if isinstance(x, Node):
        return x
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return ConstNode(float(x))
    if isinstance(x, sympy.Expr):
        if not x.free_symbols:
            return ConstNode(float(x))
        if not x.is_real:
            raise WorkbenchError(f"a size used as a number must be a real expression of sizes, "
                                 f"got {x}")
        return SizeNode(x)
    raise WorkbenchError(f"operand must be a tensor, Variable or number, got {type(x).__name__} "
                         f"{x!r}")


def _probe_env(nodes: Sequence[Node]) -> tuple[dict[str, TensorType], list]:
    """Temporary names and an ir.Expr per node, for running the IR's type rules eagerly."""
    env: dict[str, TensorType] = {}
    return env, [_probe_expr(n, env) for n in nodes]


def _probe_expr(n: Node, env: dict) -> ir.Expr:
    if isinstance(n, ConstNode):
        return ir.Const(n.value)
    if isinstance(n, SizeNode):
        return ir.SizeValue(n.value)
    if isinstance(n, ArithNode):
        return _build_arith(n, [_probe_expr(a, env) for a in n.args])
    # Inputs keep their names so eager errors read "AllReduce(Sum, w)", not a placeholder.
    key = n.name if isinstance(n, InputNode) else (getattr(n, "name", None) or "<value>")
    if key in env and env[key] != n.type:
        key = f"{key}#{id(n)}"
    env[key] = n.type
    return ir.Ref(key)


def _build_arith(n: ArithNode, children: list) -> ir.Expr:
    match n.kind:
        case "binary":
            return ir.Binary(n.params[0], *children)
        case "unary":
            return ir.Unary(n.params[0], *children)
        case "cast":
            return ir.Cast(n.params[0], *children)
        case "dropout":
            return ir.Dropout(n.params[0], n.params[1], *children)
        case "where":
            return ir.Where(*children)
    raise AssertionError(n.kind)


def _arith(kind: str, params: tuple, args: tuple[Node, ...]) -> ArithNode:
    loc = _user_location()
    node = ArithNode(kind, params, args, None, loc)
    env, children = _probe_env(args)
    try:
        node.type = ir.expr_type(_build_arith(node, children), env, _describe(kind, params))
    except WorkbenchError as e:
        raise _at(loc, e) from None
    return node


def _describe(kind: str, params: tuple) -> str:
    if kind == "binary":
        return f"'{ir.BINARY_OPS[params[0]]}'"
    return {"unary": params[0] if params else kind, "cast": "Cast", "dropout": "Dropout",
            "where": "where"}[kind]


def _binary(op: str, a, b) -> ArithNode:
    return _arith("binary", (op,), (_node(a), _node(b)))


def _unary(fn: str, a) -> ArithNode:
    return _arith("unary", (fn,), (_node(a),))


# ---------------------------------------------------------------- declarations


def Tensor(dtype: DType, shape, layout: Layout, name: str, group: Group = WORLD,
           range: tuple[float, float] | None = None) -> InputNode:
    """An input tensor of logical (global) `shape`, laid out over `group` as `layout`.

    `range=(low, high)` says where its values live (Adam's second moment is >= 0); random test
    inputs are drawn uniformly from it, and from a standard normal otherwise."""
    if not isinstance(dtype, DType):
        raise WorkbenchError(f"Tensor {name}: dtype must be float16, bfloat16, float32 or int32, "
                             f"got {dtype!r}")
    check_name("Tensor", name)
    try:
        dims = list(shape)
    except TypeError:
        dims = None
    if dims is None:
        raise WorkbenchError(f"Tensor {name}: shape must be a list of sizes, got {shape!r}; "
                             f"e.g. [N] or [B, H]")
    shape = [_positive_integer(f"Tensor {name}: dim {i} of the shape", d,
                               "use a Size (e.g. N = Size('N')) or a positive int")
             for i, d in enumerate(dims)]
    if range is not None and not (len(range) == 2 and range[0] < range[1]):
        raise WorkbenchError(f"Tensor {name}: range must be (low, high) with low < high, got "
                             f"{range!r}")
    return InputNode(name, TensorType(dtype, as_shape(shape), layout, group),
                     None if range is None else (float(range[0]), float(range[1])))


def Variable(dtype: DType, name: str, group: Group = WORLD) -> InputNode:
    """A runtime scalar, the same on every rank (a learning rate, a step count)."""
    check_name("Variable", name)
    return InputNode(name, TensorType(dtype, (), Replicated, group))


Scalar = Variable


def Stage(name: str, size: sympy.Expr | int | None = None) -> Group:
    """A pipeline stage: a process group of `size` ranks (default P, the world's size)."""
    check_name("Stage", name)
    return Group(name, sympy.sympify(size) if size is not None else WORLD.size)


# ---------------------------------------------------------------- elementwise functions


def sqrt(x): return _unary("sqrt", x)
def rsqrt(x): return _unary("rsqrt", x)
def exp(x): return _unary("exp", x)
def log(x): return _unary("log", x)
def tanh(x): return _unary("tanh", x)
def erf(x): return _unary("erf", x)
def sigmoid(x): return _unary("sigmoid", x)
def maximum(a, b): return _binary("max", a, b)
def minimum(a, b): return _binary("min", a, b)
def less(a, b): return _binary("lt", a, b)
def less_equal(a, b): return _binary("le", a, b)
def greater(a, b): return _binary("gt", a, b)
def greater_equal(a, b): return _binary("ge", a, b)
def equal(a, b): return _binary("eq", a, b)
def not_equal(a, b): return _binary("ne", a, b)


def where(cond, a, b):
    """a where `cond` is nonzero, else b, elementwise (numpy broadcasting over all three); a
    comparison (`x > 0`, `less(x, y)`) gives the 1/0 mask a condition reads."""
    return _arith("where", (), (_node(cond), _node(a), _node(b)))


def silu(x):
    """SiLU (swish): x * sigmoid(x)."""
    return x * sigmoid(x)


def gelu(x):
    """GeLU, exact (erf) form: 0.5 x (1 + erf(x / sqrt 2)), as torch.nn.functional.gelu."""
    return 0.5 * x * (1.0 + erf(x * 0.7071067811865476))


def gelu_tanh(x):
    """GeLU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as torch's
    gelu(approximate="tanh")."""
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def Cast(dtype: DType, x) -> Node:
    """Convert x to dtype (round to nearest even); a cast to x's own dtype is x itself."""
    x = _node(x)
    if x.type is not None and x.type.dtype == dtype:
        return x
    return _arith("cast", (dtype,), (_node(x),))


def Dropout(x, p: float, seed: int | None = None) -> ArithNode:
    """Dropout with probability p; the mask is a hash of (seed, element index), see ir.Dropout.
    Without a seed, each Dropout of a program gets its own, in order of appearance."""
    return _arith("dropout", (float(p), seed), (_node(x),))


# ---------------------------------------------------------------- statements


def _stmt(make, args: Sequence, expr_args: Sequence[bool], name: str | None) -> StmtNode:
    loc = _user_location()
    if name is not None:
        check_name("statement", name)
    nodes = tuple(_node(a) for a in args)
    env, exprs = _probe_env(nodes)
    names = [e if is_expr else _probe_name(e, nodes[i], env)
             for i, (e, is_expr) in enumerate(zip(exprs, expr_args))]
    op = make(names)
    try:
        t = op.infer(env, str(op))
    except WorkbenchError as e:
        raise _at(loc, _strip_probe_names(e)) from None
    return StmtNode(make, nodes, tuple(expr_args), t, loc, name)


def _probe_name(expr: ir.Expr, node: Node, env: dict) -> str:
    """A non-expression argument that is arithmetic gets a temporary statement type."""
    if isinstance(expr, ir.Ref):
        return expr.name
    key = f"<expr>#{id(node)}"
    t = ir.expr_type(expr, env, "argument")
    if t is None:
        raise WorkbenchError("argument must be a tensor, got a literal number")
    env[key] = t
    return key


def _strip_probe_names(e: WorkbenchError) -> WorkbenchError:
    import re

    return type(e)(re.sub(r"#\d+", "", str(e)))


def AllReduce(op: ReduceOp, x, name: str | None = None) -> StmtNode:
    """Reduce a Local tensor over its group; the result is Replicated."""
    return _stmt(lambda a: ir.AllReduce(op, a[0]), [x], [False], name)


def ReduceScatter(op: ReduceOp, x, dim: int = 0, name: str | None = None) -> StmtNode:
    """Reduce a Local tensor over its group; rank r keeps slice r of `dim` (Sliced(dim))."""
    return _stmt(lambda a: ir.ReduceScatter(op, a[0], dim), [x], [False], name)


def AllGather(x, name: str | None = None) -> StmtNode:
    """Gather a Sliced tensor onto every rank (Replicated)."""
    return _stmt(lambda a: ir.AllGather(a[0]), [x], [False], name)


def Broadcast(x, root: int = 0, name: str | None = None) -> StmtNode:
    """Copy rank `root`'s value of x to every rank."""
    return _stmt(lambda a: ir.Broadcast(a[0], root), [x], [False], name)


def Reduce(op: ReduceOp, x, root: int = 0, name: str | None = None) -> StmtNode:
    """Reduce a Local tensor onto rank `root` only."""
    return _stmt(lambda a: ir.Reduce(op, a[0], root), [x], [False], name)


def Send(x, to: Group, name: str | None = None) -> StmtNode:
    """Send each rank's x to the same rank of pipeline stage `to` (Recv is implied there)."""
    return _stmt(lambda a: ir.Send(a[0], to), [x], [False], name)


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


def Mean(x, axis: int, name: str | None = None) -> StmtNode:
    """The mean of x (a tensor or an elementwise expression) over `axis`, kept as a dim of
    size 1: RMSNorm's Mean(x * x, axis=-1) is [T, 1] for x of [T, H]."""
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


def rms_norm(x, weight, eps: float = 1e-6, axis: int = -1):
    """RMSNorm over `axis`: x * rsqrt(mean(x^2) + eps) * weight, the statistic in f32 and the
    result in x's dtype (as torch.nn.functional.rms_norm computes it)."""
    x32 = Cast(float32, x)
    return Cast(x.type.dtype, x32 * rsqrt(Mean(x32 * x32, axis) + eps) * weight)


def layer_norm(x, weight, bias, eps: float = 1e-5, axis: int = -1):
    """LayerNorm over `axis`: (x - mean) * rsqrt(var + eps) * weight + bias, the statistics in
    f32 and the result in x's dtype (torch.nn.functional.layer_norm, biased variance)."""
    x32 = Cast(float32, x)
    mu = Mean(x32, axis)
    return Cast(x.type.dtype, (x32 - mu) * rsqrt(Mean((x32 - mu) * (x32 - mu), axis) + eps)
                * weight + bias)


def softmax(x, axis: int = -1):
    """Softmax over `axis`, max-subtracted: exp(x - max) / sum(exp(x - max)), in f32 and
    returned in x's dtype."""
    x32 = Cast(float32, x)
    shifted = x32 - ReduceTensor(ReduceOp.Max, x32, axis=axis)
    return Cast(x.type.dtype, exp(shifted) / ReduceTensor(ReduceOp.Sum, exp(shifted),
                                                          axis=axis))


def Update(target, value, name: str | None = None) -> StmtNode:
    """Assign `value` to the existing tensor `target` in place (an optimizer update)."""
    if not isinstance(target, (InputNode, StmtNode)):
        raise WorkbenchError("Update target must be a declared tensor or a statement result, "
                             f"got {type(target).__name__}")
    return _stmt(lambda a: ir.Update(a[0], a[1]), [target, value], [False, True], name)


def Compute(value, name: str | None = None) -> StmtNode:
    """Materialise an elementwise expression as its own statement (its own kernel)."""
    return _stmt(lambda a: ir.Compute(a[0]), [value], [True], name)


# ---------------------------------------------------------------- tracing


def _caller_names() -> dict[int, str]:
    """id(node) -> variable name, from the frame that called Program()."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    candidates: dict[int, list[str]] = {}
    if frame is not None:
        for var, val in frame.f_locals.items():
            if isinstance(val, Node) and not var.startswith("_"):
                candidates.setdefault(id(val), []).append(var)
    nodes = {id(v): v for v in frame.f_locals.values()} if frame is not None else {}
    return {key: _defining_name(nodes[key], vars_) for key, vars_ in candidates.items()}


def _defining_name(node: Node, names: list[str]) -> str:
    """Of the variables bound to one node (`g32 = Cast(f32, g1)` may return g1 itself), prefer
    the one assigned on the line that created the node."""
    if len(names) > 1 and getattr(node, "loc", ""):
        filename, _, line = node.loc.rpartition(":")
        for frame_file in _source_files():
            if Path(frame_file).name == filename:
                text = linecache.getline(frame_file, int(line))
                target = text.split("=", 1)[0].strip() if "=" in text else ""
                if target in names:
                    return target
    return names[0]


def _source_files() -> list[str]:
    files, frame = [], sys._getframe(1)
    while frame is not None:
        files.append(frame.f_code.co_filename)
        frame = frame.f_back
    return files


class _Tracer:
    def __init__(self, inputs: Sequence[InputNode], user_names: dict[int, str]):
        self.user_names = user_names
        self.names: dict[int, str] = {id(n): n.name for n in inputs}
        self.input_names = {n.name for n in inputs}
        self.inputs = {id(n) for n in inputs}
        self.env: dict[str, TensorType] = {n.name: n.type for n in inputs}
        self.stmts: list[ir.Stmt] = []
        self.fresh = itertools.count()
        self.seeds = itertools.count(1)
        self.seed_of: dict[int, int] = {}

    def _new_name(self, node: Node) -> str:
        explicit = getattr(node, "name", None)
        if explicit is not None and explicit in self.env:  # was renamed t0 without a word
            raise WorkbenchError(f"statement name must differ from the program's other values, "
                                 f"got name={explicit!r}, which is already "
                                 f"{'an input' if explicit in self.input_names else 'a value'} "
                                 f"(at {getattr(node, 'loc', '?')}); pick another name")
        name = explicit or self.user_names.get(id(node))
        while name is None or name in self.env:
            name = f"t{next(self.fresh)}"
        return name

    def expr(self, node: Node) -> ir.Expr:
        """The node as an inline expression (arithmetic inlined, statements referenced)."""
        if isinstance(node, ConstNode):
            return ir.Const(node.value)
        if isinstance(node, SizeNode):
            return ir.SizeValue(node.value)
        if isinstance(node, ArithNode):
            children = [self.expr(a) for a in node.args]
            if node.kind == "dropout" and node.params[1] is None:
                seed = self.seed_of.setdefault(id(node), next(self.seeds))
                return ir.Dropout(node.params[0], seed, children[0])
            return _build_arith(node, children)
        return ir.Ref(self.name(node))

    def name(self, node: Node) -> str:
        """The node as a named value, emitting its statement (and its arguments') if needed.

        Arguments are emitted before the node, in the order the user created them."""
        if id(node) in self.names:
            return self.names[id(node)]
        if isinstance(node, InputNode):
            raise WorkbenchError(f"tensor '{node.name}' must be listed in Program(inputs=...), "
                                 "got a use of it without a declaration there")
        if isinstance(node, (ConstNode, SizeNode)):
            raise WorkbenchError("a program value must be a tensor, got a literal number")
        for dep in self._unnamed_deps(node):  # deepest first: this recursion stays shallow
            self.name(dep)
        if isinstance(node, ArithNode):
            op = ir.Compute(self.expr(node))
        else:
            op = node.make([self.expr(a) if is_expr else self.name(a)
                            for a, is_expr in zip(node.args, node.expr_args)])
        name = self._new_name(node)
        try:
            t = op.infer(self.env, f"{name} = {op}")
        except WorkbenchError as e:
            raise _at(node.loc, e) from None
        self.stmts.append(ir.Stmt((ir.Value(name, t),), op, node.loc))
        self.env[name] = t
        self.names[id(node)] = name
        node.traced_name = name  # lets schedules refer to values by their DSL handles
        return name

    def _unnamed_deps(self, node: Node) -> list[Node]:
        """The statement nodes `node` needs that have no name yet, in the order the recursive
        emission would name them (arguments in creation order, each one's own arguments
        first), found without recursion: a chain of thousands of statements is a loop."""
        order: list[Node] = []
        seen: set[int] = set()
        deps = sorted(self._statement_deps(node), key=lambda n: n.seq, reverse=True)
        stack = [(d, False) for d in deps]
        while stack:
            n, expanded = stack.pop()
            if expanded:
                order.append(n)
                continue
            if id(n) in seen or id(n) in self.names or isinstance(
                    n, (InputNode, ConstNode, SizeNode)):
                continue
            seen.add(id(n))
            stack.append((n, True))
            stack += [(d, False) for d in sorted(self._statement_deps(n), key=lambda d: d.seq,
                                                 reverse=True)]
        return order

    def _statement_deps(self, node: Node) -> list[Node]:
        """The statement nodes (and arithmetic used as a statement argument) `node` reads."""
        deps: list[Node] = []
        if isinstance(node, ArithNode):
            args = [(a, True) for a in node.args]
        else:
            args = list(zip(node.args, node.expr_args))
        for a, is_expr in args:
            if isinstance(a, StmtNode):
                deps.append(a)
            elif isinstance(a, ArithNode):
                deps += self._statement_deps(a) if is_expr else [a]
        return deps


def Program(inputs: Sequence[InputNode], outputs: Sequence[Node], name: str | None = None,
            may_stay_sliced: Sequence[Node] = ()) -> ir.Program:
    """Trace a program from its inputs to its outputs and verify it.

    Statements appear in the order the outputs need them; values are named after the caller's
    variables. `name` defaults to the file the program is written in. `may_stay_sliced` names
    outputs that a schedule may leave Sliced (each rank keeps its slice: optimizer state,
    ZeRO-style); every other output keeps the storage the program as written gives it.
    """
    for i, node in enumerate(inputs):
        if not isinstance(node, InputNode):
            raise WorkbenchError(f"Program inputs must be Tensor or Variable declarations, "
                                 f"got {type(node).__name__} at position {i}")
    tracer = _Tracer(inputs, _caller_names())
    out_names = [tracer.name(_node(o)) for o in outputs]
    sliced_ok = []
    for o in may_stay_sliced:
        name_o = tracer.name(_node(o))
        if name_o not in out_names:
            raise WorkbenchError(f"may_stay_sliced must name outputs of the program, got "
                                 f"{name_o}; outputs: {', '.join(out_names)}")
        sliced_ok.append(out_names.index(name_o))
    if name is None:
        loc = _user_location()
        name = loc.split(".py")[0] if loc else "program"
    symbols = set()
    for t in tracer.env.values():
        for d in (*t.shape, t.group.size):
            symbols |= sympy.sympify(d).free_symbols
    facts = tuple(sorted(((s, m) for s, m in _SIZE_FACTS.items() if s in symbols),
                         key=lambda f: f[0].name))
    program = ir.Program(
        name,
        tuple(ir.Value(n.name, n.type) for n in inputs),
        tuple(tracer.stmts),
        tuple(ir.Value(n, tracer.env[n]) for n in out_names),
        facts,
        tuple((n.name, *n.range) for n in inputs if n.range is not None),
        tuple(sorted(sliced_ok)),
    )
    return verify(program)


def Pipeline(stages: Sequence[Group], inputs: Sequence[InputNode], outputs: Sequence[Node],
             name: str | None = None) -> ir.Program:
    """A pipeline-parallel program: like Program, and every Send goes from a stage to the next.
    """
    program = Program(inputs, outputs, name)
    order = {g: i for i, g in enumerate(stages)}
    for stmt in program.leaves():
        if isinstance(stmt.op, ir.Send):
            src = program.value(stmt.op.x).type.group
            if order.get(src, -2) + 1 != order.get(stmt.op.dst, -1):
                raise WorkbenchError(
                    f"{stmt.name} = {stmt.op} (at {stmt.loc}): a pipeline Send must go from a "
                    f"stage to the next one in {[g.name for g in stages]}, got {src.name} -> "
                    f"{stmt.op.dst.name}")
    return program
