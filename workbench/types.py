"""Element types, layouts, process groups and tensor types of the IR.

All are frozen, slotted dataclasses holding only hashable fields, so equality and hashing
come for free and values can be used as dict keys and compared structurally.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from workbench.errors import DTypeError

# ---------------------------------------------------------------- symbols


def size_symbol(name: str) -> sympy.Symbol:
    """The one way to make a size symbol: a positive integer, so sympy can reason about it."""
    return sympy.Symbol(name, integer=True, positive=True)


Shape = tuple[sympy.Expr, ...]


def as_shape(dims) -> Shape:
    """Normalise a user shape (ints, sympy expressions) into a tuple of sympy integers."""
    return tuple(sympy.sympify(d) for d in dims)


def shape_str(shape: Shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


# ---------------------------------------------------------------- dtypes


@dataclass(frozen=True, slots=True)
class DType:
    """An element type; `nbytes` per element, `c_name` as generated CUDA spells it."""

    name: str
    nbytes: int
    c_name: str
    is_float: bool = True

    def __str__(self) -> str:
        return self.name


float16 = DType("f16", 2, "__half")
bfloat16 = DType("bf16", 2, "__nv_bfloat16")
float32 = DType("f32", 4, "float")
int32 = DType("i32", 4, "int", is_float=False)

DTYPES: dict[str, DType] = {d.name: d for d in (float16, bfloat16, float32, int32)}
# Long spellings accepted on the command line and in profile files.
DTYPES.update({"float16": float16, "bfloat16": bfloat16, "float32": float32, "int32": int32})

# Widening order for arithmetic promotion among tensors (PyTorch's rule: among operands of
# rank > 0 the widest float wins; f16 with bf16 has no exact common half type, so f32).
_FLOAT_RANK = {float16: 1, bfloat16: 1, float32: 2}


def promote(a: DType, b: DType) -> DType:
    """The dtype of an elementwise op on two tensors of dtypes a and b."""
    if a == b:
        return a
    if not (a.is_float and b.is_float):
        raise DTypeError(
            f"elementwise operands must both be float or share a dtype, got {a} and {b}; "
            "insert Cast(...) to make them agree"
        )
    if _FLOAT_RANK[a] == _FLOAT_RANK[b]:
        return float32
    return a if _FLOAT_RANK[a] > _FLOAT_RANK[b] else b


# ---------------------------------------------------------------- layouts


@dataclass(frozen=True, slots=True)
class LocalLayout:
    """Every rank holds a whole tensor of its own (a gradient before AllReduce)."""

    def __str__(self) -> str:
        return "Local"


@dataclass(frozen=True, slots=True)
class ReplicatedLayout:
    """Every rank holds the same whole tensor (weights)."""

    def __str__(self) -> str:
        return "Replicated"


@dataclass(frozen=True, slots=True)
class Sliced:
    """Rank r holds the r-th of P equal slices along `dim` of the logical tensor."""

    dim: int

    def __str__(self) -> str:
        return f"Sliced({self.dim})"


@dataclass(frozen=True, slots=True)
class OnRoot:
    """Only rank `root` holds the value (the result of a Reduce); other ranks hold nothing."""

    root: int

    def __str__(self) -> str:
        return f"OnRoot({self.root})"


@dataclass(frozen=True, slots=True)
class SubGroup:
    """One axis of a group factored as nodes x `per_node` ranks (rank r is local rank
    r % per_node of node r // per_node): "intra" is the per_node ranks of one node, "inter"
    the ranks of one local rank on every node. A collective with `sub` runs on every such
    sub-group at once (design note 35)."""

    axis: str
    per_node: int

    def __post_init__(self):
        if self.axis not in ("intra", "inter"):
            raise ValueError(f"sub-group axis must be 'intra' or 'inter', got {self.axis!r}")
        if not (isinstance(self.per_node, int) and self.per_node >= 1):
            raise ValueError(f"sub-group per_node must be a positive int, got {self.per_node!r}")

    def __str__(self) -> str:
        return f"{self.axis}({self.per_node})"


@dataclass(frozen=True, slots=True)
class NodeSliced:
    """The group factored as nodes x `per_node` ranks: rank r holds slice r % per_node of
    per_node equal slices along `dim`. `reduced` False: each node holds its own values (an
    intra-node ReduceScatter's partial sums, Local across nodes); True: every node holds the
    same slices (after the AllReduce across nodes), so an intra-node AllGather makes the
    tensor Replicated."""

    dim: int
    per_node: int
    reduced: bool = True

    def __str__(self) -> str:
        part = "" if self.reduced else ", partial"
        return f"NodeSliced({self.dim}, {self.per_node}{part})"


Local = LocalLayout()
Replicated = ReplicatedLayout()
Layout = LocalLayout | ReplicatedLayout | Sliced | OnRoot | NodeSliced


# ---------------------------------------------------------------- groups


@dataclass(frozen=True, slots=True)
class Group:
    """A process group: `size` ranks that run one program (a pipeline stage is a group)."""

    name: str
    size: sympy.Expr

    def __str__(self) -> str:
        return f"{self.name}({self.size})"


P = size_symbol("P")
WORLD = Group("world", P)


# ---------------------------------------------------------------- tensor type


@dataclass(frozen=True, slots=True)
class TensorType:
    """dtype, logical (global) shape, layout and group of a value. Scalars have shape ()."""

    dtype: DType
    shape: Shape
    layout: Layout
    group: Group

    @property
    def rank(self) -> int:
        return len(self.shape)

    def local_shape(self) -> Shape:
        """The shape each rank holds: the Sliced dim divided by the group size (a NodeSliced
        one by the ranks per node)."""
        if isinstance(self.layout, (Sliced, NodeSliced)):
            d = self.layout.dim
            parts = self.group.size if isinstance(self.layout, Sliced) else self.layout.per_node
            return self.shape[:d] + (self.shape[d] / parts,) + self.shape[d + 1 :]
        return self.shape

    def numel(self) -> sympy.Expr:
        return sympy.Mul(*self.shape) if self.shape else sympy.Integer(1)

    def size_symbols(self) -> set[sympy.Symbol]:
        """The size symbols in the shape and the group's size."""
        symbols: set[sympy.Symbol] = set()
        for d in (*self.shape, self.group.size):
            symbols |= sympy.sympify(d).free_symbols
        return symbols

    def nbytes(self) -> sympy.Expr:
        return self.numel() * self.dtype.nbytes

    def with_(self, **changes) -> TensorType:
        fields = {"dtype": self.dtype, "shape": self.shape, "layout": self.layout,
                  "group": self.group}
        fields.update(changes)
        return TensorType(**fields)

    def __str__(self) -> str:
        group = "" if self.group == WORLD else f" @{self.group.name}"
        return f"{self.dtype}{shape_str(self.shape)} {self.layout}{group}"
