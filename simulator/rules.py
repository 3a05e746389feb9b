"""The simulator's rule table: how a statement of each op class runs (RUN_RULES), as SimPy
processes on the resources of simulator.resources, with every duration from cost_model.
A mixin of simulator.engine.Simulation; a new op adds one method and one entry here."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator

import simpy

from codegen.forms import fused_form
from cost_model import collectives as coll
from cost_model.ops import (
    collective_cluster,
    collective_kind,
    collective_plan,
    elementwise_work,
    index_work,
    matmul_epilogue_works,
    matmul_work,
    norm_combine_s,
    overlap_consumer_sms,
    reduction_work,
    send_crosses_nodes,
    shares_sms,
    single_rank_copy,
    stmt_group,
    work_s,
)
from cost_model.ops.pipeline import is_pipeline
from simulator.alltoall import run_all_to_all
from simulator.resources import MAX_STEP_EVENTS, _Run
from workbench import ir
from workbench.types import Sliced


class Rules:
    """The RUN_RULES methods of one Simulation (see the module docstring)."""

    def _run_view(self, run: _Run):
        """Slice: a view, no data moves."""
        yield from ()

    def _run_elementwise(self, run: _Run):
        """Compute, Update, ReduceAxis: one computation kernel."""
        work = self._priced(("elementwise", id(run.s)),
                            lambda: elementwise_work(self.ctx, [run.s]))
        yield from self._compute(run.gpu, work, run.name, run.scale, run.leave_sms)

    def _run_index(self, run: _Run):
        """Gather, TopK: one computation kernel (design decision 106)."""
        work = self._priced(("index", id(run.s)), lambda: index_work(self.ctx, run.s))
        yield from self._compute(run.gpu, work, run.name, run.scale, run.leave_sms)

    def _run_matmul(self, run: _Run):
        """MatMul: one computation kernel (cuBLAS)."""
        work = self._priced(("matmul", id(run.s)), lambda: matmul_work(self.ctx, run.s))
        yield from self._compute(run.gpu, work, run.name, run.scale, run.leave_sms)

    def _run_reduction(self, run: _Run):
        """ReduceTensor, Norm: a computation kernel, then over a Sliced input the combine of
        the ranks' partial sums."""
        work = self._priced(("reduction", id(run.s)), lambda: reduction_work(self.ctx, run.s))
        yield from self._compute(run.gpu, work, run.name, run.scale)
        if isinstance(self.ctx.types[run.s.op.x].layout, Sliced):
            # Combining the ranks' partial sums: the cost model's price for what the
            # generated code does (finish kernel, peer barrier), a latency on no resource.
            yield self.env.timeout(norm_combine_s(self.ctx, run.g))

    def _run_send(self, run: _Run):
        """Send: NCCL's latency, then the link for the bandwidth part of its time."""
        nbytes = self._priced(("local_nbytes", id(run.s)),
                              lambda: float(self.ctx.local_nbytes(run.s.op.x))) * run.scale
        crosses = self._priced(("crosses", run.g), lambda: send_crosses_nodes(self.ctx, run.g))
        latency_s = coll.p2p_time(0.0, self.cluster, crosses)  # host cost included
        # the link holds for the bandwidth part of the cost model's p2p time
        duration = coll.p2p_time(nbytes, self.cluster, crosses) - latency_s
        duration *= run.gpu.link_factor * self.draw.jitter()
        if run.host_paid:  # the host's share was paid on the host timeline
            latency_s -= self.cluster.nccl.host_overhead_s
        yield self.env.timeout(latency_s)
        peer = self.placement(run.s.op.dst, run.r) if crosses else None
        yield from self._hold(run.gpu, "link", duration, run.name,
                              self._uses(run.gpu, run.g, crosses, peer))

    def _run_collective(self, run: _Run):
        """AllReduce, ReduceScatter, AllGather, Broadcast, Reduce: an NCCL collective, and
        over one rank the copy NCCL makes."""
        s = run.s
        if getattr(s.op, "sub", None) is not None:
            yield from self._run_node_collective(run)
            return
        nbytes = self._priced(("full_nbytes", id(s)),
                              lambda: float(self.ctx.full_nbytes(s.op.x))) * run.scale
        yield from self._collective(run.g, run.r, run.gpu, collective_kind(s.op), nbytes,
                                    run.name, run.key, run.host_paid,
                                    self._priced(("cluster", id(s)),
                                                 lambda: collective_cluster(self.ctx, s)))
        copy = self._priced(("copy", id(s)), lambda: single_rank_copy(self.ctx, s))
        if copy is not None:
            # one rank: NCCL copies the buffer (cost_model.ops.single_rank_copy) with
            # cudaMemcpyAsync, on the HBM without taking SMs (a copy engine's transfer)
            yield self.env.timeout(self.cluster.gpu.launch_latency_s)
            yield from self._hold(run.gpu, "hbm",
                                  work_s(self.cluster, copy.scaled(run.scale)), run.name)

    def _run_node_collective(self, run: _Run):
        """A node-level collective (op.sub: inside each node, or across nodes over one rank
        per node; design note 35): NCCL's plan on that sub-group from the cost model
        (`collective_plan`), run by `_node_collective`."""
        s = run.s
        plan = self._priced(("node_plan", id(s), run.scale),
                            lambda: collective_plan(self.ctx, s, run.scale))
        cluster = self._priced(("cluster", id(s)), lambda: collective_cluster(self.ctx, s))
        yield from self._node_collective(run.g, run.r, run.gpu, plan, cluster, s.op.sub.axis,
                                         s.op.sub.per_node, run.key, run.name, run.host_paid)

    def _node_collective(self, g, r: int, gpu, plan, cluster, axis: str, per_node: int, key,
                         name: str, host_paid: bool):
        """NCCL's `plan` on a sub-group of group `g` (`axis` "intra": the `per_node` ranks of
        a node; "inter": one local rank per node), of a statement or a node view's plan step;
        in the full mode a meeting of the sub-group's ranks, each step after the sub-group's
        previous rank's (ring order: the local rank inside a node, the node across nodes)."""
        take = yield from self._take_sms(gpu, int(plan.channels) or 1)
        host_s = cluster.nccl.host_overhead_s if host_paid else 0.0
        yield self.env.timeout(plan.fixed_s - host_s)
        steps = int(plan.steps)
        # across nodes the leg holds the GPU's NIC (simulator.pipeline), inside a node its
        # NVLink, taking turns with a fused kernel's loads and stores (gpu.link)
        nic = self._nic_route(gpu) if axis == "inter" else None
        if self.reduced:
            batches = min(steps, MAX_STEP_EVENTS)
            for b in range(batches):
                n = steps // batches + (1 if b < steps % batches else 0)
                yield from self._hold(gpu, "nic" if nic else "link", n * plan.step_s,
                                      name, nic)
        elif steps:
            P = self._priced(("group_size", g), lambda: self.ctx.group_size(g))
            intra = axis == "intra"
            sub, index, size = (r // per_node, r % per_node, per_node) if intra else \
                (r % per_node, r // per_node, P // per_node)
            # a ring over the sub-group whatever NCCL's plan is called, as priced; on the
            # GPU's own link route, as a fused kernel's transfers
            yield from self._meet((g, (axis, per_node), sub), index, size, gpu, key, "ring",
                                  steps, float(plan.step_s), name,
                                  nic or self._uses(gpu, None), "nic" if nic else "link")
        yield gpu.sms.put(take)

    def _run_fused(self, run: _Run):
        """Fused: by what it runs as (codegen.forms.fused_form, lowering's decision): one
        computation kernel, a GEMM with its epilogue, CoCoNet's ring across nodes, or a fused
        collective's pipeline (peer accesses or copy engines)."""
        s = run.s
        name = f"{s.name} = {s.op}"
        form = fused_form(s)
        if form == "compute":
            work = self._priced(("elementwise", id(s)),
                                lambda: elementwise_work(self.ctx, s.op.body))
            yield from self._compute(run.gpu, work, name, run.scale)
        elif form == "matmul":  # the GEMM (with its library epilogue), then any kernel
            works = self._priced(("matmul-epilogue", id(s)),
                                 lambda: matmul_epilogue_works(self.ctx, s))
            for work in works:
                yield from self._compute(run.gpu, work, name, run.scale)
        elif form == "ring":  # CoCoNet's form across nodes (simulator.pipeline)
            yield from self._ring_fused(run)
        else:
            yield from self._fused(run.gpu, s, name, run.scale, run.sm_cap)

    def _run_overlapped(self, run: _Run):
        """Overlapped: producer and consumer chunk by chunk on two streams (or the three legs
        of a pipelined hierarchy, simulator.pipeline)."""
        if is_pipeline(run.s.op):
            yield from self._pipeline(run)
            return
        yield from self._overlapped(run.g, run.r, run.gpu, run.s, run.key)

    def _overlapped(self, g, r, gpu, s: ir.Stmt, key):
        producer, consumer = s.op.body
        chunks = s.op.chunks
        env = self.env
        done = [env.event() for _ in range(chunks)]
        # A consumer in the next stage (a Send's AllGather) runs on that stage's GPU of the
        # same local rank, chunk by chunk as the chunks arrive, beside nothing of the producer.
        cg = self._priced(("group", id(consumer)), lambda: stmt_group(self.ctx, consumer))
        cgpu = gpu if cg == g else self.gpus[(cg, r)]

        if cgpu is not gpu:
            lane, leave, cap = None, 0, None
        elif shares_sms(self.cluster, producer, consumer):
            # A computation and a fused collective time-share the SMs (cost_model.ops.rules.
            # _fused_beside_compute_s): one at a time, each producer chunk on every SM, each
            # consumer chunk on its overlapped grid as soon as its data is ready.
            lane = simpy.Resource(env, capacity=1)
            leave, cap = 0, math.ceil(overlap_consumer_sms(self.cluster, self.ctx.options))
        else:
            # the producer leaves NCCL's channel SMs free for the concurrent consumer
            lane, leave, cap = None, self.cluster.nccl.max_channels, None

        def on_lane(step):
            if lane is None:
                yield from step
                return
            with lane.request() as turn:
                yield turn
                yield from step

        def produce():
            for c in range(chunks):
                yield from on_lane(self._run(g, r, gpu, producer, (key, "p", c), 1.0 / chunks,
                                             leave))
                done[c].succeed()

        def consume():
            for c in range(chunks):
                yield done[c]
                yield from on_lane(self._run(cg, r, cgpu, consumer, (key, "c", c),
                                             1.0 / chunks, sm_cap=cap))

        yield env.all_of([env.process(produce()), env.process(consume())])


RUN_RULES: dict[type, Callable[[Rules, _Run], Generator]] = {
    ir.Compute: Rules._run_elementwise,
    ir.Update: Rules._run_elementwise,
    ir.ReduceAxis: Rules._run_elementwise,  # a row kernel, priced as the cost model does
    ir.MatMul: Rules._run_matmul,
    ir.ReduceTensor: Rules._run_reduction,
    ir.Norm: Rules._run_reduction,
    ir.Slice: Rules._run_view,
    ir.Gather: Rules._run_index,
    ir.TopK: Rules._run_index,
    ir.AllReduce: Rules._run_collective,
    ir.ReduceScatter: Rules._run_collective,
    ir.AllGather: Rules._run_collective,
    ir.Broadcast: Rules._run_collective,
    ir.Reduce: Rules._run_collective,
    ir.Send: Rules._run_send,
    ir.AllToAll: run_all_to_all,
    ir.Fused: Rules._run_fused,
    ir.Overlapped: Rules._run_overlapped,
}
"""How the simulator runs a statement of each op class: a SimPy process holding which
resources of which GPU (link, hbm, SMs), for durations that all come from cost_model. A new op
adds one entry here."""
