"""Processes of kernels and collectives on one GPU's resources: a computation kernel's chunks
on the HBM, an NCCL collective's steps on the links (reduced: batched on one representative;
full: a meeting of the group's ranks, simulator.rings), a fused collective kernel's
load/compute/store pipeline. A mixin of simulator.engine.Simulation."""

from __future__ import annotations

import numpy as np

from codegen.lower_rows import PIPELINE_GROUPS
from cost_model import collectives as coll
from cost_model.hardware import Cluster
from cost_model.ops.compute import Work, kernel_bound, work_s
from cost_model.ops.fused import fused_latency_s, fused_link_s
from simulator import rings
from simulator.network import Route
from simulator.resources import (
    COMPUTE_CHUNKS,
    FUSED_CHUNKS,
    MAX_STEP_EVENTS,
    FusedCopy,
    _Gpu,
    _Meeting,
)
from simulator.timeline import Row


class Kernels:
    """The kernel and collective processes of one Simulation (see the module docstring)."""

    def _take_sms(self, gpu: _Gpu, wanted: int):
        """Take up to `wanted` SMs, at least one (a block scheduler fills whatever is free,
        which a FIFO Container would not: so ask only for what is there)."""
        take = max(1, min(wanted, int(gpu.sms.level)))
        yield gpu.sms.get(take)
        return take

    # ------------------------------------------------------------ kernels

    def _compute(self, gpu: _Gpu, work: Work, op: str, scale: float = 1.0,
                 leave_sms: int = 0):
        cluster = self.cluster
        yield self.env.timeout(cluster.gpu.launch_latency_s)
        wanted = cluster.gpu.sm_count - leave_sms
        if self.solo:  # every SM is free (engine.solo): _take_sms's take, without its event
            take = max(1, min(wanted, cluster.gpu.sm_count))
        else:
            take = yield from self._take_sms(gpu, wanted)
        frac = take / cluster.gpu.sm_count
        per_chunk = self._priced(("work", id(work), scale, frac), lambda: work_s(
            cluster, work.scaled(scale / COMPUTE_CHUNKS), frac))
        # the kernel's track and busy time: "sm" for an arithmetic-bound one (a GEMM), "hbm"
        # for a memory-bound one; either holds the GPU's one pipeline of computation kernels
        bound = self._priced(("bound", id(work), frac), lambda: kernel_bound(cluster, work,
                                                                              frac))
        per_chunk *= gpu.compute_factor * self.draw.jitter()
        if self.overlaps:
            for _ in range(COMPUTE_CHUNKS):
                yield from self._hold(gpu, bound, per_chunk, op)
        elif self.solo:
            yield from self._chunks_back_to_back(gpu, per_chunk, op, bound)
            return
        else:
            # nothing else runs on this GPU: the chunks back to back, one event
            with gpu.hbm.request() as req:
                yield req
                yield from self._chunks_back_to_back(gpu, per_chunk, op, bound)
        yield gpu.sms.put(take)

    def _chunks_back_to_back(self, gpu: _Gpu, per_chunk: float, op: str, bound: str = "hbm"):
        """A computation kernel's chunks one after another on a GPU where nothing else runs:
        the times, rows and busy seconds of the pipeline path of `_compute`, in one event, on
        the track of what bounds it (`bound`: "hbm" or "sm")."""
        start = t = self.env.now
        for _ in range(COMPUTE_CHUNKS):
            if self.record and self.detail:
                self.rows.append(Row(t, t + per_chunk, gpu.id, bound, op))
            t += per_chunk
        yield self.env.timeout(t - start)
        gpu.busy[bound] = gpu.busy.get(bound, 0.0) + COMPUTE_CHUNKS * per_chunk
        if self.record and not self.detail:
            self.rows.append(Row(start, self.env.now, gpu.id, bound, op))

    def _collective(self, g, r: int, gpu: _Gpu, kind: str, nbytes: float, op: str, key,
                    host_paid: bool = False, cluster: Cluster | None = None):
        # `cluster`: the one whose NCCL constants price this collective's dtype
        # (cost_model.ops.collective_cluster); None: the simulation's own
        cluster = cluster or self.cluster
        P = self._priced(("group_size", g), lambda: self.ctx.group_size(g))
        plan = self._priced(("plan", kind, nbytes, P, id(cluster)),
                            lambda: coll.choose_plan(kind, nbytes, P, cluster, P))
        # solo: its channels' SMs are free, and nobody else asks for them (engine.solo)
        take = None if self.solo else (yield from self._take_sms(gpu, int(plan.channels) or 1))
        # NCCL's per-call host cost is in the plan's fixed part; when the caller paid it on
        # the host timeline, only the GPU-side latency remains here.
        host_s = cluster.nccl.host_overhead_s if host_paid else 0.0
        yield self.env.timeout(plan.fixed_s - host_s)
        steps = int(plan.steps)
        if steps:
            # jitter per ring step: the mean of the steps' draws (simulator.variability)
            step_s = float(plan.step_s) * gpu.link_factor * self.draw.steps_jitter(steps)
            if self.reduced:
                batches = min(steps, MAX_STEP_EVENTS)
                uses = self._uses(gpu, g)
                for b in range(batches):
                    n = steps // batches + (1 if b < steps % batches else 0)
                    yield from self._hold(gpu, "link", n * step_s, op, uses)
            else:
                yield from self._meet(g, r, P, gpu, key, plan.algorithm, steps, step_s, op)
        if take is not None:
            yield gpu.sms.put(take)

    def _meet(self, g, r: int, P: int, gpu: _Gpu, key, algorithm: str, steps: int,
              step_s: float, op: str, uses: Route | None = None, resource: str = "link"):
        """Rank r's part of a collective of every rank of group `g` (module docstring; r is
        the rank's index in `g`, P its size): arrive, and when the group is complete hold
        the links (`uses`, by default the group's route) until this rank's finish
        (simulator.rings), recorded as `resource` (the NIC for a leg across nodes)."""
        meeting = self.meetings.get((g, key))
        if meeting is None:
            meeting = self.meetings[(g, key)] = _Meeting(np.zeros(P), np.zeros(P),
                                                         self.env.event())
        meeting.arrive[r] = self.env.now
        meeting.step_s[r] = step_s
        meeting.count += 1
        if meeting.count == P:
            del self.meetings[(g, key)]  # the last one in: nobody else looks it up
            if algorithm == "tree":
                meeting.finish = rings.tree_finish(meeting.arrive, meeting.step_s, steps)
            else:
                keep = self.record and self.detail and P * steps <= rings.DETAIL_RANK_STEPS
                meeting.finish, meeting.starts = rings.ring_finish(
                    meeting.arrive, meeting.step_s, steps, keep)
            meeting.done_at = self.env.now
            meeting.done.succeed()
        yield meeting.done
        start = self.env.now
        # Alone on its links the rank is done at its finish; flows sharing them (another
        # group's collective, a Send) slow it by the max-min share (simulator.network).
        route = uses or self._uses(gpu, g)
        alone = yield from self.network.transfer(route, float(meeting.finish[r]) - start)
        gpu.busy[resource] = gpu.busy.get(resource, 0.0) + steps * step_s
        if not self.record:
            return
        if meeting.starts is not None and alone:
            for k in range(steps):  # not slowed by a shared link: each step as solved
                t = float(meeting.starts[k, r])
                self.rows.append(Row(t, t + step_s, gpu.id, resource, op))
        else:
            self.rows.append(Row(start, self.env.now, gpu.id, resource, op))

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

    def _fused_parts(self, gpu: _Gpu, key, parts, op: str, scale: float = 1.0,
                     sm_cap: int | None = None):
        """A fused kernel of these FusedParts (of a statement, or of a plan step: `key`
        names it for the price cache): its fixed cost, then its load/compute/store
        pipeline, then the computation that waits for it (FusedParts.after)."""
        env = self.env
        yield env.timeout(self._priced(("fused_latency", key),
                                       lambda: fused_latency_s(self.ctx, None, parts)))
        # Copy engines move the bytes (ir.Fused.engine == "copy"): the pieces are the
        # schedule's, and only the computation holds SMs, piece by piece. Otherwise the one
        # kernel holds its SMs throughout and its pipeline has FUSED_CHUNKS steps.
        copy = parts.engine == "copy"
        # A pipelined row AllReduce (design note 108): its moving blocks load and store each
        # row group (the "load" of this pipeline), its computing blocks compute it after.
        pipelined = parts.algorithm == "pipelined" and sm_cap is None
        chunks = parts.chunks if copy else PIPELINE_GROUPS if pipelined else FUSED_CHUNKS
        grid = sm_cap or self.cluster.gpu.sm_count
        take = grid if copy else (yield from self._take_sms(gpu, grid))
        frac = take / self.cluster.gpu.sm_count
        rs_part = parts if pipelined else FusedCopy(parts, rs=True).parts
        ag_part = FusedCopy(parts, rs=False).parts
        move_sms, comp_frac = take, frac
        if pipelined:
            share = 1 / parts.compute_share
            move_sms, comp_frac = take * (1 - share), frac * share
        # peer accesses slow down on fewer SMs where the cluster has a calibrated block curve
        link = gpu.link_factor * self.draw.steps_jitter(chunks)  # per pipeline chunk
        load_s = self._priced(("load", key, move_sms), lambda: fused_link_s(
            self.ctx, rs_part, move_sms)) * scale / chunks * link
        store_s = 0.0 if pipelined else self._priced(("store", key, take), lambda: fused_link_s(
            self.ctx, ag_part, take)) * scale / chunks * link
        comp_s = self._priced(("fused_work", key, scale, comp_frac), lambda: work_s(
            self.cluster, parts.work.scaled(scale / chunks), comp_frac))
        if pipelined:  # the whole GPU's time over the share (cost_model's _pipelined_cost)
            comp_s = self._priced(("fused_work", key, scale, 1.0), lambda: work_s(
                self.cluster, parts.work.scaled(scale / chunks), 1.0)) * parts.compute_share
        comp_s *= gpu.compute_factor * self.draw.jitter()
        loaded = [env.event() for _ in range(chunks)]
        computed = [env.event() for _ in range(chunks)]

        def loader():
            for c in range(chunks):
                if load_s:
                    yield from self._hold(gpu, "link", load_s, op)
                loaded[c].succeed()

        def computer():
            for c in range(chunks):
                yield loaded[c]
                if comp_s:
                    held = (yield from self._take_sms(gpu, grid)) if copy else 0
                    yield from self._hold(gpu, "hbm", comp_s, op)
                    if held:
                        yield gpu.sms.put(held)
                computed[c].succeed()

        def storer():
            for c in range(chunks):
                yield computed[c]
                if store_s:
                    yield from self._hold(gpu, "link", store_s, op)

        procs = [env.process(loader()), env.process(computer()), env.process(storer())]
        yield env.all_of(procs)
        if parts.after is not None:
            # the computation that waits for the link phase (a barrier, Lamport's stores:
            # design note 97) runs once the pipeline has drained
            after_s = self._priced(("fused_after", key, scale, frac), lambda: work_s(
                self.cluster, parts.after.scaled(scale), frac))
            yield from self._hold(gpu, "hbm", after_s * gpu.compute_factor * self.draw.jitter(),
                                  op)
        if not copy:
            yield gpu.sms.put(take)
