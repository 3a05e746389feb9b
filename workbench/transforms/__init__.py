"""Semantics-preserving transforms: pure functions Program -> Program.

Each transform is a frozen dataclass with a kebab-case `name` and its parameters as fields, and
    check(program) -> Legality    ok, or the reason it does not apply (never raises)
    apply(program) -> Program     the rewritten, verified program (raises IllegalTransform)
Parameters refer to values by name, so a transform serialises to JSON (`to_json`) and replays.

The CoCoNet set, on SGD (`g1 = AllReduce(Sum, g); w1 = Update(w, w - lr * g1)`):

    split(g1)                 g1_rs = ReduceScatter(Sum, g)      ; Sliced(0)
                              g1 = AllGather(g1_rs)
                              w1 = Update(w, w - lr * g1)
    reorder(w1, before=g1)    g1_rs = ReduceScatter(Sum, g)
                              w1_s = Update(w, w - lr * g1_rs)   ; the update runs on slices
                              w1 = AllGather(w1_s)
    fuse(g1_rs, w1_s, w1)     g1_rs, w1_s, w1 = FusedAllreduce { ...the three above... }

plus as-slice (state that each rank only needs a slice of), overlap (producer/consumer at chunk
granularity), dead-code elimination, and hierarchical-split (AllReduce -> ReduceScatter inside
each node, AllReduce of the slice across nodes, AllGather inside each node: fusion across
nodes; module `hierarchy`, design note 35). Every transform is checked against the reference
interpreter in tests/workbench/test_transforms.py. Modules: `base` (Legality, Transform, shared
helpers), `slicing` (split, reorder, as-slice), `fusion` (fuse, overlap, copy engines, dce).
"""

from __future__ import annotations

from dataclasses import fields

from workbench.errors import WorkbenchError
from workbench.transforms.algorithm import ALLREDUCE_ALGORITHMS, AllReduceAlgorithm
from workbench.transforms.base import Legality, Transform, dead_code_eliminated
from workbench.transforms.fusion import CopyEngines, DeadCodeElimination, Fuse, Overlap
from workbench.transforms.hierarchy import HierarchicalSplit
from workbench.transforms.slicing import AsSlice, Reorder, Split

TRANSFORMS = {t.name: t for t in (Split, Reorder, AsSlice, Fuse, Overlap, CopyEngines,
                                  DeadCodeElimination, HierarchicalSplit, AllReduceAlgorithm)}


# The field types transforms have, as their annotations spell them, and what each needs.
_WHAT = {"str": "a name (a string)", "tuple[str, ...]": "a list of names (strings)",
         "str | None": "a name or null", "int": "an integer"}


def _fits(value, type_name: str) -> bool:
    if type_name == "str":
        return isinstance(value, str)
    if type_name == "str | None":
        return value is None or isinstance(value, str)
    if type_name == "tuple[str, ...]":
        return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
    if type_name == "int":
        return type(value) is int
    return False  # a field type this check does not know: refuse rather than guess


def transform_from_json(data: dict) -> Transform:
    """Rebuild a transform from `to_json()` output (tuples come back from JSON lists)."""
    data = dict(data)
    name = data.pop("transform", None)
    if name not in TRANSFORMS:
        raise WorkbenchError(f"transform must be one of {sorted(TRANSFORMS)}, got {name!r}")
    cls = TRANSFORMS[name]
    types = {f.name: f.type for f in fields(cls)}
    for key, value in data.items():  # a file's values, checked before a transform sees them
        if key in types and not _fits(value, types[key]):
            raise WorkbenchError(f"transform {name} field {key} must be {_WHAT[types[key]]}, "
                                 f"got {value!r:.60}; write the file with workbench schedules "
                                 "--autotune --json")
    args = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    try:
        return cls(**args)
    except TypeError as e:
        raise WorkbenchError(f"transform {name} record must have fields "
                             f"{[f.name for f in fields(cls)]}, got {sorted(data)}: {e}") from None


__all__ = ["ALLREDUCE_ALGORITHMS", "AllReduceAlgorithm", "AsSlice", "CopyEngines",
           "DeadCodeElimination", "Fuse", "HierarchicalSplit",
           "Legality", "Overlap",
           "Reorder", "Split", "TRANSFORMS", "Transform", "dead_code_eliminated",
           "transform_from_json"]
