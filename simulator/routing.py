"""Routes of transfers on the network (simulator.network): which links of a GPU a collective,
a Send or a fused kernel's peer accesses hold, at what weight, and the leaf uplinks of the
fabric. A mixin of simulator.engine.Simulation."""

from __future__ import annotations

from cost_model import collectives as coll
from simulator.network import Route
from simulator.resources import _Gpu


class Routing:
    """The routes of one Simulation's transfers (see the module docstring)."""

    def _uses(self, gpu: _Gpu, g, crosses: bool | None = None, peer: int | None = None
              ) -> Route:
        """The route of a transfer of `gpu` (simulator.network): inside a node its NVLink at
        NVLink's bandwidth; a collective of group `g` across nodes (or a Send that `crosses`
        nodes, to GPU `peer`) at the path's bandwidth, over its NVLink and its NIC, which
        carries the rank's part of the collective's node traffic (the ring's bus bandwidth,
        over the group's ranks on the node), and where the group (or the Send) spans leaves
        of the fabric, its leaf's uplink on its rail (`_uplink`). g None: a fused kernel's
        peer loads and stores (NVLink)."""
        key = ("uses", gpu.id, g, crosses)
        route = self.prices.get(key)
        if route is not None:
            return route
        phys = self.physical
        nvlink_bw = phys.nvlink.bandwidth_Bps
        nvlink = ("nvlink", gpu.id)
        if g is None or crosses is False:
            nodes, bw, per_node = 1, nvlink_bw, 1
        elif crosses:
            nodes, bw, per_node = 2, min(phys.nic_per_gpu_Bps, nvlink_bw), 1
        else:
            nodes, bw, per_node = self._group_route(g)
        links = {nvlink: (1.0, nvlink_bw)}
        if nodes > 1:
            gpn = phys.gpus_per_node
            nics = phys.nics_per_node or gpn
            rail = (gpu.id % gpn) * nics // gpn
            # the fabric delivers this fraction of line rate over the group's nodes
            # (Fabric.efficiency_at), on the NIC and on the uplinks alike
            eff = phys.fabric.efficiency_at(nodes)
            links[("nic", gpu.id // gpn, rail)] = (1.0 / per_node, phys.nic.bandwidth_Bps * eff)
            npl = phys.fabric.nodes_per_leaf
            leaf = gpu.id // gpn // npl
            if crosses:
                spans = peer is not None and peer // gpn // npl != leaf
                weight = 1.0
            else:
                leaves = self._leaf_nodes(g)
                spans = len(leaves) > 1
                # one ring crossing per leaf: the leaf's part of the group's node traffic
                weight = 1.0 / per_node / leaves.get(leaf, 1)
            if spans:
                links[self._uplink(rail, leaf)] = (weight, self._uplink_Bps() * eff)
        route = self.prices[key] = Route(links, bw)
        return route

    def _group_route(self, g) -> tuple[int, float, int]:
        """(nodes, bandwidth alone in bytes/s, ranks per node) of a collective of group `g`:
        what every rank's route shares, worked out once per group, not once per rank."""
        key = ("group_route", g)
        known = self.prices.get(key)
        if known is None:
            size = self.ctx.group_size(g)
            path = coll.group_path(self.cluster, size)
            known = self.prices[key] = (
                path.nodes, min(path.bandwidth_Bps, self.physical.nvlink.bandwidth_Bps),
                max(1, size // path.nodes))
        return known

    def _uplink(self, rail: int, leaf: int):
        """The uplinks of a leaf switch: one per rail on a rail-optimized fabric (each rail a
        fat tree of its own), one for all of a leaf's NICs on a plain fat tree."""
        rail_optimized = self.physical.fabric.kind == "rail-optimized"
        return ("uplink", rail if rail_optimized else 0, leaf)

    def _uplink_Bps(self) -> float:
        """A leaf's uplink bandwidth (of one rail where rails are separate): its nodes' NICs
        on it over the fabric's oversubscription."""
        phys = self.physical
        per_leaf = phys.nic.bandwidth_Bps * phys.fabric.nodes_per_leaf
        if phys.fabric.kind != "rail-optimized":
            per_leaf *= phys.nics_per_node or phys.gpus_per_node
        return per_leaf / phys.fabric.oversubscription

    def _leaf_nodes(self, g) -> dict:
        """Leaf -> how many nodes of group `g` (as placed) are under it."""
        key = ("leaves", g, id(self))  # prices may be shared by copies placed elsewhere
        leaves = self.prices.get(key)
        if leaves is None:
            gpn = self.physical.gpus_per_node
            npl = self.physical.fabric.nodes_per_leaf
            nodes = {self.placement(g, r) // gpn for r in range(self.ctx.group_size(g))}
            leaves = {}
            for node in nodes:
                leaves[node // npl] = leaves.get(node // npl, 0) + 1
            self.prices[key] = leaves
        return leaves
