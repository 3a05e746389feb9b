"""Where a program's ranks sit, as far as the core needs to know it: nodes of `gpus_per_node`
GPUs, each node one NVLink domain. The verifier reads it to refuse schedules a cluster cannot
run (a fused peer-memory collective over GPUs of several nodes), and the autotuner to propose
only runnable ones and the node-level (hierarchical) split. `cost_model.hardware.Cluster.
placement(sizes)` makes one from a cluster; the core never imports the cost model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sympy

from workbench.types import Group


@dataclass(frozen=True, slots=True)
class Placement:
    """`nodes` nodes of `gpus_per_node` GPUs named `name`; `sizes` binds the size symbols
    (at least the group sizes, e.g. P) as (name, value) pairs."""

    name: str
    nodes: int
    gpus_per_node: int
    sizes: tuple[tuple[str, int], ...] = ()

    @staticmethod
    def of(name: str, nodes: int, gpus_per_node: int, sizes: Mapping[str, int]) -> Placement:
        """A Placement with `sizes` given as a mapping."""
        return Placement(name, nodes, gpus_per_node,
                         tuple(sorted((k, int(v)) for k, v in sizes.items())))

    def group_size(self, group: Group) -> int | None:
        """The group's size in GPUs, or None when the sizes do not bind it."""
        bound = {sympy.Symbol(k, integer=True, positive=True): v for k, v in self.sizes}
        value = sympy.sympify(group.size).subs(bound)
        return int(value) if value.is_Integer else None
