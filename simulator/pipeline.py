"""The pipelined hierarchy as processes (workbench.transforms.PipelineHierarchy; priced in
closed form by cost_model.ops.pipeline): its three legs run as three processes, piece by
piece, piece c of a leg starting when piece c of the leg before it is done. Each piece runs
by the leg's own rule (simulator.rules) on 1/chunks of the data, so it holds what the leg
holds: the node ReduceScatter and the fused update + gather take turns on the GPU's NVLink
(`gpu.link`, and the NVLink flow), the AllReduce across nodes holds the GPU's NIC
(`Routing._nic_route`), and the SMs are shared as the legs take them. Nothing here is a
formula: the durations are the cost model's. A mixin of simulator.engine.Simulation.
"""

from __future__ import annotations

from cost_model.hardware import Cluster
from simulator.network import Route
from simulator.resources import _Run


class Pipelines:
    """The pipelined hierarchy's processes (see the module docstring)."""

    def _pipeline(self, run: _Run):
        """Overlapped(chunks){node ReduceScatter; AllReduce across nodes; node gather}: the
        legs as three processes of `chunks` pieces each."""
        env, chunks = self.env, run.s.op.chunks
        legs = run.s.op.body
        done = [[env.event() for _ in range(chunks)] for _ in legs]

        def leg_process(i, leg):
            for c in range(chunks):
                if i:
                    yield done[i - 1][c]
                yield from self._run(run.g, run.r, run.gpu, leg, (run.key, "leg", i, c),
                                     run.scale / chunks)
                done[i][c].succeed()

        yield env.all_of([env.process(leg_process(i, leg)) for i, leg in enumerate(legs)])

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
