"""Statements and regions: `Stmt` (outs = op) and the two ops whose body is statements,
`Fused` (one kernel) and `Overlapped` (producer and consumer kernels, chunk by chunk). They live
in one module because each refers to the other; the plain ops are named only for types."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workbench.ir.expressions import Value

if TYPE_CHECKING:  # a statement holds any op; the union (ir.ops.Op) includes these regions
    from workbench.ir.ops import Op


@dataclass(frozen=True, slots=True)
class Stmt:
    """`outs = op`. A plain op defines one value; a Fused/Overlapped op defines every value
    of its body. `loc` is where the user wrote it (file:line), kept out of equality."""

    outs: tuple[Value, ...]
    op: Op
    loc: str = field(default="", compare=False)

    @property
    def out(self) -> Value:
        if len(self.outs) != 1:
            raise ValueError(f"statement defines {len(self.outs)} values, not one")
        return self.outs[0]

    @property
    def name(self) -> str:
        return self.outs[0].name if len(self.outs) == 1 else ",".join(v.name for v in self.outs)

    def rename(self, m: Mapping[str, str]) -> Stmt:
        """Rename the values this statement reads (not the ones it defines)."""
        return Stmt(self.outs, self.op.rename(m), self.loc)

    def leaves(self) -> Iterator[Stmt]:
        """The plain statements inside, in execution order (itself if it is plain)."""
        if isinstance(self.op, REGION_OPS):
            for s in self.op.body:
                yield from s.leaves()
        else:
            yield self


# Fused kernels: what each kind's body must look like, stage by stage (see Fused.infer).
FUSED_KINDS = ("compute", "allreduce", "reducescatter", "allgather", "send", "matmul",
               "reduce", "broadcast", "reducebroadcast", "alltoall")


@dataclass(frozen=True, slots=True)
class Fused:
    """Several statements executed by one kernel; meaning: run `body` in order.

    kind          | body pattern; C = elementwise (Compute, Update) or a reduction on slices
    --------------+----------------------------------------------------------------------
    compute       | C C+                      consecutive elementwise kernels as one
    allreduce     | ReduceScatter C* AllGather+   CoCoNet's FusedAllReduce
                  | AllReduce C+              the whole AllReduce, then computation on every
                  |                           row (C holds an axis reduction: a row kernel)
    reducescatter | ReduceScatter C+          the reduced slice is consumed in-kernel
    allgather     | C+ AllGather+             computed slices are gathered in-kernel
    send          | [ReduceScatter] C* Send   computation fused into the P2P transfer
    matmul        | MatMul E+                 an elementwise epilogue (Compute, Update) over
                  |                           the GEMM's output, in the GEMM or the kernel
                  |                           after it (ir.library_epilogue)
    reduce        | Reduce E+                 the root loads every peer's input and computes
    broadcast     | E+ Broadcast              the root computes and stores into every peer
    reducebroadcast | Reduce E* Broadcast     both: a parameter server's step in one kernel
    alltoall      | E* AllToAll E*            an MoE's exchange by peer loads inside an NVLink
                  |                           domain, with the computation before it (on the
                  |                           source's rows) and after it (on the received rows)

    "Reduction on slices" is Slice, Norm or ReduceTensor: a norm inside a fused collective
    needs a grid-wide, cross-GPU reduction of one scalar between the kernel's phases.
    C may also be ReduceAxis, which reduces each row where it is: a region holding one runs as
    a row kernel (codegen.lower_rows), each block reducing whole rows.
    """

    kind: str
    body: tuple[Stmt, ...]
    # Who moves a fused collective's bytes: "sm", the kernel itself by NVLink peer loads and
    # stores (CoCoNet's fused collectives); "copy", the GPU's copy engines, `chunks` pieces of
    # each rank's slice at a time, while a kernel without communication computes on the
    # pieces that have arrived (transforms.CopyEngines); "ring", NCCL's ring over the whole
    # group with the computation applied per chunk as it arrives (CoCoNet's form across nodes,
    # transforms.RingFuse: priced and simulated, not generated). Time, not meaning.
    engine: str = "sm"
    chunks: int = 1
    # How a FusedAllreduce that starts with a whole AllReduce (`AllReduce C+`, an axis
    # reduction among C) moves and synchronizes its bytes (transforms.AllReduceAlgorithm):
    # "two-shot" (reduce-scatter of rows by peer loads, the summed rows all-gathered by peer
    # stores, then the computation on every row: NCCL's bytes), "pipelined" (two-shot's
    # bytes, the computation on a share of the grid beside the communication), "one-shot"
    # (every rank loads every peer's whole input), "lamport" (one-shot by pushes into peers'
    # buffers that hold a poison value until the data lands: no barrier). Time, not meaning.
    algorithm: str = "two-shot"

    def operands(self):
        defined, used = set(), []
        for s in self.body:
            used += [n for n in s.op.operands() if n not in defined]
            defined.update(v.name for v in s.outs)
        return tuple(dict.fromkeys(used))

    def rename(self, m):
        return Fused(self.kind, tuple(s.rename(m) for s in self.body), self.engine, self.chunks,
                     self.algorithm)

    def __str__(self):
        via = {"copy": f"[copy engines, chunks={self.chunks}]", "ring": "[NCCL ring]"}.get(
            self.engine, "")
        if self.algorithm != "two-shot":
            via += f"[{self.algorithm}]"
        return f"Fused{self.kind.capitalize()}{via}"


@dataclass(frozen=True, slots=True)
class Overlapped:
    """Producer and consumer kernels that run concurrently, chunk by chunk.

    The body is [producer, consumer]: chunk i of the consumer starts when chunk i of the
    producer is done (CoCoNet's overlap of a MatMul with the AllReduce of its output).
    Meaning: run the body in order; `chunks` changes time, not values.
    """

    chunks: int
    body: tuple[Stmt, ...]

    def operands(self):
        return Fused.operands(self)  # same rule: uses not defined earlier in the body

    def rename(self, m):
        return Overlapped(self.chunks, tuple(s.rename(m) for s in self.body))

    def __str__(self):
        return f"Overlapped(chunks={self.chunks})"


REGION_OPS = (Fused, Overlapped)
