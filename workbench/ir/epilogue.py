"""MatMul epilogues that a GEMM library runs inside the GEMM (cuBLASLt's epilogues, reached
through torch: `addmm`'s bias, `_addmm_activation`'s bias + ReLU and bias + GeLU (tanh
form)): recognised here once, so the cost model, the simulator and codegen agree on which
fused MatMul regions write only the epilogue's result (design note 46)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from workbench.ir.expressions import Binary, Const, Expr, Ref, Unary, expr_refs, proven_equal
from workbench.ir.ops import Compute, MatMul
from workbench.types import ReplicatedLayout, Sliced, TensorType

LIBRARY_EPILOGUES = ("bias", "bias_relu", "bias_gelu_tanh")


def gelu_tanh_of(x: Expr) -> Expr:
    """The expression workbench.gelu_tanh(x) traces to (a test keeps the two in step)."""
    cube = Binary("mul", Binary("mul", Binary("mul", Const(0.044715), x), x), x)
    inner = Binary("mul", Const(0.7978845608028654), Binary("add", x, cube))
    return Binary("mul", Binary("mul", Const(0.5), x),
                  Binary("add", Const(1.0), Unary("tanh", inner)))


_SHAPES = {
    "bias": lambda x: x,
    "bias_relu": lambda x: Binary("max", x, Const(0.0)),
    "bias_gelu_tanh": gelu_tanh_of,
}


@dataclass(frozen=True, slots=True)
class LibraryEpilogue:
    """A fused MatMul region the GEMM library computes whole: `kind` (LIBRARY_EPILOGUES) with
    the 1-D `bias` added to every row."""

    kind: str
    bias: str


def library_epilogue(body, types: Mapping[str, TensorType]) -> LibraryEpilogue | None:
    """The library epilogue a fused MatMul region's body (MatMul, then its epilogue) is, or
    None: one Compute of the MatMul's dtype that is f(mm + b) for f in identity, ReLU
    (max(., 0)) or GeLU-tanh, with b a 1-D bias over the output's (local) columns."""
    if len(body) != 2 or not isinstance(body[0].op, MatMul) or not isinstance(body[1].op,
                                                                             Compute):
        return None
    mm, epi = body
    out = mm.out.type
    if epi.out.type.dtype != out.dtype:
        return None
    expr = epi.op.expr
    for bias in dict.fromkeys(n for n in expr_refs(expr) if n != mm.out.name):
        if not _is_bias(types[bias], out):
            continue
        for x in (Binary("add", Ref(mm.out.name), Ref(bias)),
                  Binary("add", Ref(bias), Ref(mm.out.name))):
            for kind, shape in _SHAPES.items():
                if shape(x) == expr:
                    return LibraryEpilogue(kind, bias)
    return None


def _is_bias(b: TensorType, out: TensorType) -> bool:
    """A bias over the output's columns, held per rank as the rank's columns are: Replicated
    for whole rows, Sliced(0) for a column-parallel (Sliced(last)) output."""
    if b.rank != 1 or b.dtype != out.dtype or not proven_equal(b.shape[0], out.shape[-1]):
        return False
    if out.layout == Sliced(out.rank - 1):
        return b.layout == Sliced(0)
    return isinstance(b.layout, ReplicatedLayout)
