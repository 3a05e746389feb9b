"""Inputs, references and result checks for measured programs (numpy only; no GPU).

Every schedule is checked against the reference interpreter running the *unscheduled*
program, output by output (outputs correspond by position; a scheduled program may keep an
output Sliced where the original has it Replicated, and both mean the same logical value).

For large N the interpreter is slow, so pointwise programs (1-D tensors of one length and
scalars, elementwise ops and collectives only) are checked on a random sample of element
indices: in such a program element k of every output depends only on element k of every
input, whatever the slicing, so the interpreter on the sampled inputs gives the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from workbench import interpreter, ir
from workbench.types import LocalLayout, OnRoot, ReplicatedLayout, Sliced, TensorType

# Above this many elements per tensor the check samples (pointwise programs only).
FULL_CHECK_MAX_NUMEL = 1 << 24
SAMPLE_NUMEL = 1 << 20


@dataclass(frozen=True)
class CheckResult:
    """Outcome of checking one run: `ok`, the worst output (the element furthest past, or
    nearest to, its bound), its relative error, the bound there in the same units, and where."""

    ok: bool
    max_error: float
    output: str
    where: str
    tolerance: float
    sampled: bool
    # Why the reference is no oracle (it overflowed: interpreter.first_nonfinite), if so.
    reference_problem: str = ""

    def status(self) -> str:
        if self.reference_problem:
            return f"REFERENCE NOT FINITE: {self.reference_problem}"
        how = " (sampled)" if self.sampled else ""
        if self.ok:
            return "ok" + how
        return (f"MISMATCH {self.output}: err {self.max_error:.3g} > bound {self.tolerance:.3g} "
                f"at {self.where}{how}")


def fast_random_inputs(program: ir.Program, sizes, seed: int = 0) -> dict[str, np.ndarray]:
    """Like interpreter.random_inputs (normal tensors, a MatMul's weights scaled by 1/sqrt(K),
    scalars in (0.5, 1)) but drawn in f32,
    several times faster for tensors of 2^28 elements; tensors declared with a range (Adam's
    v in [0, 1]) are drawn uniform in it."""
    bound = interpreter.bind_sizes(program, sizes)
    rng = np.random.default_rng(seed)
    scales = interpreter.input_scales(program, bound)
    out = {}
    for v in program.inputs:
        t = v.type
        shape = interpreter.concrete_shape(t, bound)
        if isinstance(t.layout, LocalLayout):
            shape = (interpreter.concrete(t.group.size, bound), *shape)
        if _declared_range(program, v.name) is not None:
            lo, hi = _declared_range(program, v.name)
            data = rng.uniform(lo, hi, size=shape).astype(np.float32)
        elif not t.dtype.is_float:  # ids and masks: as interpreter.random_inputs draws them
            data = rng.integers(0, 16, size=shape)
        elif t.rank == 0:
            data = rng.uniform(0.5, 1.0, size=shape).astype(np.float32)
        else:
            data = rng.standard_normal(shape, dtype=np.float32)
            if v.name in scales:
                data *= np.float32(scales[v.name])
        out[v.name] = np.asarray(data).astype(interpreter.numpy_dtype(t.dtype))
    return out


def _declared_range(program: ir.Program, name: str):
    ranges = getattr(program, "input_ranges", None) or ()
    for item in ranges:
        if item[0] == name:
            return float(item[1]), float(item[2])
    return None


def make_inputs(program: ir.Program, sizes, seed: int = 0) -> dict[str, np.ndarray]:
    """The interpreter's own random inputs up to FULL_CHECK_MAX_NUMEL elements, else f32 draws."""
    bound = interpreter.bind_sizes(program, sizes)
    biggest = max((int(np.prod(interpreter.concrete_shape(v.type, bound)))
                   for v in program.inputs), default=0)
    if biggest <= FULL_CHECK_MAX_NUMEL:
        return interpreter.random_inputs(program, sizes, seed)
    return fast_random_inputs(program, sizes, seed)


def pointwise_length(program: ir.Program) -> sympy.Expr | None:
    """The common length N when the program is pointwise over 1-D tensors of length N."""
    length = None
    for s in program.leaves():
        if isinstance(s.op, (ir.MatMul, ir.ReduceTensor, ir.Norm, ir.ReduceAxis, ir.Send,
                             *ir.INDEX_OPS,
                             ir.Reduce, ir.Broadcast)):
            return None
        if isinstance(s.op, ir.ELEMENTWISE_OPS) and _has_dropout(s.op.expr):
            return None
    for v in program.all_values():
        if v.type.rank == 0:
            continue
        if v.type.rank != 1:
            return None
        if length is None:
            length = v.type.shape[0]
        elif not ir.proven_equal(length, v.type.shape[0]):
            return None
    return length


def _has_dropout(expr) -> bool:
    return any(isinstance(node, ir.Dropout) for node in ir.expr_nodes(expr))


@dataclass(frozen=True)
class Reference:
    """What a run is checked against: each output's exact logical value (`values`, float64)
    and the per-element bound a correct implementation stays within (`bounds`, from
    interpreter.bounded_reference: dtype, P, reduction lengths and roundings, one rule for
    NCCL's rows and ours); `indices` the element indices they stand for (None: all), `sizes`
    the sizes they were computed at, `problem` why they are no oracle ("" when they are)."""

    values: dict
    bounds: dict
    indices: np.ndarray | None
    sizes: dict
    problem: str = ""

    def with_outputs(self, values: dict, bounds: dict) -> Reference:
        """The same reference with some outputs replaced (a node's view of them)."""
        return Reference({**self.values, **values}, {**self.bounds, **bounds}, self.indices,
                         self.sizes, self.problem)


def reference(program: ir.Program, inputs, sizes, P: int, seed: int = 1) -> Reference:
    """The reference of `program` on `inputs`: exact outputs with their bounds, on a sample of
    element indices for pointwise programs above FULL_CHECK_MAX_NUMEL elements."""
    bound = interpreter.bind_sizes(program, sizes)
    length = pointwise_length(program)
    idx, used, used_sizes = None, inputs, dict(sizes)
    if length is not None:
        n = interpreter.concrete(length, bound)
        if n > FULL_CHECK_MAX_NUMEL:
            k = SAMPLE_NUMEL - SAMPLE_NUMEL % P
            rng = np.random.default_rng(seed)
            idx = np.sort(rng.choice(n, size=k, replace=False))
            used = sampled_inputs(program, inputs, idx)
            (sym,) = sympy.sympify(length).free_symbols
            used_sizes[sym.name] = k
    exact = interpreter.bounded_reference(program, used, used_sizes)
    problem = ""
    if exact.overflow:  # the in-dtype replay names the statement and the fix
        problem = (interpreter.first_nonfinite(program, used, used_sizes)
                   or f"the reference leaves its dtype's finite range at {exact.overflow}; "
                      "give the inputs that feed it a range=(low, high) in Tensor(...)")
    return Reference(exact.values, exact.bounds, idx, used_sizes, problem)


def sampled_inputs(program: ir.Program, inputs, idx) -> dict[str, np.ndarray]:
    """The inputs at element indices `idx` of a pointwise program (scalars whole)."""
    sub = {}
    for v in program.inputs:
        a = inputs[v.name]
        if v.type.rank == 0:
            sub[v.name] = a
        elif isinstance(v.type.layout, LocalLayout):
            sub[v.name] = a[:, idx]
        else:
            sub[v.name] = a[idx]
    return sub


def rank_part(logical: np.ndarray, t: TensorType, rank: int, P: int) -> np.ndarray:
    """What rank `rank` holds of a logical value of type t."""
    if isinstance(t.layout, LocalLayout):
        return logical[rank]
    if isinstance(t.layout, Sliced):
        return np.array_split(logical, P, axis=t.layout.dim)[rank]
    return logical


def compare(outputs_gpu: dict[str, np.ndarray], scheduled: ir.Program, original: ir.Program,
            ref: Reference, rank: int, P: int, n_full: int | None) -> CheckResult:
    """Compare what this rank holds of each output with the reference (by output position):
    every element within its bound (interpreter.bounds). The error and tolerance reported are
    relative (|diff| / max(|want|, 1)) at the element nearest to, or furthest past, its bound.
    A reference with a `problem` is no oracle: the result says so and is not ok."""
    indices = ref.indices
    if ref.problem:
        return CheckResult(False, float("nan"), "", "", 0.0, indices is not None,
                           reference_problem=ref.problem)
    worst, worst_ratio = CheckResult(True, 0.0, "", "", 0.0, indices is not None), -1.0
    for v_s, v_o in zip(scheduled.outputs, original.outputs):
        if isinstance(v_s.type.layout, OnRoot) and rank != v_s.type.layout.root:
            continue  # a Reduce's result exists on its root only; other ranks hold nothing
        got = outputs_gpu[v_s.name]
        if indices is None:
            want = rank_part(ref.values[v_o.name], v_s.type, rank, P)
            bound = rank_part(ref.bounds[v_o.name], v_s.type, rank, P)
            got_cmp, where_idx = got, None
        else:
            got_cmp, want, where_idx = _sampled(got, ref.values[v_o.name], v_s.type, rank, P,
                                                indices, n_full)
            _, bound, _ = _sampled(got, ref.bounds[v_o.name], v_s.type, rank, P, indices,
                                   n_full)
        ratio, err, tol, flat = interpreter.within_bounds(got_cmp, want, bound)
        where = ""
        if flat is not None:
            pos = np.unravel_index(flat, np.shape(got_cmp))
            if where_idx is not None:
                gpos = int(where_idx[flat])
            else:  # the logical index: a Sliced output's local index shifted to its slice
                g = [int(x) for x in pos]
                if isinstance(v_s.type.layout, Sliced):
                    d = v_s.type.layout.dim
                    g[d] += rank * np.shape(got_cmp)[d]
                gpos = g[0] if len(g) == 1 else tuple(g)
            where = (f"rank {rank} index {gpos}: got "
                     f"{float(got_cmp[pos])!r}, want {float(want[pos])!r}")
        if ratio > worst_ratio:
            worst_ratio = ratio
            worst = CheckResult(ratio <= 1.0, err, v_s.name, where, tol, indices is not None)
    return worst


def _sampled(got, want_logical, t: TensorType, rank: int, P: int, idx, n_full):
    """The sampled elements this rank holds, from its local array `got` (1-D programs)."""
    if isinstance(t.layout, LocalLayout):
        return got[idx], want_logical[rank], idx
    if isinstance(t.layout, Sliced):
        s = n_full // P
        mine = (idx >= rank * s) & (idx < (rank + 1) * s)
        return got[idx[mine] - rank * s], want_logical[mine], idx[mine]
    assert isinstance(t.layout, ReplicatedLayout), t.layout
    return got[idx], want_logical, idx
