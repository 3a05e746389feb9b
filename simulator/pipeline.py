"""Schedules across nodes as processes: the pipelined hierarchy and CoCoNet's ring-fused
collective.

The pipelined hierarchy (workbench.transforms.PipelineHierarchy; priced in
closed form by cost_model.ops.pipeline): its three legs run as three processes, piece by
piece, piece c of a leg starting when piece c of the leg before it is done. Each piece runs
by the leg's own rule (simulator.rules) on 1/chunks of the data, so it holds what the leg
holds: the node ReduceScatter and the fused update + gather take turns on the GPU's NVLink
(`gpu.link`, and the NVLink flow), the AllReduce across nodes holds the GPU's NIC
(`Routing._nic_route`), and the SMs are shared as the legs take them. Nothing here is a
formula: the durations are the cost model's.

The ring-fused collective (workbench.transforms.RingFuse) runs NCCL's ring plan that
cost_model.ops.network_fused picks, on the group's route (NVLink, NIC, uplinks, as a flat
collective), then holds the HBM for the computation the ring does not hide.

A mixin of simulator.engine.Simulation.
"""

from __future__ import annotations

from cost_model.hardware import Cluster
from simulator.network import Route
from simulator.resources import MAX_STEP_EVENTS


class Pipelines:
    """The pipelined hierarchy's processes (see the module docstring)."""

    def _nic_route(self, gpu) -> Route:
        """The route of a collective across nodes over one rank per node (a hierarchical
        split's middle leg): the GPU's rail NIC, at the NIC's share per GPU (not NVLink:
        GPUDirect RDMA moves the bytes between the GPU and its NIC over PCIe)."""
        key = ("nic_route", gpu.id)
        route = self.prices.get(key)
        if route is None:
            phys: Cluster = self.physical
            gpn = phys.gpus_per_node
            nics = phys.nics_per_node or gpn
            rail = (gpu.id % gpn) * nics // gpn
            route = self.prices[key] = Route(
                {("nic", gpu.id // gpn, rail): (1.0, phys.nic.bandwidth_Bps)},
                phys.nic_per_gpu_Bps)
        return route

    def _ring(self, g, r: int, gpu, priced, name: str, key, scale: float = 1.0):
        """A ring-fused collective: NCCL's ring plan on the group's route, then the
        computation the ring does not hide (`priced`: cost_model.ops.network_fused.ring_plan),
        of a statement or of a plan's RingFusedStep."""
        plan, tail_s = priced
        take = yield from self._take_sms(gpu, int(plan.channels) or 1)
        yield self.env.timeout(float(plan.fixed_s))
        steps = int(plan.steps)
        step_s = float(plan.step_s) * scale * gpu.link_factor * self.draw.jitter()
        if steps and self.reduced:
            batches = min(steps, MAX_STEP_EVENTS)
            uses = self._uses(gpu, g)
            for b in range(batches):
                n = steps // batches + (1 if b < steps % batches else 0)
                yield from self._hold(gpu, "link", n * step_s, name, uses)
        elif steps:
            P = self._priced(("group_size", g), lambda: self.ctx.group_size(g))
            yield from self._meet(g, r, P, gpu, key, "ring", steps, step_s, name)
        yield gpu.sms.put(take)
        if tail_s:
            yield from self._hold(gpu, "hbm", float(tail_s) * scale * gpu.compute_factor,
                                  name)
