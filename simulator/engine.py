"""SimPy model of a program running on a cluster.

Each simulated GPU owns its resources: `hbm` (the memory pipeline that computation chunks
hold), `sms` (a Container of SMs: a communication kernel holds one SM per NCCL channel, a
computation kernel takes what is free) and `link` (the turn a fused kernel's loads and stores
take). Data moves as flows on the links of `simulator.network` (each GPU's NVLink, its NIC;
a ring step sends on the out direction while receiving on the in one, and by the symmetry of
collectives every GPU does both at once, so one link stands for the pair), which concurrent
transfers share max-min fairly. Each rank runs its statements in order
on one stream, each by its op class's rule in RUN_RULES; an Overlapped region runs its producer
and consumer on two streams. Every duration comes from cost_model (the simulator has no
formulas of its own): NCCL plans give the chunk steps, work_s the computation chunks,
fused_link_s the fused kernels' transfers.

Large clusters: every rank of a group does the same work at the same time (data- and
model-parallel programs are symmetric), so `reduced=True` simulates one representative rank per
group and skips the cross-rank waits (which are then all satisfied at the same instant) and
batches a ring's identical steps. That is exact only while the ranks are equal: with
`variability` (stragglers, jitter, a degraded link) the simulation is full.

`reduced=False` simulates every rank, each its own process, in time linear in the ranks
(design note 30): a collective is a meeting of its group's ranks; when the last one arrives,
simulator.rings computes every rank's finish from the ring dependencies (rank r's step k waits
for rank r-1's step k-1) or the tree's, and each rank holds its link until then. So a
collective costs a few events per rank, not one per rank and step; meetings and Send events
are dropped once consumed; and each statement is priced once per group (`_priced`), not per
rank.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field

import numpy as np
import simpy
import sympy

from cost_model import collectives as coll
from cost_model.hardware import Cluster
from cost_model.ops import (
    CostContext,
    Work,
    collective_cluster,
    collective_kind,
    collective_plan,
    elementwise_work,
    fused_latency_s,
    fused_link_s,
    fused_parts,
    matmul_epilogue_works,
    matmul_work,
    norm_combine_s,
    overlap_consumer_sms,
    reduction_work,
    send_crosses_nodes,
    shares_sms,
    single_rank_copy,
    stmt_cost,
    stmt_group,
    work_s,
)
from simulator import rings
from simulator.alltoall import run_all_to_all
from simulator.network import Network, Route
from simulator.variability import Draw, Variability
from workbench import ir
from workbench.errors import WorkbenchError
from workbench.options import CodegenOptions
from workbench.types import Group, Sliced

# Ranks above which simulate() reduces by symmetry unless told otherwise.
FULL_RANK_LIMIT = 16
# Computation kernels are cut into this many chunks (thread-block waves, coarsely) so that
# overlapped kernels interleave on HBM at this granularity.
COMPUTE_CHUNKS = 8
# Most events one reduced collective may cost: identical ring steps are batched beyond this.
MAX_STEP_EVENTS = 64
# Chunks of a fused collective kernel's pipeline (load -> compute -> store).
FUSED_CHUNKS = 8
# Up to this many simulated ranks the timeline has a row per computation chunk and ring
# step; above it one row per kernel and collective (the timeline would outgrow the run).
DETAIL_RANKS = 64


@dataclass(frozen=True, slots=True)
class Row:
    """One timeline row: `op` held `resource` of GPU `gpu` from t_start to t_end (seconds)."""

    t_start: float
    t_end: float
    gpu: int
    resource: str
    op: str


@dataclass
class SimResult:
    """What a simulation produced: the time, the timeline, and how it was reduced."""

    time_s: float
    rows: list[Row]
    ranks_simulated: int
    ranks_total: int
    reduced: bool
    busy_s: dict = field(default_factory=dict)  # resource -> busy seconds on the busiest GPU

    def dataframe(self):
        """The timeline as a pandas DataFrame (t_start, t_end, gpu, resource, op)."""
        import pandas as pd

        columns = ["t_start", "t_end", "gpu", "resource", "op"]
        return pd.DataFrame([[getattr(r, c) for c in columns] for r in self.rows],
                            columns=columns)

    def bottleneck(self, link_name: str = "nvlink") -> str:
        """The resource busy longest; 'latency' when none is busy half of the time."""
        if not self.busy_s or self.time_s <= 0:
            return "latency"
        res, busy = max(self.busy_s.items(), key=lambda kv: kv[1])
        if busy < 0.5 * self.time_s:
            return "latency"
        return link_name if res == "link" else res

    def note(self) -> str:
        """A sentence saying whether the simulation was reduced by symmetry."""
        if not self.reduced:
            return f"simulated all {self.ranks_total} ranks"
        return (f"reduced by symmetry: simulated {self.ranks_simulated} representative "
                f"rank(s) of {self.ranks_total}")

    def chrome_trace(self) -> dict:
        """The timeline as a Chrome/Perfetto trace (simulator.trace: named GPUs and
        resources)."""
        from simulator.trace import chrome_trace

        return chrome_trace([("", self)])


class _Gpu:
    """The resources of one simulated GPU."""

    def __init__(self, env: simpy.Environment, cluster: Cluster, gpu_id: int,
                 compute_factor: float = 1.0, link_factor: float = 1.0):
        self.id = gpu_id
        self.compute_factor = compute_factor  # a straggler's slowdown (simulator.variability)
        self.link_factor = link_factor  # a degraded link's
        self.link = simpy.Resource(env, capacity=1)
        self.hbm = simpy.Resource(env, capacity=1)
        self.sms = simpy.Container(env, capacity=cluster.gpu.sm_count,
                                   init=cluster.gpu.sm_count)
        self.busy = {"link": 0.0, "hbm": 0.0}


class Simulation:
    """One run of a program on a cluster (see module docstring)."""

    def __init__(self, program: ir.Program, cluster: Cluster, bound: Mapping[sympy.Symbol, int],
                 reduced: bool | None = None, record: bool = True,
                 variability: Variability | None = None, sample: int = 0,
                 shared: Shared | None = None, options: CodegenOptions | None = None):
        # `shared`: the environment, network, GPUs and timeline of a larger run this one is
        # part of (simulator.mesh: one program per group of a mesh axis, all on one cluster);
        # then `cluster` is the view that prices this program's groups (their ranks per node)
        # and `shared.cluster` the physical one.
        self.program = program
        self.cluster = cluster
        self.ctx = CostContext(program, cluster, bound, options=options or CodegenOptions())
        self.env = shared.env if shared else simpy.Environment()
        self.network = shared.network if shared else Network(self.env)
        self.physical = shared.cluster if shared else cluster
        self.record = record
        self.rows: list[Row] = shared.rows if shared else []
        self.groups = program.groups()
        sizes = [self.ctx.group_size(g) for g in self.groups]
        self.ranks_total = sum(sizes)
        self.variability = variability or Variability()
        if self.variability.active and reduced:
            raise WorkbenchError("reduced must be False when ranks differ (stragglers, jitter or "
                                 "a degraded link), got reduced=True; simulate every rank "
                                 "(--full) or drop the variability")
        if reduced is None:
            reduced = self.ranks_total > FULL_RANK_LIMIT and not self.variability.active
        self.reduced = reduced
        self.draw = shared.draw if shared else self.variability.draw(self.ranks_total, sample)
        self.placement = shared.placement if shared else (lambda g, r: self.offsets[g] + r)
        self.offsets, off = {}, 0
        for g, n in zip(self.groups, sizes):
            self.offsets[g] = off
            off += n
        self.ranks = {g: (1 if self.reduced else n) for g, n in zip(self.groups, sizes)}
        self.gpus = {}
        for g in self.groups:
            for r in range(self.ranks[g]):
                gid = shared.placement(g, r) if shared else self.offsets[g] + r
                if shared and gid in shared.gpus:
                    self.gpus[(g, r)] = shared.gpus[gid]
                    continue
                self.gpus[(g, r)] = _Gpu(self.env, cluster, gid, float(self.draw.compute[gid]),
                                         float(self.draw.link[gid]))
                if shared:
                    shared.gpus[gid] = self.gpus[(g, r)]
        self.detail = sum(self.ranks.values()) <= DETAIL_RANKS
        # Top-level kernels run alone on their GPU unless the program overlaps statements:
        # then a kernel's chunks need not be separate events (`_compute`).
        self.overlaps = any(isinstance(s.op, ir.Overlapped) for s in program.stmts)
        self.events: dict = {}
        self.meetings: dict = {}
        self.prices: dict = {}

    # ------------------------------------------------------------ helpers

    def _event(self, key):
        ev = self.events.get(key)
        if ev is None:
            ev = self.events[key] = self.env.event()
        return ev

    def _priced(self, key, price: Callable[[], object]):
        """`price()` once per key: every rank of a group runs the same statement on the same
        sizes, so the cost model (sympy) is asked once, not once per rank."""
        value = self.prices.get(key, self)
        if value is self:
            value = self.prices[key] = price()
        return value

    def _hold(self, gpu: _Gpu, resource: str, duration: float, op: str, uses=None):
        """Hold the GPU's `resource` for `duration`: the HBM pipeline (one kernel chunk at a
        time), or the links in `uses` (a flow of the network, sharing them with concurrent
        flows; a fused kernel's loads and stores also take turns on `gpu.link`)."""
        if resource == "hbm":
            with gpu.hbm.request() as req:
                yield req
                start = self.env.now
                yield self.env.timeout(duration)
        elif uses is None:  # a fused kernel's own pipeline: its loads and stores alternate
            with gpu.link.request() as req:
                yield req
                start = self.env.now
                yield from self.network.transfer(self._uses(gpu, None), duration)
        else:
            start = self.env.now
            yield from self.network.transfer(uses, duration)
        gpu.busy[resource] += duration
        if self.record:
            self.rows.append(Row(start, self.env.now, gpu.id, resource, op))

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
            path = coll.group_path(self.cluster, self.ctx.group_size(g))
            nodes, bw = path.nodes, min(path.bandwidth_Bps, nvlink_bw)
            per_node = max(1, self.ctx.group_size(g) // nodes)
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
        take = yield from self._take_sms(gpu, cluster.gpu.sm_count - leave_sms)
        frac = take / cluster.gpu.sm_count
        per_chunk = self._priced(("work", id(work), scale, frac), lambda: work_s(
            cluster, work.scaled(scale / COMPUTE_CHUNKS), frac))
        per_chunk *= gpu.compute_factor * self.draw.jitter()
        if self.overlaps:
            for _ in range(COMPUTE_CHUNKS):
                yield from self._hold(gpu, "hbm", per_chunk, op)
        else:
            # nothing else runs on this GPU: the chunks back to back, one event
            with gpu.hbm.request() as req:
                yield req
                start = t = self.env.now
                for _ in range(COMPUTE_CHUNKS):
                    if self.record and self.detail:
                        self.rows.append(Row(t, t + per_chunk, gpu.id, "hbm", op))
                    t += per_chunk
                yield self.env.timeout(t - start)
                gpu.busy["hbm"] += COMPUTE_CHUNKS * per_chunk
                if self.record and not self.detail:
                    self.rows.append(Row(start, self.env.now, gpu.id, "hbm", op))
        yield gpu.sms.put(take)

    def _collective(self, g, r: int, gpu: _Gpu, kind: str, nbytes: float, op: str, key,
                    host_paid: bool = False, cluster: Cluster | None = None):
        # `cluster`: the one whose NCCL constants price this collective's dtype
        # (cost_model.ops.collective_cluster); None: the simulation's own
        cluster = cluster or self.cluster
        P = self._priced(("group_size", g), lambda: self.ctx.group_size(g))
        plan = self._priced(("plan", kind, nbytes, P, id(cluster)),
                            lambda: coll.choose_plan(kind, nbytes, P, cluster, P))
        take = yield from self._take_sms(gpu, int(plan.channels) or 1)
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
        yield gpu.sms.put(take)

    def _meet(self, g, r: int, P: int, gpu: _Gpu, key, algorithm: str, steps: int,
              step_s: float, op: str, uses: Route | None = None):
        """Rank r's part of a collective of every rank of group `g` (module docstring; r is
        the rank's index in `g`, P its size): arrive, and when the group is complete hold
        the links (`uses`, by default the group's route) until this rank's finish
        (simulator.rings)."""
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
        yield from self.network.transfer(route, float(meeting.finish[r]) - start)
        gpu.busy["link"] += steps * step_s
        if not self.record:
            return
        if meeting.starts is not None and self.env.now == float(meeting.finish[r]):
            for k in range(steps):  # not slowed by a shared link: each step as solved
                t = float(meeting.starts[k, r])
                self.rows.append(Row(t, t + step_s, gpu.id, "link", op))
        else:
            self.rows.append(Row(start, self.env.now, gpu.id, "link", op))

    def _fused(self, gpu: _Gpu, s: ir.Stmt, op: str, scale: float = 1.0,
               sm_cap: int | None = None):
        # sm_cap: at most this many SMs (an overlapped consumer's grid), else all that are free
        parts = self._priced(("fused", id(s)), lambda: fused_parts(self.ctx, s))
        env = self.env
        yield env.timeout(self._priced(("fused_latency", id(s)),
                                       lambda: fused_latency_s(self.ctx, s, parts)))
        # Copy engines move the bytes (ir.Fused.engine == "copy"): the pieces are the
        # schedule's, and only the computation holds SMs, piece by piece. Otherwise the one
        # kernel holds its SMs throughout and its pipeline has FUSED_CHUNKS steps.
        copy = parts.engine == "copy"
        chunks = parts.chunks if copy else FUSED_CHUNKS
        grid = sm_cap or self.cluster.gpu.sm_count
        take = grid if copy else (yield from self._take_sms(gpu, grid))
        frac = take / self.cluster.gpu.sm_count
        rs_part = FusedCopy(parts, rs=True)
        ag_part = FusedCopy(parts, rs=False)
        # peer accesses slow down on fewer SMs where the cluster has a calibrated block curve
        link = gpu.link_factor * self.draw.steps_jitter(chunks)  # per pipeline chunk
        load_s = self._priced(("load", id(s), take), lambda: fused_link_s(
            self.ctx, rs_part.parts, take)) * scale / chunks * link
        store_s = self._priced(("store", id(s), take), lambda: fused_link_s(
            self.ctx, ag_part.parts, take)) * scale / chunks * link
        comp_s = self._priced(("fused_work", id(s), scale, frac), lambda: work_s(
            self.cluster, parts.work.scaled(scale / chunks), frac))
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
        if not copy:
            yield gpu.sms.put(take)

    # ------------------------------------------------------------ statements

    def _host_issue_s(self, s: ir.Stmt) -> float:
        """The host's issue cost of a top-level statement: NCCL's per-call cost for a plain
        collective or Send (the cost model's OpCost.host_s), nothing for kernels."""
        if isinstance(s.op, ir.COMMUNICATION_OPS):
            return self._priced(("host", id(s)), lambda: float(stmt_cost(self.ctx, s).host_s))
        return 0.0

    def _run(self, g, r: int, gpu: _Gpu, s: ir.Stmt, key, scale: float = 1.0,
             leave_sms: int = 0, host_paid: bool = False, sm_cap: int | None = None):
        """Run statement `s` on rank `r` of group `g` by its op class's rule in RUN_RULES,
        and record it on the GPU's stream."""
        op = s.op
        run = _Run(g, r, gpu, s, key, f"{s.name} = {type(op).__name__}", scale, leave_sms,
                   host_paid, sm_cap)
        rule = RUN_RULES.get(type(op))
        if rule is None:
            raise WorkbenchError(f"simulator must know op {type(op).__name__}, got no rule in "
                                 f"RUN_RULES; add one in simulator/engine.py")
        start = self.env.now
        yield from rule(self, run)
        if self.record:
            self.rows.append(Row(start, self.env.now, gpu.id, "stream", run.name))

    # ------------------------------------------------------------ rules (RUN_RULES)

    def _run_view(self, run: _Run):
        """Slice: a view, no data moves."""
        yield from ()

    def _run_elementwise(self, run: _Run):
        """Compute, Update, ReduceAxis: one computation kernel."""
        work = self._priced(("elementwise", id(run.s)),
                            lambda: elementwise_work(self.ctx, [run.s]))
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
        (`collective_plan`); in the full mode a meeting of the sub-group's ranks, each step
        after the sub-group's previous rank's (ring order: the local rank inside a node, the
        node across nodes)."""
        s, gpu, r = run.s, run.gpu, run.r
        plan = self._priced(("node_plan", id(s), run.scale),
                            lambda: collective_plan(self.ctx, s, run.scale))
        take = yield from self._take_sms(gpu, int(plan.channels) or 1)
        cluster = self._priced(("cluster", id(s)), lambda: collective_cluster(self.ctx, s))
        host_s = cluster.nccl.host_overhead_s if run.host_paid else 0.0
        yield self.env.timeout(plan.fixed_s - host_s)
        steps = int(plan.steps)
        if self.reduced:
            batches = min(steps, MAX_STEP_EVENTS)
            for b in range(batches):
                n = steps // batches + (1 if b < steps % batches else 0)
                yield from self._hold(gpu, "link", n * plan.step_s, run.name)
        elif steps:
            g = s.op.sub.per_node
            P = self._priced(("group_size", run.g), lambda: self.ctx.group_size(run.g))
            intra = s.op.sub.axis == "intra"
            sub, index, size = (r // g, r % g, g) if intra else (r % g, r // g, P // g)
            # a ring over the sub-group whatever NCCL's plan is called, as priced; on the
            # GPU's own link route, as a fused kernel's transfers
            yield from self._meet((run.g, s.op.sub, sub), index, size, gpu, run.key, "ring",
                                  steps, float(plan.step_s), run.name, self._uses(gpu, None))
        yield gpu.sms.put(take)

    def _run_fused(self, run: _Run):
        """Fused: one computation kernel (kind "compute"), or a fused collective's pipeline."""
        s = run.s
        if s.op.kind == "compute":
            work = self._priced(("elementwise", id(s)),
                                lambda: elementwise_work(self.ctx, s.op.body))
            yield from self._compute(run.gpu, work, f"{s.name} = FusedCompute", run.scale)
        elif s.op.kind == "matmul":  # the GEMM (with its library epilogue), then any kernel
            works = self._priced(("matmul-epilogue", id(s)),
                                 lambda: matmul_epilogue_works(self.ctx, s))
            for work in works:
                yield from self._compute(run.gpu, work, f"{s.name} = FusedMatmul", run.scale)
        else:
            yield from self._fused(run.gpu, s, f"{s.name} = {s.op}", run.scale, run.sm_cap)

    def _run_overlapped(self, run: _Run):
        """Overlapped: producer and consumer chunk by chunk on two streams."""
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
            leave, cap = 0, overlap_consumer_sms(self.cluster)
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

    def _rank(self, g, r: int):
        gpu = self.gpus[(g, r)]
        host_t = 0.0  # when this rank's host has issued everything so far
        for i, s in enumerate(self.program.stmts):
            sg, sends, dsts = self._priced(("stmt", i), lambda s=s: (
                stmt_group(self.ctx, s),
                any(isinstance(leaf.op, ir.Send) for leaf in s.leaves()),
                {leaf.op.dst for leaf in s.leaves() if isinstance(leaf.op, ir.Send)}))
            if sg == g:
                host_s = self._host_issue_s(s)
                if host_s:
                    # The host issues NCCL calls ahead of the GPU (cost_model.ops.
                    # host_overlapped_total): the op starts once both are ready.
                    host_t += host_s
                    if host_t > self.env.now:
                        yield self.env.timeout(host_t - self.env.now)
                yield from self._run(g, r, gpu, s, i, host_paid=bool(host_s))
                if sends:
                    self._event((i, "sent", r)).succeed()  # the receiver may go on
            elif g in dsts:
                yield self._event((i, "sent", r))  # receive from the same rank of the stage
                del self.events[(i, "sent", r)]  # its one waiter had it: not kept forever

    def run(self) -> SimResult:
        """Simulate the program; returns the time of the slowest rank and the timeline."""
        procs = [self.env.process(self._rank(g, r))
                 for g in self.groups for r in range(self.ranks[g])]
        self.env.run(self.env.all_of(procs))
        busiest = max(self.gpus.values(), key=lambda x: max(x.busy.values()))
        return SimResult(float(self.env.now), self.rows,
                         sum(self.ranks.values()), self.ranks_total, self.reduced,
                         dict(busiest.busy))


@dataclass(frozen=True)
class FusedCopy:
    """The load (reduce-scatter) or store (all-gather, send) half of a fused kernel's parts."""

    full: object
    rs: bool

    @property
    def parts(self):
        """The fused kernel's parts with only this half's link traffic."""
        if self.rs:
            return dataclasses.replace(self.full, ag_nbytes=0, send_nbytes=0)
        return dataclasses.replace(self.full, rs_nbytes=0)


@dataclass(slots=True)
class Shared:
    """What the simulations of several programs on one cluster share (simulator.mesh): the
    SimPy environment, the network, the physical cluster, its GPUs by id as they are created,
    the timeline, the variability draw, and `placement(group, rank) -> GPU id`."""

    env: simpy.Environment
    network: Network
    cluster: Cluster
    placement: Callable[[Group, int], int]
    draw: Draw
    rows: list = field(default_factory=list)
    gpus: dict = field(default_factory=dict)


@dataclass(slots=True)
class _Meeting:
    """The ranks of one collective in the full simulation: when each arrived, its step
    time, and, once all have, every rank's finish (and per-step starts for the timeline)."""

    arrive: np.ndarray
    step_s: np.ndarray
    done: simpy.Event
    count: int = 0
    finish: np.ndarray | None = None
    starts: np.ndarray | None = None
    done_at: float = 0.0  # when the last rank arrived


@dataclass(frozen=True, slots=True)
class _Run:
    """One statement to run on rank `r` of group `g` (GPU `gpu`): its event key and timeline
    name, the share of its data it runs (`scale`: a chunk of an overlap), the SMs it leaves
    to a concurrent consumer or may take at most (`sm_cap`), and whether the host paid its
    issue cost (`host_paid`)."""

    g: Group
    r: int
    gpu: _Gpu
    s: ir.Stmt
    key: object
    name: str
    scale: float = 1.0
    leave_sms: int = 0
    host_paid: bool = False
    sm_cap: int | None = None


RUN_RULES: dict[type, Callable[[Simulation, _Run], Generator]] = {
    ir.Compute: Simulation._run_elementwise,
    ir.Update: Simulation._run_elementwise,
    ir.ReduceAxis: Simulation._run_elementwise,  # a row kernel, priced as the cost model does
    ir.MatMul: Simulation._run_matmul,
    ir.ReduceTensor: Simulation._run_reduction,
    ir.Norm: Simulation._run_reduction,
    ir.Slice: Simulation._run_view,
    ir.AllReduce: Simulation._run_collective,
    ir.ReduceScatter: Simulation._run_collective,
    ir.AllGather: Simulation._run_collective,
    ir.Broadcast: Simulation._run_collective,
    ir.Reduce: Simulation._run_collective,
    ir.Send: Simulation._run_send,
    ir.AllToAll: run_all_to_all,
    ir.Fused: Simulation._run_fused,
    ir.Overlapped: Simulation._run_overlapped,
}
"""How the simulator runs a statement of each op class: a SimPy process holding which
resources of which GPU (link, hbm, SMs), for durations that all come from cost_model. A new op
adds one entry here."""


def simulate(program: ir.Program, cluster: Cluster, bound: Mapping[sympy.Symbol, int],
             reduced: bool | None = None, record: bool = True,
             variability: Variability | None = None, sample: int = 0,
             options: CodegenOptions | None = None) -> SimResult:
    """Simulate `program` on `cluster` with sizes `bound`; reduced=None picks by rank count
    (full whenever `variability` makes ranks differ; `sample` picks its draw); `options`: the
    codegen options it is generated with (None: the defaults), which the cost model prices."""
    return Simulation(program, cluster, bound, reduced, record, variability, sample,
                      options=options).run()
