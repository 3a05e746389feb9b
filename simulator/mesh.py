"""Parallelism layouts: process groups as the axes of a device mesh (design note 33).

`Mesh.parse("tp=8,pp=4,dp=32")` names the axes in rank order: the first varies fastest, so
tp's 8 ranks are consecutive GPUs (inside a node of 8), pp's are 8 apart and dp's 32 apart
(strided across nodes). A group of axis `a` is the ranks that differ only in their
coordinate along `a`; there are world / size(a) of them, and they run at once.

`simulate_mesh` runs programs over named axes on one cluster: every group of each phase's
axis runs the phase's program (its one process group bound to that axis's size), every
rank of the cluster is simulated, and all of them share the network (simulator.network), so
concurrent groups slow each other where their flows meet (e.g. dp groups whose NICs a node
shares). Each program is priced on the view of the cluster its groups see (`Mesh.view`):
their ranks per node and nodes, so a dp group of one GPU per node is priced as NCCL runs it
there (over its GPU's NIC), not as if it had a node of its own.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sympy

from codegen.plan import Plan
from cost_model.hardware import Cluster
from simulator.engine import (
    COLLECT_RANKS,
    Environment,
    Shared,
    SimResult,
    Simulation,
    collector_paused,
    lowered_for,
)
from simulator.network import Network
from simulator.variability import Variability
from workbench.errors import WorkbenchError

if TYPE_CHECKING:  # annotations only: the simulator reads plans (decision 104)
    from workbench import ir


class MeshError(WorkbenchError):
    """A mesh that does not describe the cluster, or an axis it does not have."""


@dataclass(frozen=True, slots=True)
class Mesh:
    """Named axes and their sizes, in rank order (the first varies fastest)."""

    axes: tuple[tuple[str, int], ...]

    @classmethod
    def parse(cls, text: str) -> Mesh:
        """`tp=8,pp=4,dp=32` -> Mesh; a MeshError naming --mesh, what and the fix."""
        axes = []
        for part in text.split(","):
            name, eq, size = part.strip().partition("=")
            if not (eq and name.isidentifier() and size.strip().isdigit()
                    and int(size) >= 1):
                raise MeshError(f"--mesh must be AXIS=SIZE pairs separated by commas (a name, a "
                                f"positive integer), got {part.strip()!r} in {text!r}; e.g. "
                                "--mesh tp=8,dp=128")
            if name in dict(axes):
                raise MeshError(f"--mesh must name each axis once, got {name!r} twice in "
                                f"{text!r}; merge them into one size")
            axes.append((name, int(size)))
        return cls(tuple(axes))

    @property
    def size(self) -> int:
        """GPUs the mesh holds: the product of its axes' sizes."""
        return math.prod(n for _, n in self.axes)

    def __str__(self) -> str:
        return ",".join(f"{a}={n}" for a, n in self.axes)

    def check(self, cluster: Cluster) -> None:
        """Raise MeshError unless the mesh holds exactly the cluster's GPUs."""
        if self.size != cluster.world_size:
            sizes = " x ".join(f"{a}={n}" for a, n in self.axes)
            raise MeshError(f"--mesh must multiply to the cluster's {cluster.world_size} GPUs "
                            f"({cluster.name}), got {sizes} = {self.size}; change an axis so "
                            f"the product is {cluster.world_size}, or --nodes")

    def axis_size(self, axis: str) -> int:
        """The size of `axis`; a MeshError naming the axes there are."""
        sizes = dict(self.axes)
        if axis not in sizes:
            raise MeshError(f"--axis must be one of the mesh's axes ({', '.join(sizes)}), got "
                            f"{axis!r}; name one of them or add it to --mesh")
        return sizes[axis]

    def stride(self, axis: str) -> int:
        """How many ranks apart consecutive members of a group of `axis` are."""
        self.axis_size(axis)
        stride = 1
        for a, n in self.axes:
            if a == axis:
                break
            stride *= n
        return stride

    def groups(self, axis: str) -> list[list[int]]:
        """The ranks of every group of `axis`, each in its order along the axis."""
        size, stride = self.axis_size(axis), self.stride(axis)
        starts = [r for r in range(self.size) if (r // stride) % size == 0]
        return [[s + i * stride for i in range(size)] for s in starts]

    def instances(self, axis: str, stages: str | None = None) -> list[list[list[int]]]:
        """Where each copy of a program runs: per copy, per stage (along `stages`; one stage
        without it), the ranks of its group of `axis`."""
        if stages is None:
            return [[g] for g in self.groups(axis)]
        if stages == axis:
            raise MeshError(f"--stages must be another axis than --axis, got {axis!r} for both; "
                            "e.g. --axis tp --stages pp")
        n, stride = self.axis_size(stages), self.stride(stages)
        return [[[r + i * stride for r in g] for i in range(n)]
                for g in self.groups(axis) if (g[0] // stride) % n == 0]

    def view(self, cluster: Cluster, axis: str, stages: str | None = None) -> Cluster:
        """The cluster as one group of `axis` sees it: nodes of as many GPUs as it has ranks
        on a node, each GPU with its own share of the node's NICs, as many nodes as its copy
        of the program spans (all its stages: a Send crosses nodes when they do), which is
        what the cost model prices a group of P ranks by."""
        gpn = cluster.gpus_per_node
        copy = self.instances(axis, stages)[0]
        group = copy[0]
        nodes = len({r // gpn for stage in copy for r in stage})
        per_node = len(group) // len({r // gpn for r in group})
        if per_node == gpn and nodes == cluster.nodes:
            return cluster
        nic = dataclasses.replace(cluster.nic, bandwidth_Bps=cluster.nic_per_gpu_Bps)
        return dataclasses.replace(cluster, gpus_per_node=per_node, nodes=nodes,
                                   nics_per_node=0, nic=nic)


@dataclass(frozen=True)
class Phase:
    """A program run by every group of a mesh axis, with its sizes bound."""

    program: ir.Program
    axis: str
    bound: Mapping[sympy.Symbol, int]
    stages: str | None = None  # the axis a program of several groups (stages) runs along
    # the program lowered for the axis's ranks: every group runs its steps (decision 104);
    # None: lowered by simulate_mesh (simulator.engine.lowered_for)
    plan: Plan | None = None


def simulate_mesh(cluster: Cluster, mesh: Mesh, phases: list[Phase], concurrent: bool = False,
                  record: bool = True, variability: Variability | None = None,
                  sample: int = 0) -> SimResult:
    """Simulate `phases` on every rank of `cluster` laid out by `mesh` (module docstring):
    one after another on each rank, or all at once (`concurrent`: e.g. a data-parallel
    gradient reduction beside the next layer's tensor-parallel work)."""
    mesh.check(cluster)
    env = Environment()
    draw = (variability or Variability()).draw(cluster.world_size, sample)
    base = Shared(env, Network(env), cluster, lambda g, r: r, draw)
    per_rank: dict[int, list] = {r: [] for r in range(cluster.world_size)}
    for i, phase in enumerate(phases):
        copies = mesh.instances(phase.axis, phase.stages)
        groups = phase.program.groups()
        stages = 1 if phase.stages is None else mesh.axis_size(phase.stages)
        if len(groups) != stages:
            got = f"--stages {phase.stages} of {stages}" if phase.stages else "no --stages"
            raise MeshError(f"--stages must name an axis of as many ranks as the program has "
                            f"process groups (stages), got {len(groups)} group(s) "
                            f"({', '.join(map(str, groups))}) and {got} in phase {i}; pass "
                            f"--stages AXIS with an axis of {len(groups)}")
        view = mesh.view(cluster, phase.axis, phase.stages)
        prices: dict = {}  # the copies of a program run the same steps: priced once
        plan = phase.plan if phase.plan is not None else lowered_for(phase.program, phase.bound)
        index = {g: k for k, g in enumerate(groups)}
        for copy in copies:
            shared = dataclasses.replace(
                base, placement=lambda g, r, c=copy, k=index: c[k[g]][r])
            sim = Simulation(phase.program, view, phase.bound, reduced=False, record=record,
                             shared=shared, plan=plan)
            sim.prices = prices
            for g, members in zip(groups, copy):
                if sim.ranks[g] != len(members):
                    raise MeshError(f"phase {i}'s group must have the {phase.axis} axis's "
                                    f"{len(members)} ranks, got {sim.ranks[g]}; bind P to "
                                    f"{len(members)}")
                for r, gid in enumerate(members):
                    per_rank[gid].append((sim, g, r))

    def rank(parts):
        if concurrent:
            yield env.all_of([env.process(sim.rank_process(g, r)) for sim, g, r in parts])
        else:
            for sim, g, r in parts:
                yield from sim.rank_process(g, r)

    with collector_paused(collect=cluster.world_size > COLLECT_RANKS):
        env.run(env.all_of([env.process(rank(parts)) for parts in per_rank.values()]))
    gpus = base.gpus.values()
    busiest = max(gpus, key=lambda x: max(x.busy.values()))
    return SimResult(float(env.now), base.rows, len(base.gpus), cluster.world_size, False,
                     dict(busiest.busy), env.events)
