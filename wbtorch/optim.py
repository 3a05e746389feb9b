"""The data-parallel optimizer: "DDP AllReduce + optimizer.step()" replaced by one generated
kernel per gradient bucket (design notes 50-52).

    opt = wbtorch.DataParallelOptimizer(model.parameters(), "studies/adam.py", lr=1e-3,
                                        beta1=0.9, beta2=0.999, eps=1e-8)
    for batch in data:
        loss = model(batch); loss.backward()     # no DDP wrapper: the optimizer all-reduces
        opt.step(); opt.zero_grad()

The parameters are flattened into buckets (wbtorch.buckets); each bucket's weights, gradients
and state live in the buffers of its schedule's plan, and every parameter's `.data` and `.grad`
become views into them (one copy, at construction): backward accumulates into the bucket, and the
kernel updates the weights the next forward reads, with no copies per step. The gradient is
summed over the group by the program; like DDP, the optimizer divides it by P first (an
average), so that the same hyperparameters train as they do under DDP.

torch is imported inside functions only (it is not a dependency of the base install).
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import numpy as np

from wbtorch import buckets as bk
from wbtorch import choice as ch
from wbtorch import overlap as ov
from wbtorch.bucket_run import BucketRun
from wbtorch.programs import (
    STEP,
    ProgramRoleError,
    check_grad_dtype,
    check_hyper,
    pick_schedule,
    roles,
)
from workbench.loader import load
from workbench.options import CodegenOptions

ROOT = Path(__file__).resolve().parents[1]  # the repository (program files are found there)

# The torch step of each study: what a user runs after NCCL's all_reduce (the candidate that
# a generated schedule must beat, and the fallback when fusion does not pay).
TORCH_STEPS = ("adam", "sgd", "lamb")

# At P = 1 a parameter of at least this many bytes gets a bucket of its own, whose gradient
# buffer is torch's own .grad tensor (no copy into a flat bucket: design note 82).
LEND_ALONE_BYTES = 4 * 2**20


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _make_gpu(group):
    """This rank's TorchGpu over `group` (a seam: CPU tests put a fake device here)."""
    from workbench.runtime.torch_bridge import TorchGpu

    return TorchGpu(group)


_GPUS: dict = {}


def gpu_for(group):
    """One device object per process group, shared by every optimizer and layer over it (one
    nccl4py communicator and one pushed context per group, not one per layer)."""
    key = id(group) if group is not None else None
    if key not in _GPUS or _GPUS[key][0] is not _make_gpu:
        _GPUS[key] = (_make_gpu, _make_gpu(group))
    return _GPUS[key][1]


def release_devices() -> None:
    """Pop the CUDA contexts the device objects pushed and forget them (tests, and programs
    that go on without the workbench; at exit, workbench.runtime.gpu's hook pops what is left)."""
    for _, gpu in list(_GPUS.values()):
        close = getattr(gpu, "close", None)
        if close is not None:
            close()
    _GPUS.clear()


def _bind(gpu, plan, sizes: dict, blocks_per_sm: int | None = None):
    """A lowered plan bound to sizes on `gpu` (workbench.runtime.torch_bridge.BoundPlan; the
    same seam)."""
    from workbench.runtime.torch_bridge import BoundPlan

    return BoundPlan(gpu, plan, sizes, blocks_per_sm)


def keeps_state_sliced(loaded, schedule: str) -> bool:
    """Whether a schedule of a loaded optimizer program keeps all its state sliced (ZeRO-1);
    the torch step keeps it whole."""
    if schedule == ch.TORCH:
        return False
    r = roles(pick_schedule(loaded, schedule))
    return set(r.sliced_state) == set(r.state)


class DataParallelOptimizer:
    """Data-parallel training step of a workbench optimizer program (studies/sgd.py,
    adam.py, lamb.py or one of the same form: wbtorch.programs), one fused generated kernel
    per gradient bucket, over a torch.distributed process group.

    params: the model's parameters (the same values on every rank: checked).
    program: a program file spec (`studies/adam.py`, `FILE.py:NAME`).
    schedule: a schedule name of the file, 'unscheduled', 'torch' (NCCL all_reduce + the torch
        step), or 'auto': per bucket, the least time among all of them in every codegen mode
        and codegen knob (`modes`, `unrolls`, `blocks` per SM of a fused collective)
        (`choose`: 'measure' times each on the GPU for `trial_reps` runs on scratch buffers;
        'predict' asks the simulator on `hardware`, a preset name or a calibrated profile).
    group: the torch.distributed process group (None: the world).
    bucket_bytes: the gradient bucket cap (DDP's 25 MiB by default).
    overlap: run each bucket's step in backward, on a side stream, as soon as the bucket's
        gradients are accumulated (post-accumulate-grad hooks; design note 63); `step()` then
        runs what backward did not launch and makes torch's stream wait for the side stream.
        Backward must have more than one autograd node over the parameters for this to
        overlap anything: compile the model by regions (each block), or whole with its graph
        cut into pieces (examples/train_gpt.py --compile-scope split, design note 94). The
        hooks do no torch work; each bucket takes its gradients when it launches (note 93).
    zero: keep the optimizer state sliced across the group (ZeRO-1): only schedules whose
        state stays sliced are candidates (the torch step keeps it whole and is left out);
        `memory()` reports the bytes per rank.
    lend_grads: a parameter of LEND_ALONE_BYTES or more gets a bucket of its own whose plan
        reads torch's `.grad` tensor in place, instead of a copy of it in a flat bucket
        (None: at P = 1, where no peer maps the buffer; True at P > 1 is refused).
    hyper: the program's scalars by name (lr, beta1, beta2, eps, wd, ...); `step` is counted.
    """

    def __init__(self, params, program: str = "studies/adam.py", schedule: str = "auto", *,
                 group=None, bucket_bytes: int = bk.DEFAULT_BUCKET_BYTES,
                 choose: str = "measure", hardware: str | None = None,
                 modes=ch.MODES, unrolls=(1,), blocks=ch.BLOCKS_PER_SM, trial_reps: int = 10,
                 check_replicas: bool = True, overlap: bool = False, zero: bool = False,
                 lend_grads: bool | None = None, log=_stderr, **hyper):
        import torch

        self.torch, self.log = torch, log
        self.params = [p for p in params]
        if not self.params:
            raise bk.BucketError("the optimizer must be given at least one parameter, got none; "
                                 "pass model.parameters() of a model with trainable parameters")
        self.spec = program
        self.codegen = CodegenOptions.from_env()  # the WB_* knobs, read once here
        self.loaded = load(program)
        self.roles = roles(self.loaded.program)
        dtypes = {str(p.dtype).removeprefix("torch.") for p in self.params}
        for d in sorted(dtypes):
            check_grad_dtype(self.roles, d)
        self.hyper = check_hyper(self.roles, hyper)
        if choose not in ("measure", "predict"):
            raise ProgramRoleError(f"choose must be 'measure' or 'predict', got {choose!r}")
        if choose == "predict" and hardware is None and schedule == "auto":
            raise ProgramRoleError("choose='predict' must name the hardware to simulate, got "
                                   "none; pass hardware='h200x4' or a calibrated profile "
                                   "(workbench calibrate), or choose='measure'")
        self.gpu = gpu_for(group)
        self.P, self.rank, self.group = self.gpu.P, self.gpu.rank, group
        if check_replicas:
            self._check_replicas()
        if lend_grads and self.P > 1:
            raise ProgramRoleError(f"lend_grads=True must run at P = 1 (a fused collective's "
                                   f"peers map the gradient buffer), got P = {self.P}; leave "
                                   "it None")
        self.lend_grads = self.P == 1 if lend_grads is None else bool(lend_grads)
        self.rebinds = 0  # gradient buffers moved to another .grad tensor (note 82)
        shapes = [(f"param{i}", tuple(p.shape), str(p.dtype).removeprefix("torch."))
                  for i, p in enumerate(self.params)]
        self.buckets = bk.plan_buckets(shapes, self.P, bucket_bytes,
                                       self.params[0].element_size(),
                                       LEND_ALONE_BYTES if self.lend_grads else None)
        for line in bk.describe(self.buckets).splitlines():
            if self.rank == 0:
                self.log(f"[wbtorch] {line}")
        self.step_count = 0
        self.zero = zero
        self.choices: list[dict] = []
        self._trials: dict[int, dict] = {}
        self.runs: list[BucketRun] = []
        self._slot_grad: dict = {}  # parameter index -> its .grad: a view of its bucket
        # the torch step updates the weights the model reads: none for a mixed program
        self._torch_ok = self.loaded.program.name in TORCH_STEPS and self.roles.low is None
        cluster = None
        if hardware is not None:
            from cost_model.hardware import load_hardware

            cluster = load_hardware(hardware)
        for b in self.buckets:
            cand = self._choose(b, schedule, choose, cluster, modes, unrolls, blocks,
                                trial_reps)
            if zero and not keeps_state_sliced(self.loaded, cand.schedule):
                raise ProgramRoleError(
                    f"zero=True must run a schedule that keeps the optimizer state sliced, got "
                    f"{cand.schedule}, which keeps {', '.join(self.roles.state)} whole; pass "
                    "schedule='auto' or one that slices it (fuse-rs-c-ag, "
                    "rs-c-ag-sliced-state)")
            run = BucketRun(self, b, cand, _bind)
            self._adopt(run)
            self.runs.append(run)
        self._run_of = {s.index: run for run in self.runs for s in run.bucket.slots}
        self._step_t, self._filled = self._share_step(), 0
        self.overlap = overlap
        self.launch_order: list[int] = []  # the last step's bucket launch order (overlap)
        self._side = self._ready = None
        self._hooks: list = []
        if overlap:
            self._side = self.gpu.side_stream()
            self._ready = ov.Readiness.of(self.buckets)
            self._hooks = ov.install_hooks(self.params, self._ready, self._launch)
        self.gpu.synchronize()

    # -- construction

    def _check_replicas(self) -> None:
        """Every rank must start from the same parameters (the program's weights are
        Replicated): a checksum per parameter, compared across the group."""
        torch = self.torch
        with torch.no_grad():
            sums = torch.stack([torch.stack([p.detach().double().sum(),
                                             p.detach().double().square().sum()])
                                for p in self.params]).cpu().numpy()
        everyone = self.gpu.all_gather(sums.tolist())
        for r, theirs in enumerate(everyone):
            diff = np.nonzero(np.any(np.asarray(theirs) != sums, axis=1))[0]
            if diff.size:
                i = int(diff[0])
                raise ProgramRoleError(
                    f"parameters must be the same on every rank at start, got parameter {i} "
                    f"(shape {tuple(self.params[i].shape)}) different on rank {r} from rank "
                    f"{self.rank}; seed every rank alike (torch.manual_seed) or broadcast the "
                    "model from rank 0 before building the optimizer")

    def _choose(self, b, schedule, choose, cluster, modes, unrolls, blocks,
                trial_reps) -> ch.Candidate:
        if schedule == ch.TORCH:
            if not self._torch_ok:
                raise ProgramRoleError(f"schedule 'torch' must be a program with a torch step "
                                       f"({', '.join(TORCH_STEPS)}, fp32), got program "
                                       f"{self.loaded.program.name}"
                                       f"{' (mixed precision)' if self.roles.low else ''}; "
                                       "pick one of its schedules")
            return ch.Candidate(ch.TORCH)
        if schedule != "auto":
            pick_schedule(self.loaded, schedule)  # a clear error for a schedule it lacks
            return ch.Candidate(schedule, modes[0], unrolls[0], blocks[0])
        cands = ch.candidates(self.loaded, self.P, self._torch_ok and not self.zero, modes,
                              unrolls, blocks)
        if self.zero:
            cands = [c for c in cands if keeps_state_sliced(self.loaded, c.schedule)]
        predicted = (ch.predict(self.loaded, cands, b.numel, self.P, cluster, self.codegen)
                     if cluster else None)
        measured = None
        if choose == "measure":
            # buckets of one size share a trial (a model's buckets are mostly cap-sized)
            measured = self._trials.get(b.numel)
            if measured is None:
                measured = {c: self._trial(b, c, trial_reps) for c in cands}
                # every rank must pick the same candidate: rank 0's times decide
                measured = dict(zip(cands, self.gpu.comm.host.bcast(list(measured.values()))))
                self._trials[b.numel] = measured
            pick = ch.best(measured)
        else:
            pick = ch.best(predicted)
        self.choices.append({"bucket": b.index, "N": b.numel, "chosen": pick.label,
                             "predicted_s": {c.label: t for c, t in (predicted or {}).items()},
                             "measured_s": {c.label: t for c, t in (measured or {}).items()}})
        if self.rank == 0:
            for line in ch.log_lines(b.index, b.numel, predicted, measured, pick):
                self.log(f"[wbtorch] {line}")
        return pick

    def _trial(self, b, cand: ch.Candidate, reps: int) -> float:
        """Median seconds of `reps` runs of a candidate on scratch buffers of the bucket's
        size (random gradients and weights, zero state): the trial never touches the model."""
        torch = self.torch
        try:
            run = BucketRun(self, b, cand, _bind)
        except Exception as e:  # a schedule that does not lower or compile: not a candidate
            if self.rank == 0:
                self.log(f"[wbtorch] candidate {cand.label} left out: {e}")
            return math.nan
        try:
            gen = torch.Generator(device=run.g.device).manual_seed(self.rank)
            for name, s in run.scalars.items():
                s.fill_(self.hyper.get(name, 1.0))
            times = []
            for i in range(reps + 2):
                run.g.copy_(torch.randn(run.g.numel(), device=run.g.device, generator=gen))
                run.w.normal_(generator=gen)
                for s in run.state.values():
                    s.zero_()
                torch.cuda.synchronize()
                a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                run.run(1)
                z.record()
                z.synchronize()
                if i >= 2:
                    times.append(a.elapsed_time(z) * 1e-3)
            return statistics.median(times)
        finally:
            torch.cuda.synchronize()
            run.bound.free()

    def _share_step(self):
        """One step scalar for every generated bucket (each plan's `step` input rebound to
        it), filled once a step instead of once a bucket; None when no plan reads one."""
        shared = [r for r in self.runs if r.cand.generated and STEP in r.scalars]
        if not shared:
            return None
        t = self.torch.zeros(1, dtype=shared[0].scalars[STEP].dtype,
                             device=shared[0].scalars[STEP].device)
        for r in shared:
            r.bound.rebind({STEP: t})
            r.scalars[STEP] = r.bound.view(STEP)
            r.shared_step = True
        return t

    def _fill_step(self) -> None:
        """The shared step scalar holds this step's count (once a step, before its first
        bucket, on the stream the buckets run on)."""
        if self._step_t is not None and self._filled != self.step_count + 1:
            self._step_t.fill_(float(self.step_count + 1))
            self._filled = self.step_count + 1

    def _adopt(self, run: BucketRun) -> None:
        """Copy the parameters into the bucket's weights (the one copy) and make every
        parameter's .data and .grad views of the bucket; state starts at zero. Mixed
        precision: .data views the low-precision weights, and the fp32 master (this rank's
        slice where the schedule keeps it sliced) starts as the parameters' values."""
        torch = self.torch
        with torch.no_grad():
            run.w.zero_()
            run.g.zero_()
            for s in run.state.values():
                s.zero_()
            for name, value in self.hyper.items():
                run.scalars[name].fill_(value)
            model = run.w if run.low is None else run.low
            if run.low is not None:
                model.zero_()
            for slot in run.bucket.slots:
                p = self.params[slot.index]
                view = model[slot.offset:slot.offset + slot.numel].view(p.shape)
                view.copy_(p.detach())
                p.data = view
                p.grad = run.g[slot.offset:slot.offset + slot.numel].view(p.shape)
                self._slot_grad[slot.index] = p.grad
            if run.low is not None:  # the master: this rank's part of the model's weights
                a, b = (run.bucket.rank_range(self.rank, self.P) if run.sliced(run.roles.weights)
                        else (0, run.bucket.numel))
                run.w.copy_(run.low[a:b].float())

    # -- training

    def step(self) -> None:
        """One optimizer step over every bucket: the group's gradient sum (averaged) and the
        update, enqueued in torch's current stream's order (no host synchronisation). With
        overlap, the buckets backward launched are in flight on the side stream; this runs
        the others there and makes torch's current stream wait for the side stream, so the
        next forward reads the updated weights."""
        if self.overlap:
            for k in self._ready.take_pending():
                self._run_on_side(k)
            self._side.join()
            self.launch_order = self._ready.new_step()
        else:
            self._fill_step()
            for run in self.runs:
                run.take_grads(self.params, self._slot_grad)
                run.run(self.step_count + 1)
        self.step_count += 1

    def _launch(self, k: int) -> None:
        """A post-accumulate-grad hook completed bucket k: run its step now (overlap)."""
        self._run_on_side(k)

    def _run_on_side(self, k: int) -> None:
        run = self.runs[k]
        run.take_grads(self.params, self._slot_grad)  # on torch's stream, before the wait
        if self._filled != self.step_count + 1:
            with self._side:
                self._fill_step()
        self._side.wait_current()  # the bucket's gradients, accumulated on torch's stream
        if run.torch_free:  # kernels straight onto the side stream: no stream switch
            run.run(self.step_count + 1, self._side)
            return
        with self._side:
            run.run(self.step_count + 1, self._side)

    def no_sync(self):
        """A context manager for gradient accumulation (as DDP's): backward inside it
        launches no bucket; the backward after it does, on the summed gradients."""
        import contextlib

        @contextlib.contextmanager
        def accumulate():
            if self._ready is None:
                yield
                return
            self._ready.accumulating = True
            try:
                yield
            finally:
                self._ready.accumulating = False

        return accumulate()

    def synchronize_side(self) -> None:
        """torch's current stream waits for the side stream (overlap; else nothing)."""
        if self._side is not None:
            self._side.join()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients. set_to_none (torch's default): every .grad becomes None, so
        that the next backward hands over each new gradient tensor as it is and the
        optimizer copies it into its bucket (one read, one write; the bucket view is .grad
        again from then on); a parameter that gets none has a zero gradient in its bucket.
        Else the buckets are zeroed in place and backward adds into them (a memset, then
        two reads and a write: GPU run 30's 3.8 ms at 806M parameters)."""
        self.synchronize_side()  # a bucket in flight still reads its gradients
        if set_to_none:
            for p in self.params:
                p.grad = None
            return
        for run in self.runs:
            if run.lends:  # the .grad it reads, or (.grad gone) its own buffer as .grad
                run.lend(self.params[run.bucket.slots[0].index])
            run.g.zero_()

    def set_hyper(self, **hyper) -> None:
        """Change scalars between steps (e.g. a learning-rate schedule)."""
        for k, v in hyper.items():
            if k not in self.roles.hyper:
                raise ProgramRoleError(f"a hyperparameter must be one of {list(self.roles.hyper)}"
                                       f", got {k!r}")
            self.hyper[k] = float(v)
            for run in self.runs:
                run.scalars[k].fill_(float(v))

    def _torch_step(self, run: BucketRun, step: int) -> None:
        """NCCL all_reduce of the bucket, then the torch step of the program's study."""
        torch, dist = self.torch, self.gpu.dist
        if self.P > 1:
            dist.all_reduce(run.g, group=self.group)
        h, name = self.hyper, self.loaded.program.name
        if name == "sgd":
            run.w.add_(run.g, alpha=-h["lr"])
        elif name == "adam":
            t = getattr(run, "_step_t", None)
            if t is None:
                t = run._step_t = torch.zeros((), device=run.g.device)
            t.fill_(float(step))
            torch._fused_adam_([run.w], [run.g], [run.state["m"]], [run.state["v"]], [], [t],
                               lr=h["lr"], beta1=h["beta1"], beta2=h["beta2"],
                               weight_decay=0.0, eps=h["eps"], amsgrad=False, maximize=False)
        else:  # lamb, over the bucket as the program does
            b1, b2 = h["beta1"], h["beta2"]
            m, v, w, g = run.state["m"], run.state["v"], run.w, run.g
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            u = (m / (1 - b1 ** step)) / ((v / (1 - b2 ** step)).sqrt_().add_(h["eps"])) \
                + h["wd"] * w
            w.sub_(u * (h["lr"] * torch.linalg.vector_norm(w) / torch.linalg.vector_norm(u)))

    # -- state

    def memory(self) -> dict:
        """Bytes this rank holds for the optimizer's buffers: weights, gradients, state (as
        held, sliced or not), the state as it would be whole, and the difference (what
        ZeRO-1's slicing saves on this rank)."""
        out = {"weights": 0, "grads": 0, "state": 0, "state_whole": 0}
        for run in self.runs:
            out["weights"] += run.w.numel() * run.w.element_size()  # (mixed: the master)
            if run.low is not None:
                out["weights"] += run.low.numel() * run.low.element_size()
            out["grads"] += run.g.numel() * run.g.element_size()
            for t in run.state.values():
                out["state"] += t.numel() * t.element_size()
                out["state_whole"] += run.bucket.numel * t.element_size()
        out["state_saved"] = out["state_whole"] - out["state"]
        return {k: int(v) for k, v in out.items()}

    def _whole(self, run: BucketRun, name: str):
        """A state value of a bucket as a whole bucket-shaped tensor (gathered over the group
        when this schedule keeps it sliced: a collective call)."""
        view = run.saved()[name]
        if not run.sliced(name) or self.P == 1:
            return view
        whole = self.torch.empty(run.bucket.numel, dtype=view.dtype, device=view.device)
        self.gpu.dist.all_gather_into_tensor(whole, view, group=self.group)
        return whole

    def state_dict(self) -> dict:
        """The optimizer's state, whole and per parameter (the same on every rank, whether a
        bucket's schedule keeps its state sliced or not; with sliced state every rank must
        call it, since it gathers): {'program', 'step', 'hyper', 'state': {param index:
        {state name: CPU tensor shaped like the parameter}}, 'choices'}; mixed precision
        also saves the fp32 master weights under the program's weights name (`w`)."""
        self.synchronize_side()
        state: dict[int, dict] = {}
        for run in self.runs:
            for name in run.saved():
                whole = self._whole(run, name).detach().cpu().numpy()
                for index, arr in bk.param_state(whole, run.bucket).items():
                    state.setdefault(index, {})[name] = self.torch.from_numpy(arr.copy())
        return {"program": self.spec, "step": self.step_count, "hyper": dict(self.hyper),
                "state": state, "choices": [r.cand.label for r in self.runs]}

    def load_state_dict(self, sd: dict) -> None:
        """Load a state_dict (from this optimizer, whichever schedules saved it): every rank
        takes its slice where its bucket's schedule keeps the state sliced."""
        if sd.get("program") != self.spec:
            raise ProgramRoleError(f"a state_dict must come from the same program, got "
                                   f"{sd.get('program')!r} for an optimizer of {self.spec!r}; "
                                   "build the optimizer with the program that saved it")
        self.synchronize_side()
        self.step_count = int(sd["step"])
        self.set_hyper(**sd.get("hyper", {}))
        per = sd["state"]
        for run in self.runs:
            for name, view in run.saved().items():
                arrays = {i: per[i][name].numpy() for i in per if name in per[i]}
                whole = bk.bucket_state(arrays, run.bucket)
                if run.sliced(name):
                    whole = bk.slice_state(whole, run.bucket, self.rank, self.P)
                view.copy_(self.torch.from_numpy(np.ascontiguousarray(whole)))
