"""The reference with its error bound: the program's exact value (float64) and, per element, a
bound on how far any correct implementation in the program's dtypes may land from it.

A generated kernel, NCCL, a torch baseline and the interpreter itself all round: each
statement's result to its storage dtype, each f32 operation inside a kernel, each partial sum
of a reduction. How many partial sums are rounded, and in which order, is the implementation's
choice (NCCL's ring rounds P - 1 partial sums of a chunk in the element dtype, starting at a
rank that depends on the chunk; its tree another P - 1; a fused kernel may sum in f32 and round
once). A fixed tolerance per dtype cannot serve every P: at P = 4 an f16 AllReduce + RMSNorm
and mixed-precision Adam's moments fail a bound that held at P = 2 (issue 35). So the check
derives its bound, element by element, by running error analysis (Higham, *Accuracy and
Stability of Numerical Algorithms*, ch. 3): alongside the exact value every statement carries
a first-order bound `e` on the absolute error of a correct implementation, propagated by each
op's condition and grown by each rounding:

- an f32 operation inside an expression: `u32 |r|` (k ulps for the libm functions);
- a statement's result stored in its dtype: `u |r|` with u the dtype's unit roundoff;
- a sum of n terms in any order of n - 1 roundings of unit roundoff u (a collective over P
  ranks: n = P, u of the element dtype, so every ring, tree or one-shot order is inside):
  `gamma(n - 1, u) * sum |x_i|` with gamma(k, u) = k u / (1 - k u);
- a kernel's own reduction of n elements (a row of RMSNorm, a norm, a MatMul's K) in f32:
  the same with n - 1 replaced by ceil(sqrt(n)) + ceil(log2(n)) for blocked/tree sums, and by
  2K for a MatMul (tensor cores truncate rather than round their partial sums);
- a MatMul's value is computed in f32 here (an f64 GEMM at the studies' sizes costs minutes),
  so the reference's own rounding, gamma(K, u32) |A| |B|, is added to the bound.

A check passes when |got - exact| <= SAFETY * e at every element (SAFETY covers the
second-order terms that first-order analysis drops). A planted bug (a chunk skipped, a wrong
peer offset, a missing scale) moves elements by their own magnitude, far outside e
(tests/runtime/test_check_bounds.py reproduces NCCL's orders at P = 2, 4, 8 and such bugs).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import sympy

from workbench import ir
from workbench.errors import VerifyError
from workbench.interpreter.machine import (
    BINARY_FNS,
    INTERPRETER_RULES,
    UNARY_FNS,
    _Machine,
    dropout_keep,
    gather_rows,
    top_k_order,
)
from workbench.interpreter.sizes import (
    NUMPY_DTYPES,
    bind_sizes,
    from_ranks,
    to_ranks,
)
from workbench.types import NodeSliced, OnRoot, Sliced, TensorType

# Unit roundoff (half an ulp of 1) of each storage dtype; integers are exact.
UNIT_ROUNDOFF = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8, "i32": 0.0}
U32 = UNIT_ROUNDOFF["f32"]
# Half the smallest subnormal: rounding into the format is x (1 + d) + n with |n| <= this
# (Higham 2.1), which relative error alone misses near zero (GPU run 38: an f16 RMSNorm
# output of ~1e-8 landed on the subnormal grid, 2.3e-8 from the exact value).
UNDERFLOW = {"f32": 2.0**-150, "f16": 2.0**-25, "bf16": 2.0**-134, "i32": 0.0}

# Error of CUDA's libm in f32, in ulps (CUDA C Programming Guide, "Mathematical Functions",
# single precision, without --use_fast_math, which the runtime never passes): sqrtf is
# correctly rounded, rsqrtf, expf, tanhf and erff 2 ulps, logf 1; sigmoid is an exp, an add
# and a division. One ulp is 2 u |r|.
LIBM_ULPS = {"neg": 0, "abs": 0, "sqrt": 0.5, "rsqrt": 2, "exp": 2, "log": 1, "tanh": 2,
             "erf": 2, "sigmoid": 4}

# First-order analysis drops products of errors; a factor of 2 covers them for every bound the
# studies reach (each is far below 1) and still leaves a planted bug orders of magnitude out.
SAFETY = 2.0

# Collective ops whose result is a sum over the group's ranks.
_MOVES = (ir.AllGather, ir.Broadcast, ir.Slice, ir.Send, ir.AllToAll)


def gamma(k: float, u: float) -> float:
    """gamma_k = k u / (1 - k u): the relative bound of k roundings of unit roundoff u."""
    ku = k * u
    return ku / (1.0 - ku) if ku < 1.0 else math.inf


def kernel_sum_roundings(n: int) -> int:
    """How many rounded partial sums a GPU reduction of n elements may put between an element
    and the result: sequential runs of at most sqrt(n) per thread or block, then tree levels."""
    if n <= 1:
        return 0
    return math.isqrt(n - 1) + 1 + math.ceil(math.log2(n))


@dataclass(frozen=True)
class BoundedReference:
    """A program's logical outputs in float64 (`values`) and, per output, the absolute error
    bound of a correct implementation at each element (`bounds`, SAFETY included); `overflow`
    names the first statement whose exact value leaves its dtype's finite range, or is ""."""

    values: dict[str, np.ndarray]
    bounds: dict[str, np.ndarray]
    overflow: str = ""


@dataclass
class _BoundsMachine:
    """Two interpreter machines over the same types: one holds exact (f64) values, the other
    each value's error bound, rank by rank."""

    values: _Machine
    errors: _Machine
    overflow: str = ""

    @property
    def types(self) -> dict:
        return self.values.types

    def P(self, t: TensorType) -> int:
        return self.values.P(t)

    # -- expressions: (exact value, error bound) of an f32 kernel's evaluation

    def eval(self, expr: ir.Expr, rank: int, result: TensorType,
             block: tuple[slice, tuple] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(exact value, error bound) of `expr` on `rank`; `block` (rows, the result's local
        shape): only those rows of the result's leading axis (_block_rows)."""
        v, e = self._eval(expr, rank, result, block)
        return np.asarray(v, dtype=np.float64), np.asarray(e, dtype=np.float64)

    def _eval(self, expr, rank, result, block=None):
        match expr:
            case ir.Ref(name):
                return (_block_rows(self.values.load(name, rank, result), block)
                        .astype(np.float64),
                        _block_rows(self.errors.load(name, rank, result), block))
            case ir.Const(c):  # an f32 literal in the kernel
                return np.float64(c), abs(float(np.float32(c)) - c)
            case ir.SizeValue(s):
                c = float(sympy.sympify(s).subs(self.values.bound))
                return np.float64(c), abs(float(np.float32(c)) - c)
            case ir.Where(c, a, b):
                cv, ce = self._eval(c, rank, result, block)
                (av, ae), (bv, be) = (self._eval(a, rank, result, block),
                                      self._eval(b, rank, result, block))
                v = np.where(cv != 0, av, bv)
                e = np.where(cv != 0, ae, be)
                # where the condition may flip, either branch may be taken
                return v, np.where(np.asarray(ce) > 0, np.maximum(ae, be) + np.abs(av - bv), e)
            case ir.Unary(fn, a):
                x, ex = self._eval(a, rank, result, block)
                with np.errstate(all="ignore"):
                    r = UNARY_FNS[fn](x)
                    e = _unary_error(fn, x, ex, r) + 2 * LIBM_ULPS[fn] * U32 * np.abs(r)
                return r, e
            case ir.Binary(op, a, b):
                (x, ex), (y, ey) = (self._eval(a, rank, result, block),
                                    self._eval(b, rank, result, block))
                with np.errstate(all="ignore"):
                    r = BINARY_FNS[op](x, y)
                    e = _binary_error(op, x, ex, y, ey, r)
                return r, e
            case ir.Cast(dtype, a):
                x, ex = self._eval(a, rank, result, block)
                return x, ex + UNIT_ROUNDOFF[dtype.name] * np.abs(x) + UNDERFLOW[dtype.name]
            case ir.Dropout(p, seed, a):
                x, ex = self._eval(a, rank, result, block)
                t = ir.expr_type(a, self.types, "Dropout")
                keep = dropout_keep(seed, _block_rows(self.values.global_index(t, rank), block),
                                    p)
                scale = 1.0 / (1.0 - p)
                return (np.where(keep, x * scale, 0.0),
                        np.where(keep, ex * scale + U32 * np.abs(x * scale), 0.0))
        raise TypeError(expr)

    # -- statements

    def run_stmt(self, stmt: ir.Stmt) -> None:
        op = stmt.op
        if isinstance(op, ir.REGION_OPS):
            for inner in op.body:
                self.run_stmt(inner)
            return
        out = stmt.out
        t = out.type
        P = self.P(t)
        self.types[out.name] = t
        rule = BOUND_RULES.get(type(op))
        if rule is not None:
            vals, errs = rule(self, op, t, P)
        elif isinstance(op, _MOVES):  # data moves: errors travel with their values
            vals = INTERPRETER_RULES[type(op)](self.values, op, t, P, np.float64)
            errs = INTERPRETER_RULES[type(op)](self.errors, op, t, P, np.float64)
        else:
            raise VerifyError(f"the error-bound run must have a rule for {type(op).__name__}, "
                              "got none; add one to workbench.interpreter.bounds.BOUND_RULES")
        self.values.env[out.name] = vals
        self.errors.env[out.name] = errs
        if not self.overflow:
            self._note_overflow(stmt, t, vals)

    def _note_overflow(self, stmt: ir.Stmt, t: TensorType, vals) -> None:
        if t.dtype.name == "i32":
            return
        limit = float(ml_dtypes.finfo(NUMPY_DTYPES[t.dtype.name]).max)
        # each array once: ranks doing the same work hold the same one (_same_work)
        meaningful = _distinct([vals[t.layout.root]] if isinstance(t.layout, OnRoot) else vals)
        operands_finite = all(np.isfinite(a).all() for name in stmt.op.operands()
                              if name in self.values.env
                              for a in _distinct(self.values.env[name]))
        with np.errstate(invalid="ignore"):
            beyond = any((~(np.abs(a) <= limit)).any() for a in meaningful)
        if beyond and operands_finite:
            self.overflow = f"{stmt.out.name} = {stmt.op}"


# First-order propagated error of each elementwise function at x given |dx| <= ex, with r the
# function's value there (its own rounding is LIBM_ULPS'); one entry per name in ir.UNARY_OPS.
UNARY_ERRORS: dict[str, Callable] = {
    "neg": lambda x, ex, r: ex,
    "abs": lambda x, ex, r: ex,
    # |sqrt(x + d) - sqrt(x)| <= min(|d| / (2 sqrt x), sqrt |d|)
    "sqrt": lambda x, ex, r: np.minimum(ex / (2 * np.sqrt(np.abs(x))), np.sqrt(ex)),
    "rsqrt": lambda x, ex, r: 0.5 * np.abs(r) / np.abs(x) * ex,
    "exp": lambda x, ex, r: np.abs(r) * np.expm1(ex),
    "log": lambda x, ex, r: ex / np.abs(x),
    "tanh": lambda x, ex, r: (1 - r * r) * ex,
    "erf": lambda x, ex, r: (2 / math.sqrt(math.pi) * np.exp(-(np.abs(x) - ex).clip(0) ** 2)
                             * ex),
    "sigmoid": lambda x, ex, r: 0.25 * ex,
}


def _unary_error(fn: str, x, ex, r):
    """First-order propagated error of fn at x given |dx| <= ex (rounding of fn not included)."""
    return UNARY_ERRORS[fn](x, ex, r)


def _binary_error(op: str, x, ex, y, ey, r):
    """Propagated error of `x op y` plus its f32 rounding."""
    ar = np.abs(r)
    if op in ("add", "sub"):
        return ex + ey + U32 * ar
    if op == "mul":
        return np.abs(x) * ey + np.abs(y) * ex + ex * ey + U32 * ar
    if op == "div":
        room = np.abs(y) - ey
        return np.where(room > 0, (ex + ar * ey) / room, np.inf) + U32 * ar
    if op == "pow":
        ax = np.abs(x)
        return ar * (np.abs(y) * ex / ax + np.abs(np.log(ax)) * ey) + 2 * U32 * ar
    if op in ("max", "min"):
        return np.maximum(ex, ey)
    # comparisons: 0/1 results, uncertain where the operands' errors can reorder them
    return (np.abs(x - y) <= ex + ey).astype(np.float64)


# ---------------------------------------------------------------- rules with arithmetic
# A rule returns (exact values, error bounds), each a list of the P per-rank arrays.


# An elementwise statement is evaluated in blocks of about BLOCK_ELEMENTS elements (whole
# rows of its result's leading axis) on threads, numpy's loops releasing the GIL: in one pass
# over whole float64 arrays the reference of LAMB at 2^28 took over two minutes of a device
# call's host time (GPU run 41). Each element's arithmetic is the same in a block as in the
# whole array, so values and bounds are bit-identical (tests/runtime/test_check_bounds.py).
BLOCK_ELEMENTS = 1 << 18


def _block_rows(arr, block):
    """`arr` as an operand of `block` (rows, the result's local shape): cut to those rows
    where it spans the result's leading axis; read whole where it broadcasts (a norm's
    weight, a scalar)."""
    if block is None:
        return arr
    rows, shape = block
    a = np.asarray(arr)
    return a[rows] if a.ndim == len(shape) and a.shape[0] == shape[0] else a


def _blocks(shape: tuple) -> list[slice]:
    """The row blocks of a result of local `shape` (one block where it has one row or none)."""
    if len(shape) == 0 or shape[0] <= 1:
        return []
    per_row = int(np.prod(shape[1:], dtype=np.int64))
    step = max(1, BLOCK_ELEMENTS // max(per_row, 1))
    return [slice(i, min(i + step, shape[0])) for i in range(0, shape[0], step)]


def _distinct(arrays: list) -> list:
    """The arrays of a per-rank list, each object once."""
    return list({id(a): a for a in arrays}.values())


def _rank_slot(t: TensorType, rank: int):
    """Which part of a value of type `t` `rank` computes: its slice for Sliced (its local
    rank's for NodeSliced), the whole (None) otherwise."""
    if isinstance(t.layout, Sliced):
        return rank
    if isinstance(t.layout, NodeSliced):
        return rank % t.layout.per_node
    return None


def _same_work(b: _BoundsMachine, op, t: TensorType, P: int) -> list[int]:
    """For each rank, the first rank whose evaluation of elementwise `op` is the same work:
    the same operand arrays (the same objects: a Replicated input, an AllReduce's result, a
    value computed once for them) and the same part of the result (a Sliced result's slice
    cuts Replicated operands and indexes dropout masks by rank). Replicated work at P ranks
    is then computed once, not P times (the reference of an unscheduled optimizer at P = 8
    would otherwise run its update 8 times)."""
    names = sorted(set(ir.expr_refs(op.expr)))
    slots = {_rank_slot(t, r) for r in range(P)}
    for node in ir.expr_nodes(op.expr):  # a dropout's mask is indexed by its argument's slice
        if isinstance(node, ir.Dropout):
            arg = ir.expr_type(node.a, b.types, "Dropout")
            if arg is not None and {_rank_slot(arg, r) for r in range(P)} != slots:
                return list(range(P))
    first: dict = {}
    out = []
    for r in range(P):
        key = (_rank_slot(t, r), *(id(b.values.env[n][r]) for n in names),
               *(id(b.errors.env[n][r]) for n in names))
        out.append(first.setdefault(key, r))
    return out


def _bounded_elementwise(b: _BoundsMachine, op, t: TensorType, P: int):
    u = UNIT_ROUNDOFF[t.dtype.name]
    under = UNDERFLOW[t.dtype.name]
    shape = tuple(b.values.local_shape(t))
    blocks = _blocks(shape)
    same = _same_work(b, op, t, P)
    computed = sorted(set(same))
    vals = {r: np.empty(shape) for r in computed}
    errs = {r: np.empty(shape) for r in computed}

    def one(r: int, rows: slice | None) -> None:  # rows None: the whole arrays at once
        at = ... if rows is None else rows
        bv, be = b.eval(op.expr, r, t, None if rows is None else (rows, shape))
        v = vals[r]
        v[at] = np.broadcast_to(bv, v[at].shape)
        # the propagated error, then the store's rounding
        errs[r][at] = np.broadcast_to(be, v[at].shape) + u * np.abs(v[at]) + under

    if len(blocks) <= 1:
        for r in computed:
            one(r, None)
    else:
        pool = ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1))
        try:
            for done in [pool.submit(one, r, rows) for r in computed for rows in blocks]:
                done.result()  # a block's error raises here, as the whole array's would
        finally:  # an error or Ctrl-C: the blocks not yet started are not computed
            pool.shutdown(wait=True, cancel_futures=True)
    # ranks doing the same work hold the same arrays (never written after: every rule makes
    # new ones), as an AllReduce's ranks do
    return [vals[same[r]] for r in range(P)], [errs[same[r]] for r in range(P)]


def _rank_sum(arrays, fn=None) -> np.ndarray:
    """The sum of per-rank arrays (each through `fn` first), added in rank order without
    stacking them: numpy's sum over the leading axis of the stacked arrays adds them in the
    same order, bit for bit (tests/runtime/test_check_bounds.py), at P times the memory."""
    total = np.array(arrays[0] if fn is None else fn(arrays[0]), dtype=np.float64)
    for a in arrays[1:]:
        total += a if fn is None else fn(a)
    return total


def _sum_over_ranks(op, vals_in, errs_in, u: float, eta: float = 0.0):
    """Exact value and error bound of reducing per-rank arrays in any order (collectives)."""
    n = len(vals_in)
    if op == ir.ReduceOp.Sum:
        v = _rank_sum(vals_in)
        return v, (_rank_sum(errs_in) + gamma(n - 1, u) * _rank_sum(vals_in, np.abs)
                   + (n - 1) * eta)
    if op in (ir.ReduceOp.Max, ir.ReduceOp.Min):
        fn = np.max if op == ir.ReduceOp.Max else np.min
        return fn(vals_in, axis=0), np.max(errs_in, axis=0)
    # Prod: each factor's error times the others' magnitudes, plus the roundings
    v = np.prod(vals_in, axis=0)
    mags = np.abs(vals_in)
    e = sum(errs_in[i] * np.prod(np.delete(mags, i, axis=0), axis=0) for i in range(n))
    return v, e + gamma(n - 1, u) * np.abs(v)


def _group_sum(b: _BoundsMachine, op, x: str, members, u: float):
    return _sum_over_ranks(op, [b.values.env[x][m] for m in members],
                           [b.errors.env[x][m] for m in members], u)


def _bounded_allreduce(b: _BoundsMachine, op: ir.AllReduce, t, P: int):
    u = UNIT_ROUNDOFF[t.dtype.name]
    if op.sub is not None:  # inter: one rank per node, in node order
        g = op.sub.per_node
        nodes = b.values.nodes(P, g)
        sums = [_group_sum(b, op.op, op.x, [n * g + local for n in range(nodes)], u)
                for local in range(g)]
        return [sums[r % g][0] for r in range(P)], [sums[r % g][1] for r in range(P)]
    v, e = _group_sum(b, op.op, op.x, range(P), u)
    return [v] * P, [e] * P


def _bounded_reduce_scatter(b: _BoundsMachine, op: ir.ReduceScatter, t, P: int):
    u = UNIT_ROUNDOFF[t.dtype.name]
    cut = b.values.slice_of
    if op.sub is not None:
        g = op.sub.per_node
        b.values.nodes(P, g)
        sums = {node: _group_sum(b, op.op, op.x, range(node * g, (node + 1) * g), u)
                for node in range(P // g)}
        return ([cut(sums[r // g][0], op.dim, r % g, g) for r in range(P)],
                [cut(sums[r // g][1], op.dim, r % g, g) for r in range(P)])
    v, e = _group_sum(b, op.op, op.x, range(P), u)
    return [cut(v, op.dim, r, P) for r in range(P)], [cut(e, op.dim, r, P) for r in range(P)]


def _bounded_reduce(b: _BoundsMachine, op: ir.Reduce, t, P: int):
    v, e = _group_sum(b, op.op, op.x, range(P), UNIT_ROUNDOFF[t.dtype.name])
    nan = np.full_like(v, np.nan)
    return ([v if r == op.root else nan for r in range(P)],
            [e if r == op.root else nan for r in range(P)])


def _bounded_matmul(b: _BoundsMachine, op: ir.MatMul, t, P: int):
    u = UNIT_ROUNDOFF[t.dtype.name]
    vals, errs = [], []
    for r in range(P):
        a32 = b.values.env[op.a][r].astype(np.float32)
        b32 = b.values.env[op.b][r].astype(np.float32)
        k = a32.shape[-1]
        with np.errstate(over="ignore"):
            v = np.matmul(a32, b32).astype(np.float64)
            mags = np.matmul(np.abs(a32), np.abs(b32)).astype(np.float64)
        # the kernel's sum (2K: truncating tensor cores), the reference's own f32 sum, the store
        e = (gamma(2 * k, U32) + gamma(k, U32)) * mags + u * np.abs(v) + UNDERFLOW[t.dtype.name]
        ea, eb = b.errors.env[op.a][r], b.errors.env[op.b][r]
        if np.any(ea):
            e = e + np.matmul(ea, np.abs(b32).astype(np.float64))
        if np.any(eb):
            e = e + np.matmul(np.abs(a32).astype(np.float64), eb)
        vals.append(v)
        errs.append(e)
    return vals, errs


def _kernel_sum(x, ex, axis=None, keepdims=False):
    """Exact sum of x over `axis` and its bound when a kernel sums it in f32 (blocked/tree)."""
    n = x.size if axis is None else x.shape[axis]
    v = np.sum(x, axis=axis, keepdims=keepdims)
    e = (np.sum(ex, axis=axis, keepdims=keepdims)
         + gamma(kernel_sum_roundings(n), U32) * np.sum(np.abs(x), axis=axis, keepdims=keepdims))
    return v, e


def _bounded_reduction(b: _BoundsMachine, op, t: TensorType, P: int):
    """ReduceTensor / Norm: each rank reduces its array in a kernel; a Sliced input's partials
    then combine across ranks (an f32 AllReduce of P scalars)."""
    xs, es = b.values.env[op.x], b.errors.env[op.x]
    norm = isinstance(op, ir.Norm)

    def part(x, ex):
        x = x.astype(np.float64).reshape(-1)
        if norm:
            return _kernel_sum(x * x, 2 * np.abs(x) * ex + ex * ex)
        if op.op == ir.ReduceOp.Sum:
            return _kernel_sum(x, ex)
        if x.size:  # Max / Min: exact, the largest error of any element
            fn = np.max if op.op == ir.ReduceOp.Max else np.min
            return fn(x), np.max(ex)
        return np.float64(0.0), np.float64(0.0)

    done: dict = {}  # ranks holding the same arrays (a Replicated value) reduce them once
    parts = []
    for x, ex in zip(xs, es):
        key = (id(x), id(ex))
        if key not in done:
            done[key] = part(x, ex)
        parts.append(done[key])
    rop = ir.ReduceOp.Sum if norm else op.op
    if isinstance(b.types[op.x].layout, Sliced):
        v, e = _sum_over_ranks(rop, [np.asarray(p[0]) for p in parts],
                               [np.asarray(p[1]) for p in parts], U32)
        parts = [(v, e)] * P
    out_v, out_e = [], []
    for v, e in parts:
        v, e = np.asarray(v, dtype=np.float64).reshape(()), np.asarray(e).reshape(())
        if norm:
            r = np.sqrt(v)
            e = _unary_error("sqrt", v, e, r) + U32 * r
            v = r
        out_v.append(v)
        out_e.append(e + UNIT_ROUNDOFF[t.dtype.name] * np.abs(v) + UNDERFLOW[t.dtype.name])
    return out_v, out_e


def _bounded_reduce_axis(b: _BoundsMachine, op: ir.ReduceAxis, t: TensorType, P: int):
    t_in = op.input_type(b.types, str(op))
    u = UNIT_ROUNDOFF[t.dtype.name]
    shape = b.values.local_shape(t_in)
    vals, errs = [], []
    for r in range(P):
        x, ex = b.eval(op.expr, r, t_in)
        x, ex = np.broadcast_to(x, shape), np.broadcast_to(ex, shape)
        n = x.shape[op.axis]
        if op.op in ("sum", "mean"):
            v, e = _kernel_sum(x, ex, axis=op.axis, keepdims=True)
            if op.op == "mean":
                v, e = v / n, e / n + U32 * np.abs(v / n)
        elif op.op == "norm":
            s, es = _kernel_sum(x * x, 2 * np.abs(x) * ex + ex * ex, axis=op.axis, keepdims=True)
            v = np.sqrt(s)
            e = _unary_error("sqrt", s, es, v) + U32 * v
        else:
            fn = np.max if op.op == "max" else np.min
            v, e = fn(x, axis=op.axis, keepdims=True), np.max(ex, axis=op.axis, keepdims=True)
        vals.append(v)
        # rounded to f32, then to the dtype
        errs.append(e + (U32 + u) * np.abs(v) + UNDERFLOW[t.dtype.name])
    return vals, errs


def _bounded_gather(b: _BoundsMachine, op: ir.Gather, t: TensorType, P: int):
    """A lookup moves values: each row keeps its table row's bound; the rows are picked by
    the exact ids (the error run's ids are zeros), a masked row is an exact zero."""
    sliced = b.types[op.table].layout == Sliced(0)
    ids = b.values.env[op.ids]
    return (gather_rows(b.values.env[op.table], ids, sliced),
            gather_rows(b.errors.env[op.table], ids, sliced))


def _bounded_top_k(b: _BoundsMachine, op: ir.TopK, t: TensorType, P: int):
    """The top k of the exact values. Each value's bound is the largest bound along its row
    (an order statistic moves by at most that); an index is exact (bound 0) where the k
    chosen values stand apart, each from the next in order by more than twice that bound,
    else either choice is correct (bound inf: such a row checks nothing of the indices)."""
    vals, errs = [], []
    for x, ex in zip(b.values.env[op.x], b.errors.env[op.x]):
        n = x.shape[-1]
        order = top_k_order(x, min(op.k + 1, n))
        top = np.take_along_axis(x, order, axis=-1)
        emax = np.max(ex, axis=-1, keepdims=True) if n else np.zeros(x.shape[:-1] + (1,))
        if op.part == "values":
            vals.append(top[..., :op.k])
            errs.append(np.broadcast_to(emax, top[..., :op.k].shape).copy())
            continue
        gaps = np.abs(np.diff(top, axis=-1))  # chosen value i against the next in order
        apart = np.all((gaps > 2 * emax) | (emax == 0), axis=-1, keepdims=True)
        vals.append(order[..., :op.k].astype(np.float64))
        errs.append(np.where(apart, 0.0, np.inf) * np.ones(order[..., :op.k].shape))
    return vals, errs


BOUND_RULES: dict[type, Callable] = {
    ir.Compute: _bounded_elementwise,
    ir.Update: _bounded_elementwise,
    ir.AllReduce: _bounded_allreduce,
    ir.ReduceScatter: _bounded_reduce_scatter,
    ir.Reduce: _bounded_reduce,
    ir.MatMul: _bounded_matmul,
    ir.ReduceTensor: _bounded_reduction,
    ir.Norm: _bounded_reduction,
    ir.ReduceAxis: _bounded_reduce_axis,
    ir.Gather: _bounded_gather,
    ir.TopK: _bounded_top_k,
}
"""The error-bound rule of every op class with arithmetic; the data moves (AllGather,
Broadcast, Slice, Send, AllToAll) run the interpreter's own rule on values and on bounds."""


def bounded_reference(program: ir.Program, inputs: Mapping[str, np.ndarray],
                      sizes: Mapping[str, int]) -> BoundedReference:
    """Run `program` exactly (float64) on logical `inputs`, each output with the bound
    (SAFETY x the running error bound) that a correct implementation stays within."""
    bound = bind_sizes(program, sizes)
    types: dict = {}  # one dict: both machines see every value's type
    b = _BoundsMachine(_Machine(bound, types, {}), _Machine(bound, types, {}))
    for v in program.inputs:
        types[v.name] = v.type
        # a Replicated input is one array every rank reads (converted once, not P times)
        ranks = to_ranks(inputs[v.name], v.type, bound, shared=True)
        exact = {id(a): np.asarray(a).astype(np.float64) for a in ranks}
        zeros = {id(a): np.zeros(np.shape(a)) for a in ranks}  # inputs are exact
        b.values.env[v.name] = [exact[id(a)] for a in ranks]
        b.errors.env[v.name] = [zeros[id(a)] for a in ranks]
    for stmt in program.stmts:
        b.run_stmt(stmt)
    values = {v.name: from_ranks(v.name, b.values.env[v.name], v.type)
              for v in program.outputs}
    bounds = {v.name: SAFETY * from_ranks(v.name, b.errors.env[v.name], v.type)
              for v in program.outputs}
    return BoundedReference(values, bounds, b.overflow)


def within_bounds(got: np.ndarray, want: np.ndarray, bound: np.ndarray
                  ) -> tuple[float, float, float, int | None]:
    """Compare `got` with the exact `want` under per-element `bound`.

    Returns (worst ratio |got - want| / bound, the relative error max(|d| / max(|want|, 1))
    there, the bound in the same relative units, its flat index). The ratio is <= 1 when every
    element is within its bound; NaN at the same place on both sides is equal, on one side
    only it is a wrong result (inf)."""
    got = np.asarray(got).astype(np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return math.inf, math.inf, 0.0, None
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), want.shape).reshape(-1)
    got, want = got.reshape(-1), want.reshape(-1)
    if got.size == 0:
        return 0.0, 0.0, 0.0, None
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = np.abs(got - want)
        nan_g, nan_w = np.isnan(got), np.isnan(want)
        diff[nan_g & nan_w] = 0.0
        diff[(got == want)] = 0.0  # equal infinities
        diff[nan_g != nan_w] = np.inf
        diff[np.isnan(diff)] = np.inf
        ratio = np.where(diff == 0, 0.0, diff / bound)
    i = int(np.argmax(ratio))
    scale = max(abs(float(want[i])), 1.0) if np.isfinite(want[i]) else 1.0
    return float(ratio[i]), float(diff[i]) / scale, float(bound[i]) / scale, i

