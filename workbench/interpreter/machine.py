"""The reference interpreter: runs a program on P virtual ranks with numpy. It is the semantic
oracle for every transform and every generated kernel.

Values are held per rank, as each GPU would hold them: a Local or Replicated tensor as a whole
array on every rank, a Sliced one as each rank's slice. Numerics follow what a GPU kernel does:
operands are loaded, arithmetic runs in f32, and each statement's result is rounded once to its
storage dtype (bf16 through ml_dtypes). Collectives reduce in f32 in rank order.

See workbench.interpreter.sizes for how logical values map onto ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import scipy.special
import sympy

from workbench import ir
from workbench.errors import SizeError, VerifyError
from workbench.interpreter.sizes import (
    bind_sizes,
    concrete,
    concrete_shape,
    from_ranks,
    numpy_dtype,
    to_ranks,
)
from workbench.types import (
    NodeSliced,
    ReplicatedLayout,
    Sliced,
    TensorType,
)

# ---------------------------------------------------------------- dropout hash


def _mix32(x: np.ndarray) -> np.ndarray:
    """lowbias32 (Chris Wellons' integer hash); codegen/cuda/include/wb_dropout.cuh computes
    the same."""
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

# The elementwise functions, by name: one table for the f32 interpreter and the f64 error-bound
# run (workbench.interpreter.bounds). Python-float constants keep the operand's precision.
UNARY_FNS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": np.negative, "sqrt": np.sqrt, "exp": np.exp, "log": np.log,
    "abs": np.abs, "rsqrt": lambda v: 1.0 / np.sqrt(v),
    "tanh": np.tanh, "erf": scipy.special.erf,
    "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
}
BINARY_FNS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply,
    "div": np.divide, "pow": np.power, "max": np.maximum,
    "min": np.minimum, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
    "ne": np.not_equal,
}


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

    def load(self, name: str, rank: int, result: TensorType) -> np.ndarray:
        """Rank `rank`'s array of value `name` as an expression producing `result` reads it: a
        Replicated operand of a Sliced result is cut to the rank's slice."""
        t = self.types[name]
        arr = self.env[name][rank]
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

    def eval_expr(self, expr: ir.Expr, rank: int, result: TensorType) -> np.ndarray:
        match expr:
            case ir.Ref(name):
                return self.load(name, rank, result).astype(np.float32)
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
                    return UNARY_FNS[fn](x).astype(np.float32)
            case ir.Binary(op, a, b):
                x, y = self.eval_expr(a, rank, result), self.eval_expr(b, rank, result)
                with np.errstate(all="ignore"):
                    return np.asarray(BINARY_FNS[op](x, y), dtype=np.float32)
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


def _run_all_to_all(m: _Machine, op: ir.AllToAll, t, P: int, dt) -> list[np.ndarray]:
    """Rank r's block s is rank s's block r (blocks: P equal parts of dim `op.dim`)."""
    blocks = [np.split(a, P, axis=op.dim) for a in m.env[op.x]]
    return [np.concatenate([blocks[s][r] for s in range(P)], axis=op.dim).astype(dt)
            for r in range(P)]


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


def gather_rows(tables: list[np.ndarray], ids: list[np.ndarray], vocab_sliced: bool
                ) -> list[np.ndarray]:
    """Each rank's lookup of its `ids` in its `tables` array ([rows, D]): an id outside the
    rows the rank holds (rank r of a vocab-sliced table holds [r rows, (r+1) rows)) gives a
    row of zeros. Shared by the interpreter and the error-bound run (ir.Gather)."""
    out = []
    for r, (table, i) in enumerate(zip(tables, ids)):
        local = i.astype(np.int64) - (r * table.shape[0] if vocab_sliced else 0)
        held = (local >= 0) & (local < table.shape[0])
        rows = table[np.where(held, local, 0)]
        out.append(np.where(held[..., None], rows, np.zeros((), table.dtype)))
    return out


def _run_gather(m: _Machine, op: ir.Gather, t: TensorType, P: int, dt) -> list[np.ndarray]:
    sliced = m.types[op.table].layout == Sliced(0)
    return [a.astype(dt) for a in gather_rows(m.env[op.table], m.env[op.ids], sliced)]


def top_k_order(x: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k largest elements along the last axis, largest first; ties by the
    lower position, NaN after every number (a stable sort of -x puts NaN last)."""
    return np.argsort(-np.asarray(x, dtype=np.float64), axis=-1, kind="stable")[..., :k]


def _run_top_k(m: _Machine, op: ir.TopK, t: TensorType, P: int, dt) -> list[np.ndarray]:
    out = []
    for x in m.env[op.x]:
        order = top_k_order(x, op.k)
        out.append(np.take_along_axis(x, order, axis=-1).astype(dt) if op.part == "values"
                   else order.astype(np.int32))
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
    ir.AllToAll: _run_all_to_all,
    ir.MatMul: _run_matmul,
    ir.ReduceTensor: _run_reduction,
    ir.Norm: _run_reduction,
    ir.ReduceAxis: _run_reduce_axis,
    ir.Gather: _run_gather,
    ir.TopK: _run_top_k,
}
"""The reference semantics of each op class, as JAX keeps one rule per primitive: the oracle
every transform and generated kernel is checked against. A new op adds one entry here. Regions
(Fused, Overlapped) have none: their meaning is their body, run in order."""


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
