"""The reference interpreter: runs a program on P virtual ranks with numpy. It is the semantic
oracle for every transform and every generated kernel.

Values are held per rank, as each GPU would hold them: a Local or Replicated tensor as a whole
array on every rank, a Sliced one as each rank's slice. Numerics follow what a GPU kernel does:
operands are loaded, arithmetic runs in f32, and each statement's result is rounded once to its
storage dtype (bf16 through ml_dtypes). Collectives reduce in f32 in rank order.

The interface is in *logical* values, so programs with different layouts can be compared:
  Local      -> array of shape (P, *shape): rank r's tensor at [r]
  Replicated -> array of `shape` (the interpreter checks every rank holds the same)
  Sliced     -> array of `shape`, the concatenation of the slices
  OnRoot(r)  -> array of `shape`, rank r's tensor
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import scipy.special
import sympy

from workbench import ir
from workbench.errors import SizeError, VerifyError
from workbench.types import (
    DType,
    LocalLayout,
    NodeSliced,
    OnRoot,
    ReplicatedLayout,
    Sliced,
    TensorType,
)

NUMPY_DTYPES: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "i32": np.dtype(np.int32),
}


def numpy_dtype(dtype: DType) -> np.dtype:
    return NUMPY_DTYPES[dtype.name]


# ---------------------------------------------------------------- sizes


def bind_sizes(program: ir.Program, sizes: Mapping[str, int]) -> dict[sympy.Symbol, int]:
    """Map each size symbol of the program to an int; check declared divisibility on values."""
    bound: dict[sympy.Symbol, int] = {}
    for sym in program.symbols():
        if sym.name not in sizes:
            raise SizeError(f"size {sym.name} must be set, got no value; pass it, e.g. "
                            f"--set {sym.name}=1024 (program {program.name} uses "
                            f"{', '.join(s.name for s in program.symbols())})")
        value = int(sizes[sym.name])
        if value < 1:
            raise SizeError(f"size {sym.name} must be a positive integer, got {value}")
        bound[sym] = value
    for sym, multiple in program.facts:
        m = int(sympy.sympify(multiple).subs(bound))
        if bound[sym] % m:
            raise SizeError(f"size {sym.name} must be a multiple of {multiple} = {m}, got "
                            f"{bound[sym]}; pick {sym.name} = {m * max(1, bound[sym] // m)}")
    return bound


def concrete(expr: sympy.Expr, bound: Mapping[sympy.Symbol, int]) -> int:
    value = sympy.sympify(expr).subs(bound)
    if not value.is_Integer:
        raise SizeError(f"size expression {expr} must be an integer for {bound}, got {value}")
    return int(value)


def concrete_shape(t: TensorType, bound) -> tuple[int, ...]:
    return tuple(concrete(d, bound) for d in t.shape)


# ---------------------------------------------------------------- dropout hash


def _mix32(x: np.ndarray) -> np.ndarray:
    """lowbias32 (Chris Wellons' integer hash); codegen/cuda/include/wb_dropout.cuh computes the same."""
    x = x.astype(np.uint32)
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
    return x


def dropout_keep(seed: int, index: np.ndarray, p: float) -> np.ndarray:
    """Keep-mask for global element indices: uniform u = top 24 bits of the hash / 2^24,
    kept when u >= p."""
    key = _mix32(np.array([seed], dtype=np.uint32))[0]
    h = _mix32(index.astype(np.uint64).astype(np.uint32) ^ key)
    u = (h >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / (1 << 24))
    return u >= np.float32(p)


# ---------------------------------------------------------------- the interpreter


@dataclass
class _Machine:
    bound: dict
    types: dict  # name -> TensorType
    env: dict  # name -> list of per-rank arrays

    def P(self, t: TensorType) -> int:
        return concrete(t.group.size, self.bound)

    def slice_of(self, arr: np.ndarray, dim: int, rank: int, parts: int) -> np.ndarray:
        n = arr.shape[dim] // parts
        index = [slice(None)] * arr.ndim
        index[dim] = slice(rank * n, (rank + 1) * n)
        return arr[tuple(index)]

    def global_index(self, t: TensorType, rank: int) -> np.ndarray:
        shape = concrete_shape(t, self.bound)
        idx = np.arange(int(np.prod(shape)), dtype=np.uint64).reshape(shape)
        if isinstance(t.layout, Sliced):
            idx = self.slice_of(idx, t.layout.dim, rank, self.P(t))
        elif isinstance(t.layout, NodeSliced):
            g = t.layout.per_node
            idx = self.slice_of(idx, t.layout.dim, rank % g, g)
        return idx

    def nodes(self, P: int, per_node: int) -> int:
        """How many nodes of `per_node` ranks a group of P ranks spans (P must divide)."""
        if P % per_node:
            raise SizeError(f"group size P must be a multiple of the {per_node} ranks per node "
                            f"of a node-level collective, got P={P}; pick P = "
                            f"{per_node * max(1, P // per_node)}")
        return P // per_node

    # -- elementwise

    def eval_expr(self, expr: ir.Expr, rank: int, result: TensorType) -> np.ndarray:
        match expr:
            case ir.Ref(name):
                t = self.types[name]
                arr = self.env[name][rank].astype(np.float32)
                if isinstance(result.layout, (Sliced, NodeSliced)) and isinstance(
                        t.layout, ReplicatedLayout):
                    od = result.layout.dim - (result.rank - t.rank)
                    if od >= 0 and arr.shape[od] != 1:
                        if isinstance(result.layout, NodeSliced):
                            g = result.layout.per_node  # the rank's slice within its node
                            arr = self.slice_of(arr, od, rank % g, g)
                        else:
                            arr = self.slice_of(arr, od, rank, self.P(result))
                return arr
            case ir.Const(v):
                return np.float32(v)
            case ir.SizeValue(e):
                return np.float32(float(sympy.sympify(e).subs(self.bound)))
            case ir.Where(c, a, b):
                cond = self.eval_expr(c, rank, result)
                x, y = self.eval_expr(a, rank, result), self.eval_expr(b, rank, result)
                return np.asarray(np.where(cond != 0, x, y), dtype=np.float32)
            case ir.Unary(fn, a):
                x = self.eval_expr(a, rank, result)
                with np.errstate(all="ignore"):
                    return {
                        "neg": np.negative, "sqrt": np.sqrt, "exp": np.exp, "log": np.log,
                        "abs": np.abs, "rsqrt": lambda v: np.float32(1) / np.sqrt(v),
                        "tanh": np.tanh, "erf": scipy.special.erf,
                        "sigmoid": lambda v: np.float32(1) / (np.float32(1) + np.exp(-v)),
                    }[fn](x).astype(np.float32)
            case ir.Binary(op, a, b):
                x, y = self.eval_expr(a, rank, result), self.eval_expr(b, rank, result)
                with np.errstate(all="ignore"):
                    return np.asarray({
                        "add": np.add, "sub": np.subtract, "mul": np.multiply,
                        "div": np.divide, "pow": np.power, "max": np.maximum,
                        "min": np.minimum, "lt": np.less, "le": np.less_equal,
                        "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
                        "ne": np.not_equal,
                    }[op](x, y), dtype=np.float32)
            case ir.Cast(dtype, a):
                return self.eval_expr(a, rank, result).astype(numpy_dtype(dtype)).astype(
                    np.float32)
            case ir.Dropout(p, seed, a):
                x = self.eval_expr(a, rank, result)
                t = ir.expr_type(a, self.types, "Dropout")
                keep = dropout_keep(seed, self.global_index(t, rank), p)
                return np.where(keep, x * np.float32(1.0 / (1.0 - p)), np.float32(0))
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
        dt = numpy_dtype(t.dtype)
        self.types[out.name] = t
        rule = INTERPRETER_RULES.get(type(op))
        if rule is None:
            raise VerifyError(f"interpreter must have a rule for {type(op).__name__}, got none; "
                              "add one to workbench.interpreter.INTERPRETER_RULES")
        self.env[out.name] = rule(self, op, t, P, dt)

    def local_shape(self, t: TensorType) -> tuple[int, ...]:
        return tuple(concrete(d, self.bound) for d in t.local_shape())

    def reduction(self, red, x: str, P: int) -> list[np.ndarray]:
        arrays = [a.astype(np.float64) for a in self.env[x]]
        if isinstance(red, ir.Norm):
            partial = [np.sum(a * a) for a in arrays]
            finish = np.sqrt
            rop = ir.ReduceOp.Sum
        else:
            partial = [_reduce(red.op, [a.reshape(-1)], axis=1)[0] if a.size else 0.0
                       for a in arrays]
            finish = np.asarray
            rop = red.op
        if isinstance(self.types[x].layout, Sliced):
            combined = _reduce(rop, [np.asarray(p) for p in partial])
            partial = [combined] * P
        return [np.asarray(finish(p), dtype=np.float32) for p in partial]


def _reduce(rop: ir.ReduceOp, arrays, axis: int | None = None) -> np.ndarray:
    """Reduce per-rank arrays in rank order, in f32 (f64 for scalar partials)."""
    if axis is not None:
        stacked = np.stack([np.asarray(a) for a in arrays])
        fn = {ir.ReduceOp.Sum: np.sum, ir.ReduceOp.Max: np.max, ir.ReduceOp.Min: np.min,
              ir.ReduceOp.Prod: np.prod}[rop]
        return fn(stacked, axis=axis)
    acc = np.asarray(arrays[0], dtype=np.float64 if np.ndim(arrays[0]) == 0 else np.float32)
    for a in arrays[1:]:
        a = np.asarray(a, dtype=acc.dtype)
        acc = {ir.ReduceOp.Sum: np.add, ir.ReduceOp.Max: np.maximum,
               ir.ReduceOp.Min: np.minimum, ir.ReduceOp.Prod: np.multiply}[rop](acc, a)
    return acc


# ---------------------------------------------------------------- logical <-> per rank


# ---------------------------------------------------------------- rules, one per op class
# A rule gets the machine, the op, the result type, the group size P and the result's numpy
# dtype, and returns the P per-rank arrays of the result.


def _run_elementwise(m: _Machine, op, t: TensorType, P: int, dt) -> list[np.ndarray]:
    return [np.broadcast_to(m.eval_expr(op.expr, r, t), m.local_shape(t)).astype(dt)
            for r in range(P)]


# Node-level collectives (sub = intra/inter, design note 35): the group's P ranks are
# nodes x g, rank r = node * g + local; each sub-group runs the collective on its own ranks.


def _run_allreduce(m: _Machine, op: ir.AllReduce, t, P: int, dt) -> list[np.ndarray]:
    if op.sub is not None:  # inter: the ranks of one local rank, one per node, in node order
        g = op.sub.per_node
        nodes = m.nodes(P, g)
        sums = [_reduce(op.op, [m.env[op.x][n * g + local] for n in range(nodes)]).astype(dt)
                for local in range(g)]
        return [sums[r % g].copy() for r in range(P)]
    total = _reduce(op.op, m.env[op.x]).astype(dt)
    return [total.copy() for _ in range(P)]


def _run_reduce_scatter(m: _Machine, op: ir.ReduceScatter, t, P: int, dt) -> list[np.ndarray]:
    if op.sub is not None:  # intra: each node's g ranks reduce; local rank l keeps slice l
        g = op.sub.per_node
        m.nodes(P, g)
        out = []
        for r in range(P):
            node = r // g
            total = _reduce(op.op, m.env[op.x][node * g:(node + 1) * g]).astype(dt)
            out.append(m.slice_of(total, op.dim, r % g, g).copy())
        return out
    total = _reduce(op.op, m.env[op.x]).astype(dt)
    return [m.slice_of(total, op.dim, r, P).copy() for r in range(P)]


def _run_all_gather(m: _Machine, op: ir.AllGather, t, P: int, dt) -> list[np.ndarray]:
    if op.sub is not None:  # intra: each node gathers its g slices
        g = op.sub.per_node
        m.nodes(P, g)
        dim = m.types[op.x].layout.dim
        return [np.concatenate(m.env[op.x][(r // g) * g:(r // g + 1) * g], axis=dim)
                for r in range(P)]
    whole = np.concatenate(m.env[op.x], axis=m.types[op.x].layout.dim)
    return [whole.copy() for _ in range(P)]


def _run_broadcast(m: _Machine, op: ir.Broadcast, t, P: int, dt) -> list[np.ndarray]:
    return [m.env[op.x][op.root].copy() for _ in range(P)]


def _run_reduce(m: _Machine, op: ir.Reduce, t, P: int, dt) -> list[np.ndarray]:
    # only the root holds the result; NaN elsewhere, so reading it off the root shows
    total = _reduce(op.op, m.env[op.x]).astype(dt)
    return [total if r == op.root else np.full_like(total, np.nan) for r in range(P)]


def _run_slice(m: _Machine, op: ir.Slice, t: TensorType, P: int, dt) -> list[np.ndarray]:
    if m.types[op.x].layout == t.layout:  # already sliced so: a view of the same arrays
        return [a.copy() for a in m.env[op.x]]
    return [m.slice_of(m.env[op.x][r], op.dim, r, P).copy() for r in range(P)]


def _run_send(m: _Machine, op: ir.Send, t, P: int, dt) -> list[np.ndarray]:
    return [a.copy() for a in m.env[op.x]]


def _run_matmul(m: _Machine, op: ir.MatMul, t, P: int, dt) -> list[np.ndarray]:
    with np.errstate(over="ignore"):  # an f16 result may overflow: first_nonfinite says where
        return [np.matmul(m.env[op.a][r].astype(np.float32),
                          m.env[op.b][r].astype(np.float32)).astype(dt) for r in range(P)]


def _run_reduction(m: _Machine, op, t, P: int, dt) -> list[np.ndarray]:
    return m.reduction(op, op.x, P)


def _run_reduce_axis(m: _Machine, op: ir.ReduceAxis, t: TensorType, P: int, dt
                     ) -> list[np.ndarray]:
    """Each rank reduces its own rows (the type rule refuses the Sliced axis): the expression in
    f32 as elementwise statements compute it, accumulated in f64, rounded to f32 and then to
    the result dtype (what the row kernels do: f64 accumulators, one f32 result)."""
    t_in = op.input_type(m.types, str(op))
    out = []
    for r in range(P):
        x = np.broadcast_to(m.eval_expr(op.expr, r, t_in), m.local_shape(t_in)).astype(np.float64)
        if op.op in ("sum", "mean"):
            red = np.sum(x, axis=op.axis, keepdims=True)
            if op.op == "mean":
                red = red / x.shape[op.axis]
        elif op.op == "norm":
            red = np.sqrt(np.sum(x * x, axis=op.axis, keepdims=True))
        else:
            red = (np.max if op.op == "max" else np.min)(x, axis=op.axis, keepdims=True)
        out.append(red.astype(np.float32).astype(dt))
    return out


InterpreterRule = Callable[[_Machine, object, TensorType, int, np.dtype], list[np.ndarray]]

INTERPRETER_RULES: dict[type, InterpreterRule] = {
    ir.Compute: _run_elementwise,
    ir.Update: _run_elementwise,
    ir.AllReduce: _run_allreduce,
    ir.ReduceScatter: _run_reduce_scatter,
    ir.AllGather: _run_all_gather,
    ir.Broadcast: _run_broadcast,
    ir.Reduce: _run_reduce,
    ir.Slice: _run_slice,
    ir.Send: _run_send,
    ir.MatMul: _run_matmul,
    ir.ReduceTensor: _run_reduction,
    ir.Norm: _run_reduction,
    ir.ReduceAxis: _run_reduce_axis,
}
"""The reference semantics of each op class, as JAX keeps one rule per primitive: the oracle
every transform and generated kernel is checked against. A new op adds one entry here. Regions
(Fused, Overlapped) have none: their meaning is their body, run in order."""


def to_ranks(value: np.ndarray, t: TensorType, bound) -> list[np.ndarray]:
    """Split a logical value into what each rank holds."""
    P = concrete(t.group.size, bound)
    shape = concrete_shape(t, bound)
    value = np.asarray(value, dtype=numpy_dtype(t.dtype))
    expect = (P, *shape) if isinstance(t.layout, LocalLayout) else shape
    if value.shape != tuple(expect):
        raise SizeError(f"input must have logical shape {tuple(expect)} for {t}, got "
                        f"{value.shape}")
    if isinstance(t.layout, LocalLayout):
        return [value[r].copy() for r in range(P)]
    if isinstance(t.layout, NodeSliced):  # local rank l of every node holds slice l
        parts = np.split(value, t.layout.per_node, axis=t.layout.dim)
        return [parts[r % t.layout.per_node] for r in range(P)]
    if isinstance(t.layout, Sliced):
        # Views, not fancy indexing: np.take with a range copies element by element (minutes
        # at 2^28 elements); np.split returns slices at once.
        return np.split(value, P, axis=t.layout.dim)
    return [value.copy() for _ in range(P)]


def from_ranks(name: str, arrays: list[np.ndarray], t: TensorType) -> np.ndarray:
    """Assemble a logical value from what each rank holds (checking replicas agree)."""
    match t.layout:
        case LocalLayout():
            return np.stack(arrays)
        case Sliced(dim):
            return np.concatenate(arrays, axis=dim)
        case OnRoot(root):
            return arrays[root]
        case NodeSliced(dim, g, True):
            whole = [np.concatenate(arrays[n:n + g], axis=dim) for n in range(0, len(arrays), g)]
            for n, a in enumerate(whole[1:], start=1):
                if not np.array_equal(a, whole[0], equal_nan=True):
                    raise VerifyError(f"NodeSliced value '{name}' must be equal on every node, "
                                      f"got node {n} different from node 0")
            return whole[0]
        case ReplicatedLayout():
            for r, a in enumerate(arrays[1:], start=1):
                if not np.array_equal(a, arrays[0], equal_nan=True):
                    raise VerifyError(f"Replicated value '{name}' must be equal on every rank, "
                                      f"got rank {r} different from rank 0")
            return arrays[0]
    raise TypeError(t.layout)


def input_scales(program: ir.Program, bound: Mapping[sympy.Symbol, int]) -> dict[str, float]:
    """How much to scale each input's standard normal draws so that values stay finite: a
    MatMul's weight operand (b, else a when only a is an input) by 1/sqrt(K), K its inner dim,
    so a @ b has the variance of its other operand instead of K times it (the usual
    initialisation of a layer's weights). Inputs with a declared range are drawn from it and
    not scaled. Without this, a two-MatMul MLP in f16 at Megatron's sizes overflowed its
    reference (design note 47)."""
    declared = {name for name, _, _ in program.input_ranges}
    inputs = {v.name for v in program.inputs}
    scales: dict[str, float] = {}
    for leaf in program.leaves():
        if not isinstance(leaf.op, ir.MatMul):
            continue
        a, b = leaf.op.a, leaf.op.b
        pick = b if b in inputs else a if a in inputs else None
        if pick is None or pick in declared:  # a declared range is the user's word
            continue
        ta = program.value(a).type
        k = concrete(ta.shape[-1], bound)
        scales[pick] = min(scales.get(pick, 1.0), 1.0 / float(np.sqrt(k)))
    return scales


def random_inputs(program: ir.Program, sizes: Mapping[str, int], seed: int = 0
                  ) -> dict[str, np.ndarray]:
    """Random logical inputs: normal tensors (a MatMul's weights scaled by 1/sqrt(K), see
    input_scales), tensors with a declared range uniform in it, and positive scalars in
    (0.5, 1) (so a learning rate or an Adam beta is a sensible number)."""
    bound = bind_sizes(program, sizes)
    scales = input_scales(program, bound)
    rng = np.random.default_rng(seed)
    ranges = {name: (lo, hi) for name, lo, hi in program.input_ranges}
    out = {}
    for v in program.inputs:
        t = v.type
        shape = concrete_shape(t, bound)
        if isinstance(t.layout, LocalLayout):
            shape = (concrete(t.group.size, bound), *shape)
        if v.name in ranges:
            data = rng.uniform(*ranges[v.name], size=shape)
        elif t.rank == 0:
            data = rng.uniform(0.5, 1.0, size=shape)
        else:
            data = rng.standard_normal(shape) * scales.get(v.name, 1.0)
        out[v.name] = np.asarray(data).astype(numpy_dtype(t.dtype))
    return out


def first_nonfinite(program: ir.Program, inputs: Mapping[str, np.ndarray],
                    sizes: Mapping[str, int]) -> str | None:
    """Where the reference first makes Inf or NaN out of finite operands, as a message naming
    the statement and the fix (give the inputs a range); None when every value stays finite.

    A reference that overflowed its dtype is no oracle: a kernel that saturates (-65504 in
    f16, where numpy gives -inf) would be reported as a mismatch that is no bug. Values are
    checked where they mean something (an OnRoot value on its root only)."""
    bound = bind_sizes(program, sizes)
    m = _Machine(bound, {}, {})
    for v in program.inputs:
        m.types[v.name] = v.type
        m.env[v.name] = to_ranks(inputs[v.name], v.type, bound)
    for leaf in program.leaves():
        m.run_stmt(leaf)
        out = leaf.out
        bad, total = _nonfinite(m, out.name)
        if not bad or any(_nonfinite(m, name)[0] for name in leaf.op.operands()):
            continue
        arrays = _meaningful(m, out.name)
        inf = any(np.isinf(a).any() for a in arrays)
        dt = out.type.dtype.name
        where = f"{out.name} = {leaf.op}" + (f" (at {leaf.loc})" if leaf.loc else "")
        what = (f"the reference overflowed {dt} at {where}" if inf else
                f"the reference made NaN at {where}")
        feeding = _feeding_inputs(program, leaf)
        names = ", ".join(v.name for v in program.inputs if v.name in feeding
                          and v.name not in {n for n, _, _ in program.input_ranges})
        limit = (f" (largest finite {dt}: {float(np.finfo(NUMPY_DTYPES[dt]).max):g})"
                 if dt in ("f16", "bf16", "f32") else "")
        return (f"{what}: {bad} of {total} elements are not finite, from finite operands"
                f"{limit}; give the inputs that feed it a range=(low, high) in Tensor(...)"
                + (f" (undeclared: {names})" if names else "")
                + " so that the reference stays finite")
    return None


def _feeding_inputs(program: ir.Program, leaf: ir.Stmt) -> set[str]:
    """The program inputs statement `leaf` depends on, directly or through other statements."""
    producer = {v.name: s for s in program.leaves() for v in s.outs}
    inputs = {v.name for v in program.inputs}
    seen, todo, found = set(), list(leaf.op.operands()), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in inputs:
            found.add(name)
        elif name in producer:
            todo += producer[name].op.operands()
    return found


def _meaningful(m: _Machine, name: str) -> list[np.ndarray]:
    t = m.types[name]
    arrays = m.env[name]
    return [arrays[t.layout.root]] if isinstance(t.layout, OnRoot) else list(arrays)


def _nonfinite(m: _Machine, name: str) -> tuple[int, int]:
    """(elements not finite, elements) of value `name` where it means something."""
    arrays = [np.asarray(a) for a in _meaningful(m, name)]
    if not arrays or arrays[0].dtype.kind not in "fV":  # ints (and bf16's void kind) aside
        return 0, sum(a.size for a in arrays)
    bad = sum(int(np.count_nonzero(~np.isfinite(a.astype(np.float32)))) for a in arrays)
    return bad, sum(a.size for a in arrays)


def run(program: ir.Program, inputs: Mapping[str, np.ndarray], sizes: Mapping[str, int]
        ) -> dict[str, np.ndarray]:
    """Run `program` on logical `inputs` with `sizes` bound; return its logical outputs."""
    bound = bind_sizes(program, sizes)
    m = _Machine(bound, {}, {})
    for v in program.inputs:
        if v.name not in inputs:
            raise SizeError(f"input '{v.name}' must be given a value, got none")
        m.types[v.name] = v.type
        m.env[v.name] = to_ranks(inputs[v.name], v.type, bound)
    for stmt in program.stmts:
        m.run_stmt(stmt)
    return {v.name: from_ranks(v.name, m.env[v.name], v.type) for v in program.outputs}


# Relative error bounds by dtype, used for interpreter-vs-interpreter and GPU-vs-interpreter
# checks. Half types round each statement once (2^-11, 2^-8 unit roundoff); the bounds leave room
# for a few roundings and for different reduction orders.
RTOL = {"f32": 1e-5, "f16": 5e-3, "bf16": 4e-2, "i32": 0.0}


def max_relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max(|b|, 1): relative for large values, absolute near zero."""
    return relative_error_where(a, b)[0]


# Elements per pass of relative_error_where: float64 temporaries of a few MiB instead of
# whole-array copies; the GPU checks at N = 2^28 spent ~50 s per LAMB schedule on the CPU
# (`python benchmarks/check_speed.py`: 2.5x faster on 2^26 float32 elements).
ERROR_CHUNK = 2**22


def relative_error_where(a: np.ndarray, b: np.ndarray) -> tuple[float, int | None]:
    """(max |a - b| / max(|b|, 1), the flat index where it is largest): NaN at the same place
    in both counts as equal; a NaN on one side only is a wrong result (inf there), not a
    rounding. (inf, None) for different shapes; (0.0, None) for empty arrays."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return float("inf"), None
    if a.size == 0:
        return 0.0, None
    fa, fb = a.reshape(-1), b.reshape(-1)
    worst, where = -1.0, None
    for start in range(0, fa.size, ERROR_CHUNK):
        a64 = fa[start:start + ERROR_CHUNK].astype(np.float64)
        b64 = fb[start:start + ERROR_CHUNK].astype(np.float64)
        nan_a, nan_b = np.isnan(a64), np.isnan(b64)
        with np.errstate(invalid="ignore"):  # inf - inf: set to inf below
            err = np.abs(a64 - b64)
            err /= np.maximum(np.abs(b64), 1.0)
        err[nan_a & nan_b] = 0.0
        err[nan_a != nan_b] = np.inf
        err[np.isnan(err)] = np.inf  # inf - inf: not a value that rounds to the other
        i = int(np.argmax(err))
        if err[i] > worst:
            worst, where = float(err[i]), start + i
    return worst, where


def output_tolerance(t: TensorType) -> float:
    return RTOL[t.dtype.name]


def compare_programs(original: ir.Program, transformed: ir.Program, sizes: Mapping[str, int],
                     seed: int = 0) -> list[tuple[str, float, float]]:
    """Run both programs on the same random logical inputs; per output position return
    (name, max relative error, tolerance). Outputs are matched by position."""
    if len(original.outputs) != len(transformed.outputs):
        raise VerifyError(f"transformed program must have {len(original.outputs)} outputs, got "
                          f"{len(transformed.outputs)}")
    inputs = random_inputs(original, sizes, seed)
    a = run(original, inputs, sizes)
    b = run(transformed, inputs, sizes)
    return [(va.name, max_relative_error(b[vb.name], a[va.name]), output_tolerance(va.type))
            for va, vb in zip(original.outputs, transformed.outputs)]


def assert_equivalent(original: ir.Program, transformed: ir.Program,
                      sizes: Mapping[str, int], seed: int = 0) -> None:
    """Raise VerifyError naming the output when the programs disagree beyond tolerance."""
    for name, err, tol in compare_programs(original, transformed, sizes, seed):
        if not err <= tol:
            raise VerifyError(f"output '{name}' must match the original within {tol:g}, got "
                              f"max relative error {err:.3g} (sizes {dict(sizes)}, seed {seed})")
