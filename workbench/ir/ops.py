"""The IR's op union and op-kind tuples. The ops live by kind: `computation` (elementwise,
Slice, MatMul, reductions), `communication` (collectives, Send), `regions` (Stmt, Fused,
Overlapped); each class carries its result-type rule. Every op is re-exported here."""

from __future__ import annotations

import typing

from workbench.ir.communication import (  # noqa: F401
    COLLECTIVES,
    AllGather,
    AllReduce,
    AllToAll,
    Broadcast,
    Collective,
    Reduce,
    ReduceScatter,
    Send,
    collective_named,
    collective_of,
)
from workbench.ir.computation import (  # noqa: F401
    AXIS_REDUCTIONS,
    Compute,
    Gather,
    MatMul,
    Norm,
    ReduceAxis,
    ReduceTensor,
    Slice,
    TopK,
    Update,
)
from workbench.ir.regions import FUSED_KINDS, REGION_OPS, Fused, Overlapped  # noqa: F401

Op = (Compute | Update | AllReduce | ReduceScatter | AllGather | Broadcast | Reduce | Send
      | AllToAll | Slice | MatMul | ReduceTensor | Norm | ReduceAxis | Gather | TopK | Fused
      | Overlapped)
# Every op class: each layer's rule table has an entry for each (tests check it), so a new op
# joins the Op union above and then one table per layer.
OP_CLASSES: tuple[type, ...] = typing.get_args(Op)


COMMUNICATION_OPS = (AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, Send, AllToAll)


ELEMENTWISE_OPS = (Compute, Update)


# The index ops (design decision 106): each its own kernel, never inside a fused region.
INDEX_OPS = (Gather, TopK)


# What may sit between the collective stages of a fused kernel.
FUSABLE_COMPUTATION = (Compute, Update, Slice, Norm, ReduceTensor, ReduceAxis)
