"""Running a lowered plan's steps (decision 104; design notes 75, 87): one SimPy process kind
per plan step class (PLAN_RUN_RULES), on the resources and primitives of simulator.kernels (a
computation kernel's chunks on the HBM, an NCCL collective's steps on the links or a meeting
of its group, a fused kernel's load/compute/store pipeline), with every duration from the
plan's prices (cost_model.plan_cost: the step's fields and StepWork through the cost model's
formulas). A mixin of simulator.engine.Simulation.

The engine walks the plan's statements (`Plan.statements()`), and a statement runs as its
steps (`_run_plan_stmt`): an overlap's parts on two streams, a pipelined hierarchy's legs on
three, a chunked step chunk by chunk, a fused Send pipelined with its receiving stage's
chunks on that stage's GPUs (the receiving step's `step_groups`). The timeline names a step
by its statement's `Origin` (provenance: the names the statement's kernels and stream rows
have always had), so the event logs read as before the plan was the spine.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Generator

import simpy

from codegen import plan as cp
from codegen.work import DTYPE_BYTES, per_chunk
from cost_model import collectives as coll
from cost_model.ops.comm import norm_combine_s, send_crosses_nodes
from cost_model.ops.compute import Work, work_s
from cost_model.ops.network_fused import ring_plan
from cost_model.plan_cost import (
    PlanContext,
    consumer_sms,
    copies,
    copy_engine_parts,
    copy_work,
    fused_parts_of,
    gemm_work,
    kernel_work,
    nccl_call,
    receives,
    shares_sms_step,
    step_cost,
)
from simulator.alltoall import run_alltoall_step
from simulator.resources import _Gpu
from simulator.timeline import Row
from workbench.errors import WorkbenchError


class PlanSteps:
    """The PLAN_RUN_RULES methods of one Simulation (see the module docstring)."""

    pc: PlanContext

    def _plan_work(self, step) -> Work:
        """A kernel step's Work, kept for the run (its id keys the price cache)."""
        return self._priced(("plan_work", id(step)), lambda: kernel_work(self.pc, step))

    def _step_kernel(self, g, r, gpu: _Gpu, step: cp.KernelStep, name: str, key,
                     scale: float, leave_sms: int, sm_cap, host_paid: bool):
        kind = step.spec.kind
        if kind == "wait":
            return  # the receiving stage waits for the sender (the engine's "sent" events)
        if kind in ("collective", "send"):
            parts = self._priced(("plan_parts", id(step)), lambda: fused_parts_of(self.pc, step))
            yield from self._fused_parts(gpu, ("plan", id(step)), parts, name, scale, sm_cap)
        elif kind == "finish":
            # the norms' combine (peer barrier, finish kernel), a latency on no resource, as
            # the IR-level model; over one rank's partials, the finishing kernel's launch
            yield self.env.timeout(norm_combine_s(self.ctx, self.pc.group()) if step.flags
                                   else self.cluster.gpu.launch_latency_s)
        else:
            yield from self._compute(gpu, self._plan_work(step), name, scale, leave_sms)

    def _step_nccl(self, g, r, gpu: _Gpu, step: cp.NcclStep, name: str, key, scale: float,
                   leave_sms: int, sm_cap, host_paid: bool):
        if step.op == "all_to_all":
            yield from run_alltoall_step(self, gpu, step, name, scale, host_paid)
            return
        kind, nbytes, P, across, cluster = self._priced(("plan_call", id(step)),
                                                        lambda: nccl_call(self.pc, step))
        if self.pc.plan.per_node:
            # a node's view: the node's communicator, or across nodes the rail's ("inter")
            plan = self._priced(("plan_node", id(step), scale), lambda: coll.choose_plan(
                kind, nbytes * scale, P, cluster, P, across))
            yield from self._node_collective(g, r, gpu, plan, cluster,
                                             "inter" if across else "intra",
                                             self.pc.plan.P, key, name, host_paid)
            return
        yield from self._collective(g, r, gpu, kind, nbytes * scale, name, key, host_paid,
                                    cluster)
        if P == 1 and copies(step):
            # one rank: NCCL copies the buffer out of place, on the HBM without SMs
            copy = self._priced(("plan_copy", id(step)), lambda: copy_work(self.pc, step))
            yield self.env.timeout(self.cluster.gpu.launch_latency_s)
            yield from self._hold(gpu, "hbm", work_s(self.cluster, copy.scaled(scale)), name)

    def _step_copy_engines(self, g, r, gpu: _Gpu, step: cp.CopyEngineStep, name: str, key,
                           scale: float, leave_sms: int, sm_cap, host_paid: bool):
        """Copy engines move the bytes, a kernel per piece computes: the fused pipeline of
        its FusedParts (engine "copy")."""
        parts = self._priced(("plan_parts", id(step)), lambda: copy_engine_parts(self.pc, step))
        yield from self._fused_parts(gpu, ("plan", id(step)), parts, name, scale, sm_cap)

    def _step_ring_fused(self, g, r, gpu: _Gpu, step: cp.RingFusedStep, name: str, key,
                         scale: float, leave_sms: int, sm_cap, host_paid: bool):
        """CoCoNet's ring-fused collective: NCCL's ring on the bytes of its peers-form kernel,
        then the computation the ring does not hide (`Pipelines._ring`); over one rank that
        kernel alone."""
        parts = self._priced(("plan_parts", id(step)),
                             lambda: fused_parts_of(self.pc, step.kernel))
        priced = self._priced(("plan_ring", id(step)), lambda: ring_plan(self.pc.ctx, parts))
        if priced is None:
            yield from self._fused_parts(gpu, ("plan", id(step)), parts, name, scale, sm_cap)
            return
        yield from self._ring(g, r, gpu, priced, name, key, scale)

    def _step_gemm(self, g, r, gpu: _Gpu, step: cp.GemmStep, name: str, key, scale: float,
                   leave_sms: int, sm_cap, host_paid: bool):
        work = self._priced(("plan_work", id(step)), lambda: gemm_work(self.pc, step))
        yield from self._compute(gpu, work, name, scale, leave_sms)

    def _step_reduce(self, g, r, gpu: _Gpu, step: cp.ReduceStep, name: str, key,
                     scale: float, leave_sms: int, sm_cap, host_paid: bool):
        count = self.pc.n(step.count)
        work = self._priced(("plan_work", id(step)),
                            lambda: Work(count * DTYPE_BYTES[step.dtype], 2 * count))
        yield from self._compute(gpu, work, name, scale, leave_sms)

    def _step_send(self, g, r, gpu: _Gpu, step: cp.SendStep, name: str, key, scale: float,
                   leave_sms: int, sm_cap, host_paid: bool, dst=None):
        nbytes = self._priced(("plan_send", id(step)),
                              lambda: self.pc.work(step).link_bytes) * scale
        crosses = self._priced(("crosses", g), lambda: send_crosses_nodes(self.ctx, g))
        latency_s = coll.p2p_time(0.0, self.cluster, crosses)  # host cost included
        duration = coll.p2p_time(nbytes, self.cluster, crosses) - latency_s
        duration *= gpu.link_factor * self.draw.jitter()
        if host_paid:
            latency_s -= self.cluster.nccl.host_overhead_s
        yield self.env.timeout(latency_s)
        peer = self.placement(dst, r) if crosses else None
        yield from self._hold(gpu, "link", duration, name, self._uses(gpu, g, crosses, peer))

    # ------------------------------------------------------------ a statement's steps

    def _run_step(self, g, r, gpu: _Gpu, o: cp.Origin, step, key, scale: float = 1.0,
                  leave_sms: int = 0, sm_cap=None, host_paid: bool = False):
        """Run one plan step of statement `o` (its timeline name) by PLAN_RUN_RULES."""
        rule = PLAN_RUN_RULES.get(type(step))
        if rule is None:
            raise WorkbenchError(f"the simulator must run every plan step class, got "
                                 f"{type(step).__name__}, which has no entry in "
                                 "PLAN_RUN_RULES; add one in simulator/plan_steps.py")
        extra = {"dst": self.stages[step.dst_group]} if isinstance(step, cp.SendStep) else {}
        yield from rule(self, g, r, gpu, step, o.kernel, key, scale, leave_sms, sm_cap,
                        host_paid, **extra)

    def _run_plan_stmt(self, g, r: int, gpu: _Gpu, o: cp.Origin, steps, groups, key,
                       host_paid: bool = False):
        """Run top-level statement `o` as its plan steps (`groups`: each one's stages),
        recorded on the GPU's stream as the statement."""
        start = self.env.now
        for k, step in enumerate(steps):
            if isinstance(step, cp.OverlapStep):
                yield from self._plan_overlap(g, r, gpu, o, step, (key, k))
            elif isinstance(step, cp.PipelineStep):
                yield from self._plan_legs(g, r, gpu, o, step, key)
            elif receives(step):
                continue  # run with its sender, on the receiving stage (below)
            elif k + 1 < len(steps) and receives(steps[k + 1]):
                # a fused Send and the receiving stage's work on what it sends: chunked,
                # chunk by chunk on the two stages' GPUs, as an overlap of the two
                yield from self._plan_send_receive(g, r, gpu, o, step, steps[k + 1],
                                                   self.stages[groups[k + 1][0]], (key, k))
            elif isinstance(step, cp.ChunkedStep):
                for c in range(step.chunks):
                    for j, part in enumerate(step.steps):
                        yield from self._plan_part(g, r, gpu, o, (part,), (key, k, j, c),
                                                   step.chunks)
            else:
                yield from self._run_step(g, r, gpu, o, step, key if len(steps) == 1
                                          else (key, k), host_paid=host_paid)
        if self.record:
            self.rows.append(Row(start, self.env.now, gpu.id, "stream", o.stream))

    def _plan_legs(self, g, r, gpu, o: cp.Origin, step: cp.PipelineStep, key):
        """A pipelined hierarchy's legs as three processes of `chunks` pieces, piece c of a
        leg after piece c of the leg before, each piece issued by the host in order ahead of
        the GPU, as `Pipelines._pipeline` runs the statement's legs."""
        env, chunks = self.env, step.chunks
        legs = tuple(zip(o.parts, step.legs))
        done = [[env.event() for _ in range(chunks)] for _ in legs]
        host = [self._priced(("plan_host", id(leg)), lambda leg=leg: float(
            step_cost(self.pc, leg).host_s)) for leg in step.legs]
        issued, t = {}, env.now
        for c in range(chunks):
            for i in range(len(legs)):
                t += host[i]
                issued[(i, c)] = t

        def leg_process(i, leg_s, leg):
            for c in range(chunks):
                if i:
                    yield done[i - 1][c]
                if issued[(i, c)] > env.now:
                    yield env.timeout(issued[(i, c)] - env.now)
                yield from self._plan_part(g, r, gpu, leg_s, (leg,), (key, "leg", i, c),
                                           chunks, host_paid=bool(host[i]))
                done[i][c].succeed()

        yield env.all_of([env.process(leg_process(i, *pair)) for i, pair in enumerate(legs)])

    def _plan_part(self, g, r, gpu, o: cp.Origin, steps, key, chunks: int, leave: int = 0,
                   sm_cap=None, host_paid: bool = False):
        """One chunk of an overlap's part (`steps`, one after another): a kernel launched per
        chunk on its chunk's extent (codegen.work.per_chunk), or 1/chunks of a GEMM or NCCL
        call; on the stream as the part's statement."""
        start = self.env.now
        for j, step in enumerate(steps):
            scale = 1.0 if per_chunk(step) else 1.0 / chunks
            yield from self._run_step(g, r, gpu, o, step, key if len(steps) == 1 else
                                      (key, j), scale, leave, sm_cap, host_paid)
        if self.record:
            self.rows.append(Row(start, self.env.now, gpu.id, "stream", o.stream))

    def _plan_overlap(self, g, r, gpu, o: cp.Origin, step: cp.OverlapStep, key):
        """An OverlapStep as the runtime runs it (workbench.runtime.chunked.OverlapRun):
        producer and consumer chunk by chunk on two streams, consumer chunk i after producer
        chunk i."""
        yield from self._plan_pipeline(g, r, gpu, o, (step.producer,), (step.consumer,),
                                       step.chunks, key, g, step)

    def _plan_send_receive(self, g, r, gpu, o: cp.Origin, sender, receiver, dst, key):
        """A fused Send (its ChunkedStep on the sending stage) and the receiving stage's
        ChunkedStep (the flag wait, then what reads the chunk) on stage `dst`: chunk i on the
        receiving stage's GPU once chunk i is sent; unchunked, the receiver only waits."""
        if not isinstance(receiver, cp.ChunkedStep):
            yield from self._run_step(g, r, gpu, o, sender, key)
            return
        senders = sender.steps if isinstance(sender, cp.ChunkedStep) else (sender,)
        readers = tuple(p for p in receiver.steps if not receives(p))
        yield from self._plan_pipeline(g, r, gpu, o, senders, readers, receiver.chunks, key,
                                       dst)

    def _plan_pipeline(self, g, r, gpu, o: cp.Origin, producers, consumers, chunks: int, key,
                       cg, step: cp.OverlapStep | None = None):
        """Producer parts and consumer parts chunk by chunk on two streams (the consumer's
        on group `cg`'s GPU: the next stage's for a Send's receiver), consumer chunk i after
        producer chunk i; `step`: the OverlapStep, whose consumer may time-share the SMs."""
        prod_s, cons_s = o.parts
        env = self.env
        done = [env.event() for _ in range(chunks)]
        cgpu = gpu if cg == g else self.gpus[(cg, r)]
        if cgpu is not gpu:
            lane, leave, cap = None, 0, None
        elif step is not None and shares_sms_step(self.cluster, step):
            # a computation and a fused collective time-share the SMs: one at a time, each
            # producer chunk on every SM, each consumer chunk on its overlapped grid
            lane = simpy.Resource(env, capacity=1)
            leave, cap = 0, math.ceil(consumer_sms(self.pc, step))
        else:
            lane, leave, cap = None, self.cluster.nccl.max_channels, None

        def on_lane(run):
            if lane is None:
                yield from run
                return
            with lane.request() as turn:
                yield turn
                yield from run

        def produce():
            for c in range(chunks):
                yield from on_lane(self._plan_part(g, r, gpu, prod_s, producers,
                                                   (key, "p", c), chunks, leave))
                done[c].succeed()

        def consume():
            for c in range(chunks):
                yield done[c]
                yield from on_lane(self._plan_part(cg, r, cgpu, cons_s, consumers,
                                                   (key, "c", c), chunks, sm_cap=cap))

        yield env.all_of([env.process(produce()), env.process(consume())])

    def _plan_host_s(self, key, steps) -> float:
        """The host's issue cost of a statement of NCCL calls or Sends (its steps' per-call
        costs, OpCost.host_s), which the host issues ahead of the GPU; a statement that
        launches kernels (an overlap's NCCL parts included) is issued with them."""
        if not all(isinstance(st, (cp.NcclStep, cp.SendStep)) for st in steps):
            return 0.0
        return self._priced(("plan_host", key), lambda: float(sum(
            step_cost(self.pc, st).host_s for st in steps)))


PLAN_RUN_RULES: dict[type, Callable[..., Generator]] = {
    cp.KernelStep: PlanSteps._step_kernel,
    cp.NcclStep: PlanSteps._step_nccl,
    cp.GemmStep: PlanSteps._step_gemm,
    cp.ReduceStep: PlanSteps._step_reduce,
    cp.SendStep: PlanSteps._step_send,
    cp.CopyEngineStep: PlanSteps._step_copy_engines,
    cp.RingFusedStep: PlanSteps._step_ring_fused,
}
"""How the simulator runs a plan step of each class (OverlapStep: `_plan_overlap`, its two
parts by these rules; ChunkedStep and PipelineStep: theirs, chunk by chunk)."""
