"""The DSL's graph: nodes a program's calls build (inputs, arithmetic, statements), each
type-checked eagerly with the IR's own rules so an error names the line the user wrote. The
tracer (workbench.dsl.program) turns these nodes into an ir.Program."""

from __future__ import annotations

import itertools
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import sympy

from workbench import ir
from workbench.errors import DTypeError, WorkbenchError
from workbench.types import TensorType, size_symbol

# The workbench package: frames inside it are ours, the first one outside is the user's.
_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)
_ids = itertools.count()

# What users declared with Size(name, multiple_of=m), as last declared in this process. An
# input keeps the facts of its dims as they were when it was declared (`declared_facts`), so a
# later Size of the same name elsewhere (another program in the same session) cannot change a
# program already written; a Program reads this registry only for sizes no input carries.
SIZE_FACTS: dict[sympy.Symbol, sympy.Expr] = {}


def declared_facts(t: TensorType) -> tuple[tuple[sympy.Symbol, sympy.Expr], ...]:
    """The Size facts (symbol, multiple) of the sizes in `t`'s shape and group, as declared now."""
    return tuple((s, SIZE_FACTS[s]) for s in sorted(t.size_symbols(), key=lambda s: s.name)
                 if s in SIZE_FACTS)


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
        SIZE_FACTS.pop(sym, None)
    else:
        SIZE_FACTS[sym] = positive_integer(f"Size {name}: multiple_of", multiple_of,
                                           "e.g. multiple_of=P")
    return sym


def positive_integer(what: str, value, fix: str) -> sympy.Expr:
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

    Python's operators build elementwise expressions (computed in f32, numpy broadcasting,
    rounded once to the statement's dtype): `a + b`, `a - b`, `a * b`, `a / b`, `a ** b`,
    `-a`, `abs(a)`, and the comparisons `a < b`, `a <= b`, `a > b`, `a >= b`, which give
    1/0 masks for `where` (`==` and `!=` stay Python's identity tests: use `equal`,
    `not_equal`). Numbers and size expressions (`x / H`) mix in as constants.

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
    # The Size facts of its dims when it was declared (declared_facts).
    facts: tuple[tuple[sympy.Symbol, sympy.Expr], ...] = ()


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


# The largest constant a program may hold: float32's largest finite number. A literal past
# it (1e300), inf or nan passed check and simulate and then failed in nvcc (`inff`
# undefined) or computed inf in every kernel (issue 40): refused where it is written.
CONST_MAX = 3.4028234663852886e38


def _const(value: float) -> ConstNode:
    if not (math.isfinite(value) and abs(value) <= CONST_MAX):
        loc = _user_location()
        raise DTypeError(f"a constant must be a finite number of at most {CONST_MAX:.4g} in "
                         f"magnitude (float32's largest), got {value!r}"
                         + (f" at {loc}" if loc else "") + "; write the number a float32 "
                         "holds (a mask: a large finite value such as -1e30)")
    return ConstNode(value)


def _node(x) -> Node:
    if isinstance(x, Node):
        return x
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        try:
            return _const(float(x))
        except OverflowError:  # an int past a float's range
            return _const(math.inf)
    if isinstance(x, sympy.Expr):
        if not x.free_symbols:
            return _const(float(x))
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
    return type(e)(re.sub(r"#\d+", "", str(e)))
