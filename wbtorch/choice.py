"""Per-bucket choice of how a bucket's AllReduce + update runs (design note 52): every named
schedule of the program file in each codegen mode (`collective_mode` pull or push, unroll),
and the plain NCCL all_reduce + torch step as one more candidate. Times come from the
simulator on a hardware profile (a calibrated one: `workbench calibrate`), or from a short
measured trial on the GPU (wbtorch.optim does that); the least wins and the choice, with every
candidate's time, is logged.

torch-free: predictions need only the simulator and the cost model.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from wbtorch.programs import pick_schedule
from workbench.errors import WorkbenchError
from workbench.interpreter import bind_sizes
from workbench.options import CodegenOptions

TORCH = "torch"  # the NCCL all_reduce + torch step candidate
MODES = ("pull", "push")
BLOCKS_PER_SM = (2, 1)  # a fused collective's grid: 2 blocks per SM (the default) or 1


@dataclass(frozen=True, slots=True)
class Candidate:
    """One way to run a bucket: a generated schedule with its codegen knobs, or torch."""

    schedule: str  # a schedule name of the program file, 'unscheduled', or TORCH
    mode: str = "pull"
    unroll: int = 1
    blocks_per_sm: int | None = None  # None: the runtime's default (2)

    @property
    def label(self) -> str:
        if self.schedule == TORCH:
            return "nccl + torch step"
        knobs = f"{self.mode}" + (f", unroll {self.unroll}" if self.unroll != 1 else "")
        if self.blocks_per_sm is not None:
            knobs += f", {self.blocks_per_sm} block{'s' * (self.blocks_per_sm > 1)}/SM"
        return f"{self.schedule} ({knobs})"

    @property
    def generated(self) -> bool:
        return self.schedule != TORCH

    def options(self, base: CodegenOptions) -> CodegenOptions:
        """The codegen options this candidate lowers and launches with: `base` (the
        environment's knobs) with its mode, unroll and blocks per SM."""
        knobs = {"collective_mode": self.mode, "unroll": self.unroll}
        if self.blocks_per_sm is not None:
            knobs["collective_blocks_per_sm"] = self.blocks_per_sm
        return dataclasses.replace(base, **knobs)


def is_fused(plan) -> bool:
    """Whether a lowered plan runs a fused collective kernel (directly, overlapped or moved
    by copy engines): the only thing the mode, unroll and blocks-per-SM knobs change."""
    from codegen.plan import CopyEngineStep, OverlapStep

    return (any(isinstance(s, (OverlapStep, CopyEngineStep)) for s in plan.steps)
            or any(k.kind in ("collective", "send") for k in plan.kernels()))


def candidates(loaded, P: int, torch_step: bool, modes=MODES, unrolls=(1,),
               blocks=BLOCKS_PER_SM) -> list[Candidate]:
    """Every candidate for one bucket: the program as written and each named schedule the
    GPU backend generates for P ranks (fused ones once per mode, unroll and blocks per SM,
    read from its plan; at P = 1 a fused collective moves nothing, so the push mode is the
    pull kernel and is left out), then the torch step where the program has one. A
    schedule lowering refuses (the ring-fused form, simulated only) is never a candidate."""
    from codegen.lower import lower

    out = [Candidate("unscheduled")]
    for name, sched in loaded.schedules.items():
        try:
            plan = lower(sched.apply(), P)
        except WorkbenchError:
            continue  # illegal here, or not generated: nothing to run
        if is_fused(plan):
            for mode in (modes if P > 1 else modes[:1]):
                out += [Candidate(name, mode, u, b) for u in unrolls for b in blocks]
        else:
            out.append(Candidate(name))
    if torch_step:
        out.append(Candidate(TORCH))
    return out


def predict(loaded, cands: list[Candidate], numel: int, P: int, cluster,
            base: CodegenOptions | None = None) -> dict:
    """Candidate -> simulated seconds for a bucket of `numel` elements on `cluster` (the
    simulator prices push and pull, and the blocks per SM and the unroll where the profile
    has a calibrated block curve and unroll curve, design note 95; without them those
    candidates share a time, the earliest wins a tie, and a measured trial separates them;
    the torch step is predicted as the program as written,
    NCCL + elementwise kernels, which is what it runs). NaN where the schedule cannot run,
    and where codegen cannot generate it with the candidate's options (`base`, the
    environment's knobs, with its own): the simulator never picks what the backend refuses."""
    from codegen.lower import lower
    from simulator import simulate

    out: dict[Candidate, float] = {}
    cache: dict[tuple, float] = {}
    for c in cands:
        key = "unscheduled" if c.schedule == TORCH else c.schedule
        opts = c.options(base or CodegenOptions())
        if (key, opts) not in cache:
            try:
                program = pick_schedule(loaded, key)
                bound = bind_sizes(program, {"N": numel, "P": P})
                # lowered once with the candidate's options; the simulator runs that plan
                plan = lower(program, P, opts)
                cache[key, opts] = float(simulate(program, cluster, bound, record=False,
                                                  options=opts, plan=plan).time_s)
            except WorkbenchError:  # illegal here, or not generated with these options
                cache[key, opts] = math.nan
        out[c] = cache[key, opts]
    return out


def best(times: dict) -> Candidate:
    """The candidate of least time (NaN never wins); ties go to the earlier candidate."""
    ok = [(t, i, c) for i, (c, t) in enumerate(times.items()) if not math.isnan(t)]
    if not ok:
        raise WorkbenchError("a bucket must have at least one candidate that runs, got none; "
                             "pass schedule='torch' or another program")
    return min(ok)[2]


def log_lines(bucket_index: int, numel: int, predicted: dict | None, measured: dict | None,
              chosen: Candidate) -> list[str]:
    """The choice for one bucket and every candidate's predicted and measured time."""
    lines = [f"bucket {bucket_index} (N = {numel}): chose {chosen.label}"]
    cands = list((measured or predicted or {}).keys())
    for c in cands:
        p = (predicted or {}).get(c)
        m = (measured or {}).get(c)
        ps = f"predicted {p * 1e3:.4f} ms" if p is not None and not math.isnan(p) else ""
        ms = f"measured {m * 1e3:.4f} ms" if m is not None and not math.isnan(m) else ""
        lines.append(f"  {'*' if c == chosen else ' '} {c.label:40s} {ps:24s} {ms}")
    return lines
