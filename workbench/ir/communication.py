"""The IR's communication ops, one frozen class each with its result-type rule: the
collectives over a group (or a node-level sub-group), the all-to-all exchange of MoE layers,
and the pipeline's Send."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.errors import LayoutError, ShapeError
from workbench.ir.computation import require_layout
from workbench.ir.expressions import (
    ReduceOp,
    proven_equal,
)
from workbench.types import (
    Group,
    LocalLayout,
    NodeSliced,
    OnRoot,
    Replicated,
    Sliced,
    SubGroup,
)


def _sub_str(sub: SubGroup | None) -> str:
    return "" if sub is None else f", over={sub}"


@dataclass(frozen=True, slots=True)
class AllReduce:
    """Reduce a Local tensor over the group; every rank gets the Replicated result.

    With `sub` = SubGroup("inter", g) it reduces a NodeSliced(dim, g, partial) tensor over the
    ranks of one local rank on every node (each node's partial sums of one slice): the
    result is NodeSliced(dim, g), the same on every node (design note 35).
    """

    op: ReduceOp
    x: str
    sub: SubGroup | None = None

    def operands(self) -> tuple[str, ...]:
        return (self.x,)

    def rename(self, m):
        return AllReduce(self.op, m.get(self.x, self.x), self.sub)

    def infer(self, env, what):
        t = env[self.x]
        if self.sub is None:
            require_layout(what, t, (LocalLayout,), "only per-rank (Local) values need reducing")
            return t.with_(layout=Replicated)
        want = (self.sub.axis == "inter" and isinstance(t.layout, NodeSliced)
                and not t.layout.reduced and t.layout.per_node == self.sub.per_node)
        if not want:
            raise LayoutError(f"{what}: an AllReduce over {self.sub} must read a partial "
                              f"NodeSliced(dim, {self.sub.per_node}) value over inter, got "
                              f"{t.layout} over {self.sub}; reduce inside each node first "
                              f"(ReduceScatter over intra({self.sub.per_node}))")
        return t.with_(layout=NodeSliced(t.layout.dim, t.layout.per_node, reduced=True))

    def __str__(self):
        return f"AllReduce({self.op}, {self.x}{_sub_str(self.sub)})"


@dataclass(frozen=True, slots=True)
class ReduceScatter:
    """Reduce a Local tensor over the group; rank r gets slice r (Sliced(dim)).

    With `sub` = SubGroup("intra", g) it reduces over the g ranks of each node only: local
    rank l gets slice l of its node's partial sum, NodeSliced(dim, g, partial).
    """

    op: ReduceOp
    x: str
    dim: int = 0
    sub: SubGroup | None = None

    def operands(self):
        return (self.x,)

    def rename(self, m):
        return ReduceScatter(self.op, m.get(self.x, self.x), self.dim, self.sub)

    def infer(self, env, what):
        t = env[self.x]
        require_layout(what, t, (LocalLayout,), "only per-rank (Local) values need reducing")
        if not 0 <= self.dim < t.rank:
            raise ShapeError(f"{what}: dim must be in [0, {t.rank}), got {self.dim}")
        if self.sub is None:
            return t.with_(layout=Sliced(self.dim))
        if self.sub.axis != "intra":
            raise LayoutError(f"{what}: a ReduceScatter over a sub-group must run over intra, "
                              f"got {self.sub}")
        return t.with_(layout=NodeSliced(self.dim, self.sub.per_node, reduced=False))

    def __str__(self):
        dim = f", dim={self.dim}" if self.dim else ""
        return f"ReduceScatter({self.op}, {self.x}{dim}{_sub_str(self.sub)})"


@dataclass(frozen=True, slots=True)
class AllGather:
    """Gather the slices of a Sliced tensor; every rank gets the whole (Replicated) tensor.

    With `sub` = SubGroup("intra", g) it gathers a NodeSliced(dim, g) tensor inside each node.
    """

    x: str
    sub: SubGroup | None = None

    def operands(self):
        return (self.x,)

    def rename(self, m):
        return AllGather(m.get(self.x, self.x), self.sub)

    def infer(self, env, what):
        t = env[self.x]
        if self.sub is None:
            if isinstance(t.layout, NodeSliced):
                raise LayoutError(f"{what}: a NodeSliced value must be gathered inside each "
                                  f"node, got an AllGather over the whole group; use "
                                  f"AllGather(x, sub=SubGroup('intra', {t.layout.per_node}))")
            require_layout(what, t, (Sliced,), "gather only what is sliced")
            return t.with_(layout=Replicated)
        want = (self.sub.axis == "intra" and isinstance(t.layout, NodeSliced)
                and t.layout.reduced and t.layout.per_node == self.sub.per_node)
        if not want:
            raise LayoutError(f"{what}: an AllGather over {self.sub} must read a reduced "
                              f"NodeSliced(dim, {self.sub.per_node}) value over intra, got "
                              f"{t.layout} over {self.sub}")
        return t.with_(layout=Replicated)

    def __str__(self):
        return f"AllGather({self.x}{_sub_str(self.sub)})"


@dataclass(frozen=True, slots=True)
class Broadcast:
    """Copy rank `root`'s tensor to every rank."""

    x: str
    root: int = 0

    def operands(self):
        return (self.x,)

    def rename(self, m):
        return Broadcast(m.get(self.x, self.x), self.root)

    def infer(self, env, what):
        t = env[self.x]
        require_layout(what, t, (LocalLayout, OnRoot), "broadcast a per-rank value")
        return t.with_(layout=Replicated)

    def __str__(self):
        return f"Broadcast({self.x}, root={self.root})"


@dataclass(frozen=True, slots=True)
class Reduce:
    """Reduce a Local tensor over the group onto rank `root` only."""

    op: ReduceOp
    x: str
    root: int = 0

    def operands(self):
        return (self.x,)

    def rename(self, m):
        return Reduce(self.op, m.get(self.x, self.x), self.root)

    def infer(self, env, what):
        t = env[self.x]
        require_layout(what, t, (LocalLayout,), "only per-rank (Local) values need reducing")
        return t.with_(layout=OnRoot(self.root))

    def __str__(self):
        return f"Reduce({self.op}, {self.x}, root={self.root})"


@dataclass(frozen=True, slots=True)
class Send:
    """Send each rank's tensor to the same rank of the next pipeline stage's group."""

    x: str
    dst: Group

    def operands(self):
        return (self.x,)

    def rename(self, m):
        return Send(m.get(self.x, self.x), self.dst)

    def infer(self, env, what):
        t = env[self.x]
        if t.group == self.dst:
            raise LayoutError(f"{what}: Send must go to another group, got its own {self.dst}")
        if not proven_equal(t.group.size, self.dst.size):
            raise LayoutError(f"{what}: the destination group must have the source's size "
                              f"{t.group.size}, got {self.dst}")
        return t.with_(group=self.dst)

    def __str__(self):
        return f"Send({self.x}, to={self.dst.name})"


@dataclass(frozen=True, slots=True)
class AllToAll:
    """Each rank splits its Local tensor into P equal blocks along `dim` and sends block j to
    rank j, which stores what rank s sent as its block s: an MoE layer's dispatch (tokens to
    the rank of their expert, routed with per-destination counts fixed at trace time: the
    capacity of each expert) and its combine (the same exchange back). Local -> Local, same
    shape; `dim` must divide by the group size (the verifier asks for the proof).
    """

    x: str
    dim: int = 0

    def operands(self):
        return (self.x,)

    def rename(self, m):
        return AllToAll(m.get(self.x, self.x), self.dim)

    def infer(self, env, what):
        t = env[self.x]
        require_layout(what, t, (LocalLayout,), "each rank exchanges its own blocks")
        if not 0 <= self.dim < t.rank:
            raise ShapeError(f"{what}: dim must be in [0, {t.rank}) for a tensor of rank "
                             f"{t.rank}, got {self.dim}")
        return t

    def __str__(self):
        return f"AllToAll({self.x}" + (f", dim={self.dim})" if self.dim else ")")


# ---------------------------------------------------------------- one name table


@dataclass(frozen=True, slots=True)
class Collective:
    """The names and buffer shape of one collective, the one place they are written (design
    note 96).

    op: the IR class that means it.
    kind: the workbench's name: a Fused region's kind where one collective names it, the cost
        model's (`cost_model.collectives`, the NCCL tuning's per-kind latencies) and the
        calibration tables' columns ("allreduce").
    nccl: NCCL's function, as nccl-tests, the plan (`codegen.plan.NcclStep.op`, printed in
        the generated sources) and the runtime's calls name it ("all_reduce").
    whole_src, whole_dst: the side whose buffer holds every rank's part (P counts of the
        step's per-rank count; NCCL's convention): a reduce-scatter's source, an
        all-gather's destination.
    """

    op: type
    kind: str
    nccl: str
    whole_src: bool = False
    whole_dst: bool = False

    def counts(self, count, P):
        """(source, destination) elements of one call on `count` elements per rank."""
        return count * (P if self.whole_src else 1), count * (P if self.whole_dst else 1)


COLLECTIVES: tuple[Collective, ...] = (
    Collective(AllReduce, "allreduce", "all_reduce"),
    Collective(ReduceScatter, "reducescatter", "reduce_scatter", whole_src=True),
    Collective(AllGather, "allgather", "all_gather", whole_dst=True),
    Collective(Broadcast, "broadcast", "broadcast"),
    Collective(Reduce, "reduce", "reduce"),
    Collective(AllToAll, "alltoall", "all_to_all"),
)
_BY_OP = {c.op: c for c in COLLECTIVES}
_BY_NCCL = {c.nccl: c for c in COLLECTIVES}


def collective_of(op) -> Collective:
    """The Collective an IR collective op (or op class) means."""
    return _BY_OP[op if isinstance(op, type) else type(op)]


def collective_named(nccl: str) -> Collective:
    """The Collective of an NCCL function name (a plan's NcclStep.op); KeyError if none."""
    return _BY_NCCL[nccl]
