"""A data-parallel training step of the example GPT, simulated (design note 84): the forward
and backward kernels of `cost_model.training` on one GPU's SMs, the gradient buckets' work as
each side does it, and the phases a user measures (forward, backward, exposed communication,
optimizer), for torch (DDP + fused AdamW, or the plain model at P = 1) and for the
workbench's optimizer (each bucket's AllReduce + Adam as the optimizer program's schedule
runs it, after backward or launched from backward).

Resources (SimPy, one representative rank: data parallelism is symmetric): `gpu`, the SMs,
which kernels of every stream take in turn (design note 16: a fused collective beside cuBLAS
time-shares the SMs, measured), and `link`, the communication stream's NCCL calls, one after
another, which run beside the kernels. Every duration comes from cost_model: kernels from
`cost_model.training.kernel_s`, a bucket's statements from its plan steps
(`cost_model.plan_cost`), DDP's AllReduce from `cost_model.collectives.collective_time`. At
P = 1 nothing crosses the link: a fused kernel capped to a few blocks holds it only as the
side stream's order (note 99).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import simpy
import sympy

from codegen import plan as cp
from cost_model import training as ct
from cost_model.collectives import choose_plan
from cost_model.hardware import Cluster
from cost_model.ops.compute import work_s
from cost_model.ops.fused import fused_parts_cost
from cost_model.plan_cost import PlanContext, fused_parts_of, nccl_plan, step_cost
from simulator.timeline import Row
from workbench.errors import WorkbenchError
from workbench.options import CodegenOptions

if TYPE_CHECKING:  # annotations only: the simulator reads plans (decision 104)
    from workbench import ir

SIDES = ("torch", "workbench")
PHASES = ("forward", "backward", "exposed_comm", "optimizer")


@dataclass(frozen=True, slots=True)
class Stage:
    """One piece of a bucket's optimizer work: it holds the GPU's SMs (`gpu`: a kernel, a
    fused collective) or the communication stream (`link`: an NCCL call) for `seconds`; a
    `fused` stage (FUSED_MODES' beside) holds the link for `seconds` and, beside it, the SMs
    for `gpu_seconds` (its computation alone). An NCCL call holds `channels` SMs (one thread
    block per channel) that kernels overlapping it do without."""

    name: str
    resource: str
    seconds: float
    gpu_seconds: float = 0.0
    channels: int = 0  # an NCCL call's channels: SMs it takes from overlapped kernels


# How a fused collective kernel shares the GPU with backward's kernels: time-share (design
# note 16, measured: the overlapped step took the MatMul plus the collective) or beside (an
# optimistic bound: only its computation takes the SMs, its peer traffic runs beside them as
# NCCL's does).
FUSED_MODES = ("time-share", "beside")

@dataclass(frozen=True, slots=True)
class Side:
    """How one side trains: `torch` (DDP with its buckets when `ddp`, else the plain model;
    fused AdamW after backward) or `workbench` (a bucket's `stages` per bucket size, after
    backward or, with `overlap`, launched from backward as soon as the bucket is complete;
    gradients moved into buckets as `accumulate` says: copy, or add as GPU run 30 did)."""

    kind: str
    ddp: bool = True
    overlap: bool = False
    accumulate: str = "copy"
    bucket_bytes: int = ct.DDP_BUCKET_BYTES
    schedule: str = ""
    stages: Mapping[int, tuple[Stage, ...]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        if self.kind == "torch":
            return "torch " + ("DDP" if self.ddp else "plain") + " + AdamW(fused)"
        return "workbench " + ("in backward" if self.overlap else "after backward")


@dataclass(frozen=True, slots=True)
class StepResult:
    """A simulated step: the phases a user measures (seconds; backward_phase_s and
    optimizer_phase_s as CUDA events around loss.backward() and opt.step() see them, the
    exposed communication inside them), the buckets, and the timeline."""

    side: str
    label: str
    P: int
    forward_s: float
    backward_s: float
    exposed_comm_s: float
    optimizer_s: float
    backward_phase_s: float
    optimizer_phase_s: float
    buckets: int
    link_busy_s: float
    schedule: str = ""
    rows: tuple[Row, ...] = ()
    host_issue_s: float = 0.0  # the host's launch time for the stream's kernels

    @property
    def step_s(self) -> float:
        return self.forward_s + self.backward_phase_s + self.optimizer_phase_s

    @property
    def host_bound(self) -> bool:
        """Whether the host's launches, not the GPU, set the step: the host took longer to
        issue the kernels than the GPU was busy running them."""
        busy = sum(r.t_end - r.t_start for r in self.rows if r.resource == "stream")
        return self.host_issue_s > busy


def capped_sms(cluster: Cluster, options: CodegenOptions) -> int:
    """SMs a fused collective holds when its grid is capped (`collective_grid`, design note
    98): one a block, as the block scheduler spreads a grid smaller than the GPU and as NCCL's
    channels are counted here; 0 where it is not capped below one block per SM (the full
    grid: it time-shares the SMs, note 16). At P = 1 too (note 99)."""
    cap = options.collective_grid
    return cap if 0 < cap < cluster.gpu.sm_count else 0


def program_stages(program: ir.Program, cluster: Cluster, bound, fused: str = "time-share",
                   options: CodegenOptions = CodegenOptions(), plan=None) -> tuple[Stage, ...]:
    """A bucket's optimizer program (a schedule of studies/adam.py bound to the bucket's N and
    P, generated with `options`: `plan`, or lowered here once) as stages, statement by
    statement at its plan steps' prices (cost_model.plan_cost): a statement of NCCL
    collectives over several ranks holds the link (its host cost paid ahead, note 9), with
    NCCL's plan's channels; everything else (kernels, fused collectives, NCCL's copy over a
    group of one rank) the GPU, but for a fused collective kernel over several ranks with
    `fused` 'beside', which holds the link for its time and the SMs for its computation
    (`cost_model.ops.work_s` of its parts), and one whose grid `options.collective_grid`
    caps below the SMs, at any P, which holds the link (at P = 1 only the side stream's
    order) for its time and that many SMs, as an NCCL call's channels (note 98), its time
    `fused_parts_cost`'s on that share of the SMs: peer accesses through the block curve,
    computation on those SMs at their HBM rate (note 99)."""
    if fused not in FUSED_MODES:
        raise WorkbenchError(f"fused must be one of {', '.join(FUSED_MODES)}, got {fused!r}")
    if plan is None:
        from codegen.lower import lower

        # the ring-fused form too (priced only: simulate-step prices what it is given)
        plan = lower(program, int(sympy.sympify(program.groups()[0].size).subs(bound)),
                     options, priced_only=True)
    pc = PlanContext.of(plan, cluster, bound)
    capped = capped_sms(cluster, options)
    out = []
    for origin, steps, _ in plan.statements():
        costs = [step_cost(pc, st) for st in steps]
        seconds = sum(float(c.time_s) - float(c.host_s) for c in costs)
        link_s = sum(float(c.busy_s.get("link", 0)) for c in costs)
        # a region's name joins its leaves' names: its first names the stage, as its output
        name = origin.stmt.split(",")[0]
        if seconds <= 0:  # an AllReduce over one rank in place: nothing runs
            continue
        kernels = [st for st in steps if isinstance(st, cp.KernelStep)
                   and st.spec.kind in ("collective", "send")]
        if (all(isinstance(st, cp.NcclStep) for st in steps)
                and all(c.bottleneck == "link" for c in costs) and link_s):
            channels = max(int(nccl_plan(pc, st).channels) for st in steps)
            out.append(Stage(name, "link", seconds, channels=channels))
        elif fused == "beside" and len(kernels) == 1 and link_s:
            parts = fused_parts_of(pc, kernels[0])
            comp = cluster.gpu.launch_latency_s + float(work_s(cluster, parts.work))
            out.append(Stage(name, "fused", seconds, min(comp, seconds)))
        elif capped and len(kernels) == 1:
            # on its own SMs beside backward, at any P (at P = 1 it moves nothing over the
            # link: the link resource is then only the side stream's order), its computation
            # at the rate those SMs draw (note 99)
            c = fused_parts_cost(pc.ctx, fused_parts_of(pc, kernels[0]), None,
                                 min(1.0, capped / cluster.gpu.sm_count))
            out.append(Stage(name, "link", float(c.time_s) - float(c.host_s), channels=capped))
        else:
            out.append(Stage(name, "gpu", seconds))
    return tuple(out)


def padded_numel(used: int, P: int) -> int:
    """A bucket of `used` elements padded to a multiple of P x 8, as wbtorch.buckets pads it
    (a generated schedule's N divides by P; each rank's slice starts 16-byte aligned)."""
    unit = 8 * P
    return -(-used // unit) * unit


def workbench_buckets(shape: ct.GptShape, bucket_bytes: int, accumulate: str = "copy"
                      ) -> tuple[tuple[str, ...], ...]:
    """The workbench's buckets (wbtorch.buckets' rule; lent gradients alone)."""
    alone = ct.LEND_ALONE_BYTES if accumulate == "lend" else None
    return ct.fill_buckets(ct.parameters(shape), shape.itemsize, bucket_bytes,
                           alone_bytes=alone)


def workbench_bucket_numels(shape: ct.GptShape, P: int, bucket_bytes: int,
                            accumulate: str = "copy") -> tuple[int, ...]:
    """The padded sizes of the workbench's buckets (one optimizer program per size)."""
    numel = dict(ct.parameters(shape))
    return tuple(padded_numel(sum(numel[n] for n in b), P)
                 for b in workbench_buckets(shape, bucket_bytes, accumulate))


class _Step:
    """One step's SimPy processes on one representative rank."""

    def __init__(self, shape: ct.GptShape, cluster: Cluster, P: int, side: Side,
                 gemm_efficiency: float):
        self.shape, self.cluster, self.P, self.side = shape, cluster, P, side
        self.eff = gemm_efficiency
        self.env = simpy.Environment()
        self.gpu = simpy.Resource(self.env, capacity=1)
        self.link = simpy.Resource(self.env, capacity=1)
        self.rows: list[Row] = []
        # the host issues the stream's kernels one after another, host_launch_s each (none
        # under CUDA graphs: the cluster's is 0), running ahead of the GPU: a kernel starts
        # no earlier than the host has issued it (decision 105)
        self.host_launch_s = cluster.gpu.host_launch_s
        self.host_issued = 0.0
        self.gpu_busy: list[tuple[float, float]] = []
        self.link_busy = 0.0
        self.nccl_sms = 0  # SMs the running NCCL call holds
        params = ct.parameters(shape)
        self.numel = dict(params)
        if side.kind == "torch":
            self.buckets = ct.fill_buckets(params, shape.itemsize, side.bucket_bytes,
                                           ct.DDP_FIRST_BUCKET_BYTES)
        else:
            self.buckets = workbench_buckets(shape, side.bucket_bytes, side.accumulate)
        # lent gradients (a bucket of one large parameter, read in place): no copy
        self.lent = {b[0] for b in self.buckets if side.accumulate == "lend" and len(b) == 1
                     and self.numel[b[0]] * shape.itemsize >= ct.LEND_ALONE_BYTES}
        self.bucket_of = {n: i for i, b in enumerate(self.buckets) for n in b}
        self.missing = [len(b) for b in self.buckets]
        self.launched = 0  # buckets launched, in bucket order (as DDP and wbtorch issue them)
        self.bucket_done = [self.env.event() for _ in self.buckets]

    # -- resources ------------------------------------------------------------------------
    def issue(self):
        """The host issues one more kernel of the stream: wait until it has."""
        self.host_issued += self.host_launch_s
        if self.host_issued > self.env.now:
            yield self.env.timeout(self.host_issued - self.env.now)

    def hold(self, resource: str, name: str, seconds, stream: str, channels: int = 0):
        """Hold the GPU's SMs or the link for `seconds` (a number, or a function of the SMs
        NCCL leaves free when the kernel starts), recording the row; an NCCL call holds
        `channels` SMs meanwhile. A kernel of the main stream waits for the host to have
        issued it."""
        if stream == "stream":
            yield from self.issue()
        res = self.gpu if resource == "gpu" else self.link
        with res.request() as req:
            yield req
            start = self.env.now
            if callable(seconds):
                seconds = seconds(1.0 - self.nccl_sms / self.cluster.gpu.sm_count)
            self.nccl_sms += channels
            yield self.env.timeout(seconds)
            self.nccl_sms -= channels
            # at P = 1 nothing crosses the link: a stage held there (a capped fused kernel,
            # note 99) is a kernel on SMs of its own, on its stream
            on_sms = resource == "gpu" or self.P == 1
            self.rows.append(Row(start, self.env.now, 0, stream if on_sms else "link", name))
            if on_sms:
                self.gpu_busy.append((start, self.env.now))
            else:
                self.link_busy += seconds

    def stage(self, st: Stage, name: str, stream: str):
        """Run one bucket stage; a fused one holds the link and, beside it, the SMs."""
        if st.resource != "fused":
            yield from self.hold(st.resource, name, st.seconds, stream, st.channels)
            return
        sms = self.env.process(self.hold("gpu", name, st.gpu_seconds, stream))
        yield from self.hold("link", name, st.seconds, stream)
        yield sms

    def bucket_numel(self, b: int) -> int:
        """A bucket's elements as the workbench pads it (a multiple of P x 8)."""
        return padded_numel(sum(self.numel[n] for n in self.buckets[b]), self.P)

    # -- buckets --------------------------------------------------------------------------
    def ready(self, grads):
        """Gradients just completed: launch every bucket that is complete, in bucket order."""
        for g in grads:
            self.missing[self.bucket_of[g]] -= 1
        while self.launched < len(self.buckets) and self.missing[self.launched] == 0:
            b = self.launched
            self.launched += 1
            if self.side.kind == "torch" and self.side.ddp and self.P > 1:
                self.env.process(self.allreduce(b))
            elif self.side.kind == "workbench" and self.side.overlap:
                self.env.process(self.bucket_step(b, after=b - 1))
            else:
                self.bucket_done[b].succeed()

    def allreduce(self, b: int):
        """DDP's AllReduce of bucket b on the communication stream."""
        nbytes = sum(self.numel[n] for n in self.buckets[b]) * self.shape.itemsize
        plan = choose_plan("allreduce", nbytes, self.P, self.cluster, self.P)
        yield from self.hold("link", f"allreduce bucket {b}",
                             float(plan.time_s) - self.cluster.nccl.host_overhead_s, "link",
                             int(plan.channels))
        self.bucket_done[b].succeed()

    def bucket_step(self, b: int, after: int):
        """The workbench's step of bucket b (its stages in order, on the side stream), after
        bucket `after`'s (one stream: buckets run in order)."""
        if after >= 0:
            yield self.bucket_done[after]
        for st in self.side.stages[self.bucket_numel(b)]:
            yield from self.stage(st, f"bucket {b}: {st.name}", "side")
        self.bucket_done[b].succeed()

    # -- the stream -----------------------------------------------------------------------
    def kernel(self, k: ct.Kernel):
        """A forward or backward kernel, on the SMs an overlapping NCCL call leaves it."""
        yield from self.hold("gpu", k.name, lambda f: ct.kernel_s(
            self.cluster, k, self.shape.dtype, self.eff, f), "stream")

    @property
    def copies_in_backward(self) -> bool:
        """Where the workbench moves gradients into buckets: in backward when hooks run there
        (the optimizer in backward) or autograd adds into bucket views (`add`, run 30), else
        in step(), before each bucket's kernel (GPU run 33: --copy-grads after backward moved
        1.8 ms into the optimizer phase, backward unchanged)."""
        return self.side.overlap or self.side.accumulate == "add"

    def into_buckets(self, name: str, grads):
        """The workbench's gradients `grads` into their buckets (lent ones stay in place)."""
        numel = sum(self.numel[g] for g in grads if g not in self.lent)
        passes = ct.WB_GRAD_PASSES[self.side.accumulate]
        if numel:
            yield from self.copy(f"into bucket: {name}", numel, (passes - 1, 1))

    def copy(self, name: str, numel: int, passes):
        yield from self.hold("gpu", name, ct.copy_s(self.cluster, numel, self.shape.itemsize,
                                                    passes), "stream")

    def stream(self, marks: dict):
        side = self.side
        for k in ct.forward_kernels(self.shape):
            yield from self.kernel(k)
        marks["forward"] = self.env.now
        ddp = side.kind == "torch" and side.ddp
        for k in ct.backward_kernels(self.shape):
            yield from self.kernel(k)
            if not k.grads:
                continue
            numel = sum(self.numel[g] for g in k.grads)
            if ddp:  # Reducer: the gradient into its bucket, scaled by 1/P
                yield from self.copy(f"ddp copy-in {k.name}", numel, (1, 1))
            elif side.kind == "workbench" and self.copies_in_backward:
                yield from self.into_buckets(k.name, k.grads)
            self.ready(k.grads)
        marks["backward_kernels"] = self.env.now
        if ddp:  # finalize: wait for every AllReduce, copy the buckets back into .grad
            yield self.env.all_of(self.bucket_done)
            yield from self.copy("ddp copy-out", sum(self.numel.values()), (1, 1))
        marks["backward"] = self.env.now
        if side.kind == "torch":
            yield from self.hold("gpu", "AdamW(fused)", ct.adamw_s(self.cluster,
                                                                  sum(self.numel.values())),
                                 "stream")
        elif side.overlap:  # step(): torch's stream waits for the side stream
            yield self.env.all_of(self.bucket_done)
        else:
            for b in range(len(self.buckets)):
                if not self.copies_in_backward:
                    yield from self.into_buckets(f"bucket {b}", self.buckets[b])
                for st in side.stages[self.bucket_numel(b)]:
                    yield from self.stage(st, f"bucket {b}: {st.name}", "stream")
        marks["step"] = self.env.now

    def gpu_time(self, a: float, b: float) -> float:
        """Seconds in [a, b] during which the SMs ran a kernel."""
        return sum(max(0.0, min(e, b) - max(s, a)) for s, e in self.gpu_busy)

    def run(self) -> StepResult:
        marks: dict = {}
        self.env.process(self.stream(marks))
        self.env.run()
        f, b, s = marks["forward"], marks["backward"], marks["step"]
        idle_b = max(0.0, (b - f) - self.gpu_time(f, b))
        idle_o = max(0.0, (s - b) - self.gpu_time(b, s))
        return StepResult(self.side.kind, self.side.label, self.P, f, (b - f) - idle_b,
                          idle_b + idle_o, (s - b) - idle_o, b - f, s - b, len(self.buckets),
                          self.link_busy, self.side.schedule,
                          tuple(sorted(self.rows, key=lambda r: r.t_start)),
                          host_issue_s=self.host_issued)


def simulate_step(shape: ct.GptShape, cluster: Cluster, P: int, side: Side,
                  gemm_efficiency: float) -> StepResult:
    """One training step of `shape` on P data-parallel GPUs of `cluster` for `side`: the
    phases and the timeline of a representative rank."""
    if not isinstance(P, int) or P < 1 or P > cluster.world_size:
        raise WorkbenchError(f"the data-parallel size P must be 1..{cluster.world_size} (the "
                             f"GPUs of {cluster.name}), got {P!r}; pass --gpus or more --nodes")
    if side.kind not in SIDES:
        raise WorkbenchError(f"side must be one of {', '.join(SIDES)}, got {side.kind!r}")
    if side.kind == "torch" and not side.ddp and P > 1:
        raise WorkbenchError(f"torch without DDP must run at P = 1 (no gradient is averaged), "
                             f"got P = {P}; use DDP")
    if side.accumulate not in ct.WB_GRAD_PASSES:
        raise WorkbenchError(f"accumulate must be one of {', '.join(ct.WB_GRAD_PASSES)}, got "
                             f"{side.accumulate!r}")
    if side.accumulate == "lend" and P > 1:
        raise WorkbenchError(f"lent gradients (accumulate 'lend') must run at P = 1, as "
                             f"wbtorch lends them, got P = {P}; use copy")
    step = _Step(shape, cluster, P, side, gemm_efficiency)
    if side.kind == "workbench":
        missing = {step.bucket_numel(b) for b in range(len(step.buckets))} - set(side.stages)
        if missing:
            raise WorkbenchError(f"the workbench side must have stages for every bucket size, "
                                 f"got none for N = {sorted(missing)}; build them with "
                                 "program_stages")
    return step.run()
