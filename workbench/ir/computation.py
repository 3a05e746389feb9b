"""The IR's computation ops, one frozen class each with its result-type rule: elementwise
(Compute, Update), Slice, MatMul, the reductions (ReduceTensor, Norm, ReduceAxis) and the
index ops (Gather, TopK: design decision 106)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sympy

from workbench.errors import DTypeError, LayoutError, ShapeError, VerifyError
from workbench.ir.expressions import (
    WEAK,
    Expr,
    ReduceOp,
    expr_refs,
    expr_type,
    format_expr,
    proven_equal,
    rename_expr,
)
from workbench.types import (
    Local,
    LocalLayout,
    NodeSliced,
    OnRoot,
    Replicated,
    ReplicatedLayout,
    Sliced,
    TensorType,
    float32,
    int32,
    shape_str,
)


def require_layout(what: str, t: TensorType, allowed: tuple, fix: str) -> None:
    """Raise LayoutError unless t's layout is one of `allowed` (an op's input rule)."""
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
        if isinstance(layout, NodeSliced) and not layout.reduced:
            raise LayoutError(f"{what}: a target must be updated with a value reduced over the "
                              f"whole group, got {layout}; AllReduce it across nodes first")
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
        require_layout(what, t, (ReplicatedLayout,), "only a Replicated tensor can be viewed "
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


# The reductions of ReduceAxis: sum, max, min, mean (sum / extent) and norm (the L2 norm,
# sqrt of the sum of squares), all accumulated in f64 and rounded once to the result dtype.
AXIS_REDUCTIONS = ("sum", "max", "min", "mean", "norm")
# Those whose per-rank partials over a Sliced axis an AllReduce of the same op combines.
PARTIAL_AXIS_REDUCTIONS = ("sum", "max", "min")


@dataclass(frozen=True, slots=True)
class ReduceAxis:
    """Reduce an elementwise expression over one axis, keeping it as a dim of size 1 (keep-dims),
    so the result broadcasts back against the rows it reduced: RMSNorm's mean of squares is
    ReduceAxis("mean", x * x, axis=1) : [T, 1].

    The result has the expression's dtype and layout: a reduction over an axis that is not the
    Sliced one runs on each rank's own rows (Sliced(0) rows stay Sliced(0)); over the Sliced
    axis itself each rank holds 1/P of the elements reduced, so a sum, max or min gives each
    rank's partial, Local, for an AllReduce of the same op to combine (a mean or a norm of
    partials does not combine so, and is refused; ReduceTensor and Norm without an axis
    reduce a whole tensor across ranks).
    """

    op: str
    expr: Expr
    axis: int

    def operands(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(expr_refs(self.expr)))

    def rename(self, m: Mapping[str, str]) -> ReduceAxis:
        return ReduceAxis(self.op, rename_expr(self.expr, m), self.axis)

    def input_type(self, env: Mapping[str, TensorType], what: str) -> TensorType:
        """The type of the expression reduced (before the axis shrinks to 1)."""
        t = expr_type(self.expr, env, what)
        if t is WEAK or t.rank == 0:
            raise ShapeError(f"{what}: a reduction over an axis must reduce a tensor, got "
                             f"{'only literals' if t is WEAK else 'a scalar'}; use a tensor of "
                             "rank >= 1")
        return t

    def infer(self, env: Mapping[str, TensorType], what: str) -> TensorType:
        if self.op not in AXIS_REDUCTIONS:
            raise VerifyError(f"{what}: reduction must be one of {AXIS_REDUCTIONS}, got "
                              f"{self.op!r}")
        t = self.input_type(env, what)
        if not 0 <= self.axis < t.rank:
            raise ShapeError(f"{what}: axis must be in [0, {t.rank}) for a tensor of shape "
                             f"{shape_str(t.shape)}, got {self.axis}")
        shape = t.shape[:self.axis] + (sympy.Integer(1),) + t.shape[self.axis + 1:]
        if t.layout == Sliced(self.axis):
            # Each rank holds 1/P of the elements along the axis: its partial (sum, max or
            # min of its own columns) is a per-rank value, which an AllReduce of the same op
            # combines (vocab-parallel softmax: a row's max over each rank's vocabulary slice)
            if self.op not in PARTIAL_AXIS_REDUCTIONS:
                raise LayoutError(
                    f"{what}: a reduction over the Sliced axis must be one of "
                    f"{PARTIAL_AXIS_REDUCTIONS} (each rank's partial, combined by an AllReduce "
                    f"of the same op), got {self.op!r} over axis {self.axis} of a {t.layout} "
                    "value; reduce 'sum' (of squares for a norm), AllReduce(Sum, ...) it, and "
                    "divide (or take the sqrt) after")
            return t.with_(shape=shape, layout=Local)
        if isinstance(t.layout, OnRoot):
            raise LayoutError(f"{what}: input must be Local, Replicated or Sliced, got "
                              f"{t.layout}; Broadcast it first")
        return t.with_(shape=shape)

    def __str__(self) -> str:
        return f"ReduceAxis({self.op}, {format_expr(self.expr)}, axis={self.axis})"


def _reduction_type(t: TensorType) -> TensorType:
    if isinstance(t.layout, NodeSliced):
        raise LayoutError(f"a norm or reduction must read a Local, Replicated or Sliced tensor, "
                          f"got {t.layout}; gather it inside each node first")
    layout = Replicated if isinstance(t.layout, Sliced) else t.layout
    return TensorType(float32, (), layout, t.group)


def _refuse_placed(what: str, name: str, t: TensorType) -> None:
    """An index op reads a value every rank (or each rank) holds: not OnRoot or NodeSliced."""
    if isinstance(t.layout, (OnRoot, NodeSliced)):
        raise LayoutError(f"{what}: '{name}' must be Local, Replicated or Sliced, got "
                          f"{t.layout}; Broadcast it (OnRoot) or gather it inside each node "
                          "(NodeSliced) first")


@dataclass(frozen=True, slots=True)
class Gather:
    """An embedding lookup: the rows of `table` ([V, D]) that the int32 `ids` (any shape S)
    name, out[s, :] = table[ids[s], :], of shape S + [D] and the table's dtype.

    An id outside [0, V) gives a row of zeros (a masked lookup, never an out-of-bounds read).
    That rule is what makes the vocab-parallel embedding (Megatron's VocabParallelEmbedding)
    exact: over a table Sliced(0), rank r holds rows [r V/P, (r+1) V/P), looks up the ids in
    its range and zeroes the others, so the result is each rank's partial, Local, and
    AllReduce(Sum) of the partials is the whole lookup (one rank gives each row, the others
    zeros). Layouts (table, ids -> result):

    Replicated, Replicated -> Replicated;  Replicated, Local -> Local;
    Replicated, Sliced(d)  -> Sliced(d)    (each rank looks up its own ids);
    Local, Replicated|Local -> Local       (a per-rank table, an expert's);
    Sliced(0), Replicated|Local -> Local   (vocab-parallel: each rank's partial, AllReduce it);
    Sliced(1), Replicated -> Sliced(last)  (the embedding's columns split over the ranks).
    """

    table: str
    ids: str

    def operands(self) -> tuple[str, ...]:
        return (self.table, self.ids)

    def rename(self, m: Mapping[str, str]) -> Gather:
        return Gather(m.get(self.table, self.table), m.get(self.ids, self.ids))

    def infer(self, env: Mapping[str, TensorType], what: str) -> TensorType:
        tt, ti = env[self.table], env[self.ids]
        if tt.group != ti.group:
            raise LayoutError(f"{what}: table and ids must be in the same group, got "
                              f"{tt.group} and {ti.group}")
        if ti.dtype != int32:
            raise DTypeError(f"{what}: ids must be int32, got {ti.dtype} for '{self.ids}'; "
                             "declare them Tensor(int32, ...) (a float index would round)")
        if tt.rank != 2:
            raise ShapeError(f"{what}: the table must be 2-D [V, D], got "
                             f"{shape_str(tt.shape)} for '{self.table}'")
        if ti.rank == 0:
            raise ShapeError(f"{what}: ids must be a tensor of rank >= 1, got a scalar "
                             f"'{self.ids}'; give it a shape [T]")
        _refuse_placed(what, self.table, tt)
        _refuse_placed(what, self.ids, ti)
        lt, li = tt.layout, ti.layout
        whole_ids = isinstance(li, ReplicatedLayout)
        if isinstance(lt, ReplicatedLayout):
            layout = li
        elif isinstance(lt, LocalLayout) or (lt == Sliced(0) and not isinstance(li, Sliced)):
            if isinstance(li, Sliced):
                raise LayoutError(f"{what}: a Local table must be read with Replicated or "
                                  f"Local ids, got {li}; AllGather the ids first")
            layout = Local
        elif lt == Sliced(1) and whole_ids:
            layout = Sliced(ti.rank)
        else:
            raise LayoutError(
                f"{what}: the layouts of table and ids must be a supported lookup, got table "
                f"{lt} with ids {li}; use a Replicated table, a vocab-parallel table Sliced(0) "
                "with Replicated or Local ids (then AllReduce(Sum)), or a table Sliced(1) with "
                "Replicated ids")
        return TensorType(tt.dtype, ti.shape + (tt.shape[1],), layout, tt.group)

    def __str__(self) -> str:
        return f"Gather({self.table}, {self.ids})"


# The largest k of TopK: the generated kernel (a warp per row, codegen/cuda/templates/
# topk.cu.j2) keeps each lane's best k in registers; an MoE router's k is 1, 2 or 8.
TOPK_MAX_K = 32
# What TopK's statement holds: the k values, or their int32 indices along the axis.
TOPK_PARTS = ("values", "indices")


@dataclass(frozen=True, slots=True)
class TopK:
    """The k largest elements along the last axis of x (an MoE router's top-k experts; k = 1
    is argmax), in descending order, ties broken by the lower index and NaN after every
    number: `part` "values" is them ([..., k], x's dtype), "indices" their int32 positions
    along the axis ([..., k]). The DSL's TopK(x, k) makes both statements.

    x keeps its layout (rows Sliced(0) stay each rank's rows); the axis itself must be whole
    on every rank (not Sliced), and 1 <= k <= min(TOPK_MAX_K, the axis length), proven."""

    x: str
    k: int
    part: str = "values"

    def operands(self) -> tuple[str, ...]:
        return (self.x,)

    def rename(self, m: Mapping[str, str]) -> TopK:
        return TopK(m.get(self.x, self.x), self.k, self.part)

    def infer(self, env: Mapping[str, TensorType], what: str) -> TensorType:
        t = env[self.x]
        if self.part not in TOPK_PARTS:
            raise VerifyError(f"{what}: part must be one of {TOPK_PARTS}, got {self.part!r}")
        if t.rank == 0:
            raise ShapeError(f"{what}: x must be a tensor of rank >= 1, got the scalar "
                             f"'{self.x}'; top-k runs along the last axis")
        if not t.dtype.is_float:
            raise DTypeError(f"{what}: x must be a float tensor, got {t.dtype}; Cast it to "
                             "float32 first")
        n = t.shape[-1]
        if not (isinstance(self.k, int) and not isinstance(self.k, bool)
                and 1 <= self.k <= TOPK_MAX_K):
            raise VerifyError(f"{what}: k must be an int in [1, {TOPK_MAX_K}], got "
                              f"{self.k!r}; the kernel keeps k values a lane in registers")
        if sympy.simplify(n - self.k).is_nonnegative is not True:
            raise ShapeError(f"{what}: k must be at most the axis length, got k={self.k} for "
                             f"an axis of length {n}; declare the axis length as a number "
                             "(e.g. 8 experts) or lower k")
        _refuse_placed(what, self.x, t)
        if t.layout == Sliced(t.rank - 1):
            raise LayoutError(f"{what}: the top-k axis must be whole on every rank, got x "
                              f"{t.layout} (the axis is sliced); AllGather it first")
        shape = t.shape[:-1] + (sympy.Integer(self.k),)
        dtype = t.dtype if self.part == "values" else int32
        return t.with_(dtype=dtype, shape=shape)

    def __str__(self) -> str:
        return f"TopK({self.x}, k={self.k}, {self.part})"
