"""SimPy model of a program running on a cluster.

Each simulated GPU owns its resources: `hbm` (the memory pipeline that computation chunks
hold), `sms` (a Container of SMs: a communication kernel holds one SM per NCCL channel, a
computation kernel takes what is free) and `link` (the turn a fused kernel's loads and stores
take). Data moves as flows on the links of `simulator.network` (each GPU's NVLink, its NIC;
a ring step sends on the out direction while receiving on the in one, and by the symmetry of
collectives every GPU does both at once, so one link stands for the pair), which concurrent
transfers share max-min fairly. Each rank runs the steps of the program's lowered plan
(codegen.lower) that its stage runs, in order, as the runtime executes them: one stream, an
overlap's producer and consumer on two, a pipelined hierarchy's legs on three (one process
kind per plan step class: simulator.plan_steps; decision 104). Every duration comes from
cost_model (the simulator has no formulas of its own): NCCL plans give the chunk steps,
work_s the computation chunks, fused_link_s the fused kernels' transfers, each from the
step's own fields (cost_model.plan_cost).

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
are dropped once consumed; and each step is priced once per group (`_priced`), not per
rank.

The modules: `engine` (this: the Simulation, its ranks walking the plan, `simulate`),
`timeline` (Row, SimResult), `resources` (a GPU's resources, the shared state of a mesh, a
meeting), `routing` (which links a transfer holds), `kernels` (the processes of kernels and
collectives), `pipeline` (the links across nodes: the NIC route, CoCoNet's ring-fused
collective), `plan_steps` (PLAN_RUN_RULES: one process kind per plan step class).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import sympy

from codegen import plan as cp
from codegen.plan import Plan
from cost_model.hardware import Cluster
from cost_model.ops.context import CostContext
from cost_model.plan_cost import PlanContext
from simulator.kernels import Kernels
from simulator.network import Network
from simulator.pipeline import Pipelines
from simulator.plan_steps import PlanSteps
from simulator.resources import (  # noqa: F401  (re-exported: simulator.engine's names)
    COLLECT_RANKS,
    COMPUTE_CHUNKS,
    DETAIL_RANKS,
    FULL_RANK_LIMIT,
    FUSED_CHUNKS,
    MAX_STEP_EVENTS,
    Environment,
    FusedCopy,
    Shared,
    _Gpu,
    _Meeting,
    collector_paused,
)
from simulator.routing import Routing
from simulator.timeline import Row, SimResult
from simulator.variability import Variability
from workbench.errors import WorkbenchError
from workbench.options import CodegenOptions

if TYPE_CHECKING:  # annotations only: the simulator reads plans (decision 104)
    from workbench import ir


class Simulation(Routing, Kernels, Pipelines, PlanSteps):
    """One run of a program on a cluster (see module docstring)."""

    def __init__(self, program: ir.Program, cluster: Cluster, bound: Mapping[sympy.Symbol, int],
                 reduced: bool | None = None, record: bool = True,
                 variability: Variability | None = None, sample: int = 0,
                 shared: Shared | None = None, options: CodegenOptions | None = None,
                 plan: Plan | None = None):
        # `shared`: the environment, network, GPUs and timeline of a larger run this one is
        # part of (simulator.mesh: one program per group of a mesh axis, all on one cluster);
        # then `cluster` is the view that prices this program's groups (their ranks per node)
        # and `shared.cluster` the physical one. `plan`: the program lowered for its group
        # size with `options` (codegen.lower), or None to lower it here (`lowered_for`).
        plan = plan if plan is not None else lowered_for(program, bound, options)
        self.program = program
        self.cluster = cluster
        self.ctx = CostContext(program, cluster, bound, options=options or CodegenOptions())
        self.env = shared.env if shared else Environment()
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
        self.overlaps = any(isinstance(st, (cp.OverlapStep, cp.PipelineStep, cp.ChunkedStep))
                            for st in plan.steps)
        # Solo: one kernel at a time on each GPU (one stream, one group, no other program on
        # the cluster), so every kernel finds all its GPU's SMs and its HBM free: computation
        # kernels and NCCL calls take them without a SimPy event each (simulator.kernels).
        # Not with jitter: its draws come in the order the events run, which this changes.
        self.solo = (shared is None and not self.overlaps and len(self.groups) == 1
                     and not self.variability.jitter)
        self.events: dict = {}
        self.meetings: dict = {}
        self.prices: dict = {}
        self.plan = plan
        self.pc = PlanContext.of(plan, cluster, bound)
        # the plan's stages as the simulation's groups (the ranks, placement, links)
        by_name = {grp.name: grp for grp in self.groups}
        self.stages = tuple(by_name.get(n, self.groups[0]) for n in plan.groups)
        self.statements = plan.statements()

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
        """Hold the GPU's `resource` for `duration`: the pipeline of computation kernels
        (one kernel chunk at a time; recorded as "hbm" for a memory-bound kernel, "sm" for an
        arithmetic-bound one), or the links in `uses` (a flow of the network, sharing them
        with concurrent flows; a fused kernel's loads and stores also take turns on
        `gpu.link`)."""
        if resource in ("hbm", "sm"):
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
        gpu.busy[resource] = gpu.busy.get(resource, 0.0) + duration
        if self.record:
            self.rows.append(Row(start, self.env.now, gpu.id, resource, op))

    # ------------------------------------------------------------ the plan

    def _plan_rank(self, g, r: int):
        """Rank r of group `g` runs the plan's steps of its stage in order, statement by
        statement, as the runtime's executor does (PlanRun.steps: the steps of its stage); a
        statement's steps on another stage too (a Send) meet there: the receiving stage
        waits until the sender is done."""
        gpu = self.gpus[(g, r)]
        host_t = 0.0  # when this rank's host has issued everything so far
        for i, (origin, steps, groups) in enumerate(self.statements):
            first = self.stages[groups[0][0]]
            others = {self.stages[k] for gs in groups for k in gs} - {first}
            if first == g:
                host_s = self._plan_host_s(i, steps)
                if host_s:
                    # The host issues NCCL calls ahead of the GPU (cost_model.ops.
                    # host_overlapped_total): the op starts once both are ready.
                    host_t += host_s
                    if host_t > self.env.now:
                        yield self.env.timeout(host_t - self.env.now)
                yield from self._run_plan_stmt(g, r, gpu, origin, steps, groups, i,
                                               bool(host_s))
                if others:
                    self._event((i, "sent", r)).succeed()  # the receiver may go on
            elif g in others:
                yield self._event((i, "sent", r))  # receive from the same rank of the stage
                del self.events[(i, "sent", r)]  # its one waiter had it: not kept forever

    def rank_process(self, g, r: int):
        """The SimPy process of rank r of group `g`: the plan's steps of its stage."""
        return self._plan_rank(g, r)

    def run(self) -> SimResult:
        """Simulate the program; returns the time of the slowest rank and the timeline."""
        with collector_paused(collect=sum(self.ranks.values()) > COLLECT_RANKS):
            procs = [self.env.process(self.rank_process(g, r))
                     for g in self.groups for r in range(self.ranks[g])]
            self.env.run(self.env.all_of(procs))
        busiest = max(self.gpus.values(), key=lambda x: max(x.busy.values()))
        return SimResult(float(self.env.now), self.rows,
                         sum(self.ranks.values()), self.ranks_total, self.reduced,
                         dict(busiest.busy), getattr(self.env, "events", 0))


def simulate(program: ir.Program, cluster: Cluster, bound: Mapping[sympy.Symbol, int],
             reduced: bool | None = None, record: bool = True,
             variability: Variability | None = None, sample: int = 0,
             options: CodegenOptions | None = None, plan: Plan | None = None) -> SimResult:
    """Simulate `program` on `cluster` with sizes `bound`; reduced=None picks by rank count
    (full whenever `variability` makes ranks differ; `sample` picks its draw); `options`: the
    codegen options it is generated with (None: the defaults), which the cost model prices;
    `plan`: the program lowered for the group size (codegen.lower, with those options), whose
    steps run (simulator.plan_steps); None: lowered here (`lowered_for`). `bound`'s keys may
    be size names or any sympy Symbols of those names (a notebook's `sympy.Symbol("N")`)."""
    bound = program.sizes_by_symbol(bound)
    return Simulation(program, cluster, bound, reduced, record, variability, sample,
                      options=options, plan=plan).run()


def lowered_for(program: ir.Program, bound: Mapping[sympy.Symbol, int],
                options: CodegenOptions | None = None) -> Plan:
    """`program` lowered for the size of its groups in `bound` (P per stage), with the forms
    priced and simulated only (codegen.lower's priced_only): what the simulator runs when
    it is given a program and no plan. Raises lowering's refusal (RuntimeFault)."""
    from codegen.lower import lower

    P = int(sympy.sympify(program.groups()[0].size).subs(bound))
    return lower(program, P, options, priced_only=True)
