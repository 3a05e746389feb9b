"""Sizes and storage for the reference interpreter: numpy dtypes, binding size symbols to
ints, and a logical value split into what each rank holds (and assembled back).

The interface is in *logical* values, so programs with different layouts can be compared:
  Local      -> array of shape (P, *shape): rank r's tensor at [r]
  Replicated -> array of `shape` (the interpreter checks every rank holds the same)
  Sliced     -> array of `shape`, the concatenation of the slices
  OnRoot(r)  -> array of `shape`, rank r's tensor
"""

from __future__ import annotations

from collections.abc import Mapping

import ml_dtypes
import numpy as np
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
    """Map each size symbol of the program to an int; check declared divisibility on values.
    `sizes` is keyed by name, or by any sympy Symbol of that name (a notebook's
    `sympy.Symbol("N")`)."""
    sizes = {getattr(k, "name", k): v for k, v in sizes.items()}
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
                            f"{bound[sym]}; pad it to {sym.name} = {m * -(-bound[sym] // m)}")
    return bound


def concrete(expr: sympy.Expr, bound: Mapping[sympy.Symbol, int]) -> int:
    value = sympy.sympify(expr).subs(bound)
    if not value.is_Integer:
        raise SizeError(f"size expression {expr} must be an integer for {bound}, got {value}")
    return int(value)


def concrete_shape(t: TensorType, bound) -> tuple[int, ...]:
    return tuple(concrete(d, bound) for d in t.shape)


def to_ranks(value: np.ndarray, t: TensorType, bound, shared: bool = False
             ) -> list[np.ndarray]:
    """Split a logical value into what each rank holds; `shared` (for a reader that never
    writes): views of the value, a Replicated one the same array on every rank, where
    otherwise each rank gets a copy."""
    P = concrete(t.group.size, bound)
    shape = concrete_shape(t, bound)
    value = np.asarray(value, dtype=numpy_dtype(t.dtype))
    expect = (P, *shape) if isinstance(t.layout, LocalLayout) else shape
    if value.shape != tuple(expect):
        raise SizeError(f"input must have logical shape {tuple(expect)} for {t}, got "
                        f"{value.shape}")
    if isinstance(t.layout, LocalLayout):
        return [value[r] if shared else value[r].copy() for r in range(P)]
    if isinstance(t.layout, NodeSliced):  # local rank l of every node holds slice l
        parts = np.split(value, t.layout.per_node, axis=t.layout.dim)
        return [parts[r % t.layout.per_node] for r in range(P)]
    if isinstance(t.layout, Sliced):
        # Views, not fancy indexing: np.take with a range copies element by element (minutes
        # at 2^28 elements); np.split returns slices at once.
        return np.split(value, P, axis=t.layout.dim)
    return [value] * P if shared else [value.copy() for _ in range(P)]


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
                if a is not arrays[0] and not np.array_equal(a, arrays[0], equal_nan=True):
                    raise VerifyError(f"Replicated value '{name}' must be equal on every rank, "
                                      f"got rank {r} different from rank 0")
            return arrays[0]
    raise TypeError(t.layout)
