"""The interpreter as an oracle: random test inputs (scaled so references stay finite),
where a reference first goes non-finite, tolerances by dtype, and comparing two programs."""

from __future__ import annotations

from collections.abc import Mapping

import ml_dtypes
import numpy as np
import sympy

from workbench import ir
from workbench.errors import VerifyError
from workbench.interpreter.machine import _Machine, run
from workbench.interpreter.sizes import (
    NUMPY_DTYPES,
    bind_sizes,
    concrete,
    concrete_shape,
    numpy_dtype,
    to_ranks,
)
from workbench.types import LocalLayout, OnRoot, TensorType


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
    input_scales), tensors with a declared range uniform in it, int32 ones integers in [0, 16)
    (ids that repeat, so comparisons are true somewhere), and positive scalars in (0.5, 1) (so
    a learning rate or an Adam beta is a sensible number)."""
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
        elif not t.dtype.is_float:  # ids and masks: small non-negative integers, repeating
            data = rng.integers(0, 16, size=shape)
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
        limit = (f" (largest finite {dt}: {float(ml_dtypes.finfo(NUMPY_DTYPES[dt]).max):g})"
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
