"""One rank of `workbench compile-and-measure`: run as `python -m workbench.runtime.worker JOB`
by the launcher (WB_RANK, WB_WORLD_SIZE, MASTER_ADDR/PORT set), or by a bare
`mpirun -np P python -m workbench.runtime.worker JOB` (rank and size from mpirun's variables).

For each compiled folder of the job (codegen.compiled: the CLI lowered every schedule once, or
`workbench compile` did), size and schedule: load its plan as written (no program file is
loaded, nothing is lowered again), compile its kernels (cache), upload the same random inputs
on every rank, poison what the run must write, run once and check against the reference
interpreter on the folder's program, then time (warm-up, reps, CUDA events); then the
PyTorch/NCCL baselines. Every
rank checks its own part; rank 0 gathers the checks and times and rewrites the JSON results
after every record (`meta.complete` false until the end), so a run cut off keeps what it
measured. Progress lines keep the launcher's hang detector quiet while work is being done.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading
import time
import traceback

import numpy as np

from codegen.compiled import read_compiled, run_sizes
from codegen.lower import lower, stage_order
from codegen.plan import Plan
from cost_model.plan_cost import plan_link_bytes
from workbench import interpreter
from workbench.errors import RuntimeFault
from workbench.files import write_atomic
from workbench.runtime import baselines, baselines_rows, checks, graphs
from workbench.runtime.comm import rank_env
from workbench.runtime.executor import PlanRun
from workbench.runtime.gpu import Gpu
from workbench.runtime.pipeline_run import node_part
from workbench.types import NodeSliced


def log(rank: int, msg: str) -> None:
    print(f"[rank {rank} {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# The longest CPU work of a rank (the reference interpreter at the largest sizes takes
# minutes) that busy() reports as progress; WB_BUSY_MAX_S sets another.
BUSY_MAX_S = float(os.environ.get("WB_BUSY_MAX_S", 3600))


@contextlib.contextmanager
def busy(rank: int, what: str, every_s: float = 20.0, max_s: float = BUSY_MAX_S):
    """Log "still <what>" every `every_s` seconds while the body runs: long CPU work (the
    reference interpreter on 2^28 elements takes minutes) is progress, and the launcher's hang
    detector must not take it for a hung rank. GPU and NCCL waits are never wrapped in it.
    The beat stops after `max_s`: a body that deadlocked must not hide behind it forever (the
    rank then goes silent and the hang detector ends the run)."""
    done = threading.Event()
    start = time.monotonic()

    def beat():
        while not done.wait(every_s):
            elapsed = time.monotonic() - start
            if elapsed > max_s:
                log(rank, f"  still {what} after {elapsed:.0f} s, longer than any run should "
                    "take: no more progress lines from it (a hang is reported as one)")
                return
            log(rank, f"  still {what} ({elapsed:.0f} s)")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def plan_comm_bytes(plan: Plan, sizes: dict) -> int:
    """`comm_bytes` of a lowered plan (the unscheduled program's)."""
    return int(plan_link_bytes(plan, interpreter.bind_sizes(plan.program, sizes)))


def check_compiled_for(compiled, world: int) -> None:
    """Refuse a compiled folder lowered for another number of GPUs than the job's: its
    kernels and buffers are the lowering of its own P."""
    if compiled.gpus != world:
        raise RuntimeFault(f"--gpus must be the {compiled.gpus} GPUs {compiled.folder} was "
                           f"compiled for, got {world}; compile it again with --gpus {world}")


def comm_bytes(program, sizes: dict, P: int) -> int:
    """Bytes each GPU must send (= receive) for the program's communication as the GPU
    backend lowers it for P ranks, at the bandwidth lower bound: the cost model's
    `plan_link_bytes` (an AllReduce's ring moves 2(P-1)/P of its buffer, ReduceScatter and
    AllGather (P-1)/P, a Broadcast or Reduce chain the buffer, a Send its payload). Divided by
    the link bandwidth this is the NVLink floor of the step."""
    return int(plan_link_bytes(lower(program, P), interpreter.bind_sizes(program, sizes)))


def _summary(per_rank_times: list[list[float]]) -> dict:
    medians = [float(np.median(t)) for t in per_rank_times]
    slow = int(np.argmax(medians))
    t = np.asarray(per_rank_times[slow])
    return {"median_ms": medians[slow], "min_ms": float(t.min()),
            "p10_ms": float(np.percentile(t, 10)), "p90_ms": float(np.percentile(t, 90)),
            "rank_medians_ms": medians, "reps": len(t)}


def node_reference(ref: checks.Reference, mine, theirs, plan, rank: int) -> checks.Reference:
    """The reference as checks.compare reads it for a node's view: each NodeSliced output
    (value and bound) replaced by this rank's part of it (runtime.pipeline_run.node_part,
    chunk by chunk where the plan pipelines), which compare then takes whole."""
    values, bounds = {}, {}
    for v_s, v_o in zip(mine.outputs, theirs.outputs):
        if isinstance(v_s.type.layout, NodeSliced):
            part = functools.partial(node_part, t=v_s.type, rank=rank, per_node=plan.per_node,
                                     chunks=plan.slice_chunks)
            values[v_o.name] = part(ref.values[v_o.name])
            bounds[v_o.name] = part(ref.bounds[v_o.name])
    return ref.with_outputs(values, bounds)


def _check_held(run, mine, theirs, ref, P: int, n_full):
    """checks.compare of the outputs this rank holds now (after a run or graph replays)."""
    got = run.download([v.name for v in mine.outputs])
    return checks.compare(got, mine, theirs, ref, run.local, P, n_full)


def _graphed_record(gpu, rec: dict, timing, result) -> dict:
    """The record of a schedule's CUDA-graph timing (graphs.measure's answer on every rank):
    a row of its own, `SCHEDULE (cuda graph)`, checked on the outputs the replays left."""
    out = {k: v for k, v in rec.items() if k != "steps"}
    out["schedule"] = f"{rec['schedule']} (cuda graph)"
    if timing is None:
        out.update(check=f"not graphed: {result}", median_ms=None, ok=None)
        return out
    results = gpu.all_gather(result)
    worst = next((r for r in results if not r.ok), max(results, key=lambda r: r.max_error))
    out.update(_summary(gpu.all_gather(timing.times_ms)), check=worst.status(), ok=worst.ok,
               max_error=worst.max_error, tolerance=worst.tolerance)
    return out


def step_summary(per_rank: list[list[tuple[str, list[float]]]], P: int) -> list[dict]:
    """Per-step times of every rank (PlanRun.time_steps, gathered) -> one row per step of
    each stage, in order: its statements, the slowest rank's median (ms) and the spread of
    that rank's times (p90 - p10). Ranks r of stage r // P run the same steps."""
    rows = []
    for stage in range(len(per_rank) // P):
        ranks = per_rank[stage * P:(stage + 1) * P]
        for i, (label, _) in enumerate(ranks[0]):
            s = _summary([r[i][1] for r in ranks])
            rows.append({"stage": stage, "stmts": label, "median_ms": s["median_ms"],
                         "spread_ms": s["p90_ms"] - s["p10_ms"]})
    return rows


def write_json_atomic(path: str, obj) -> None:
    """Write `obj` as JSON to `path` so that a reader sees the old file or the new one, never
    half of one, and never through a link or over a device (files.write_atomic)."""
    write_atomic(path, json.dumps(obj, indent=1, default=str))


class ResultsLog(list):
    """The run's records. On the writing rank (rank 0) every append rewrites `path` with
    {"meta": {..., "complete": false}, "records": [...]}; `finish()` writes it complete."""

    def __init__(self, path: str, meta: dict, writing: bool):
        super().__init__()
        self.path, self.meta, self.writing, self.complete = path, meta, writing, False
        self._write()

    def append(self, record: dict) -> None:
        super().append(record)
        self._write()

    def finish(self) -> None:
        self.complete = True
        self._write()

    def _write(self) -> None:
        if self.writing:
            write_json_atomic(self.path, {"meta": {**self.meta, "complete": self.complete},
                                          "records": list(self)})


def _meta(gpu, P: int, job: dict) -> dict:
    import torch

    return {"device": gpu.name, "P": P, "torch": torch.__version__,
            "torch_nccl": ".".join(map(str, torch.cuda.nccl.version())),
            **gpu.comm.info, "cuda_driver": gpu.drv.get_driver_version(),
            "pycuda": __import__("pycuda").VERSION_TEXT, **job_meta(job)}


def job_meta(job: dict) -> dict:
    """The job's part of the results' meta: the commit and codegen options it was made with
    (workbench.provenance, at the top) and the job itself."""
    return {**job.get("provenance", {}),
            "job": {k: v for k, v in job.items() if k != "provenance"}}


def _baseline_kind(program) -> tuple[str | None, str]:
    grad = program.inputs[0].type.dtype.name
    name = program.name
    known = ("adam", "sgd", "lamb", "allreduce", "model_parallel", "pipeline",
             "sequence_parallel", "moe")
    if name.startswith("allreduce_rmsnorm"):  # studies/allreduce_rmsnorm.py, f16 and bf16
        return "allreduce_rmsnorm", grad
    return (name if name in known else None), grad


def stage_split(world: int, stages: int, program: str = "the program") -> int:
    """Ranks per stage: the world (one rank per GPU) split into `stages` equal stages, or a
    RuntimeFault that says which GPU counts work."""
    if stages < 1 or world < stages or world % stages:
        fits = sorted({stages * max(1, world // stages), stages * (world // stages + 1)})
        raise RuntimeFault(f"--gpus must be a multiple of the {stages} stages of {program}, got "
                           f"--gpus {world}; use --gpus {' or '.join(map(str, fits))} (stages x "
                           "ranks per stage)")
    return world // stages


def held_outputs(run, scheduled, original):
    """The outputs this rank holds (those of its stage), as (scheduled, original) programs
    whose outputs correspond by position, as checks.compare reads them."""
    keep = [k for k, v in enumerate(scheduled.outputs) if run.holds(v.name)]
    pick = [scheduled.outputs[k] for k in keep]
    return (scheduled.with_stmts(scheduled.stmts, outputs=pick),
            original.with_stmts(original.stmts, outputs=[original.outputs[k] for k in keep]))


def main(job_path: str) -> int:

    env = rank_env()
    rank, world = env.rank, env.size
    job = json.loads(open(job_path).read())
    log(rank, f"starting on GPU {rank} of {world}")
    gpu = Gpu(rank, world)
    log(rank, f"device {gpu.name}, {gpu.sm_count} SMs; {gpu.comm.summary()}")
    records = ResultsLog(job["out"], _meta(gpu, world, job), writing=rank == 0)
    if os.environ.get("WB_TEST_DIE_RANK") == str(rank):
        log(rank, "dying on purpose (WB_TEST_DIE_RANK)")
        os._exit(7)
    for entry in job["programs"]:
        # the compiled folder (codegen.compiled): the plans run as they were lowered, the
        # program as written for the inputs and the reference; no program file is loaded
        compiled = read_compiled(entry["folder"])
        original = compiled.program
        programs = compiled.plans(entry.get("schedules", ["all"]))
        # A pipeline's stages split the world: P ranks per stage, stage-major.
        stages = len(stage_order(original))
        P = stage_split(world, stages, compiled.spec)
        check_compiled_for(compiled, world)
        gpu.use_stages(stages)
        unscheduled = dict(programs).get("unscheduled")
        for size_set in job["sizes"]:
            sizes = run_sizes(original, compiled.defaults, size_set, P)
            base = {"spec": compiled.spec, "program": original.name, "sizes": sizes, "P": P,
                    "program_sha256": compiled.sha256,  # results name it by content too
                    "comm_bytes": (plan_comm_bytes(unscheduled, sizes)
                                   if isinstance(unscheduled, Plan) else None)}
            if stages > 1:
                base["stages"] = stages
            log(rank, f"{compiled.spec} {sizes}: inputs and reference")
            with busy(rank, "computing inputs and the reference"):
                inputs = checks.make_inputs(original, sizes, job.get("seed", 0))
                ref = checks.reference(original, inputs, sizes, P)
                idx = ref.indices
                if ref.problem:
                    log(rank, f"  {ref.problem}")
            n_full = None
            length = checks.pointwise_length(original)
            if length is not None:

                n_full = interpreter.concrete(length, interpreter.bind_sizes(original, sizes))
            for name, plan in programs:
                rec = dict(base, schedule=name, kind="workbench")
                if isinstance(plan, Plan) and plan.per_node and idx is not None:
                    plan = (f"not generated: a node's view (hierarchical split) checks every "
                            f"element, got sizes {sizes} beyond the full check; measure it at "
                            "smaller sizes")
                if not isinstance(plan, Plan):  # illegal or not generated: its row, as
                    # simulate shows it; the other schedules go on
                    rec.update(check=plan, median_ms=None)
                    records.append(rec)
                    log(rank, f"  {name}: {plan}")
                    continue
                program = plan.program  # the scheduled program the plan was lowered from
                log(rank, f"  {name}: compile and allocate")
                if plan.per_node:
                    # a node's view (hierarchical split, design notes 36 and 73): the node's
                    # and the rail's communicators, split from the world's
                    gpu.use_nodes(plan.per_node)
                else:
                    gpu.use_stages(stages)
                run = PlanRun(gpu, plan, sizes)
                run.upload(inputs)
                run.poison()
                gpu.barrier()
                run.run()
                gpu.drv.Context.synchronize()
                mine, theirs = held_outputs(run, program, original)
                got = run.download([v.name for v in mine.outputs])
                want = node_reference(ref, mine, theirs, plan, rank) if plan.per_node else ref
                result = checks.compare(got, mine, theirs, want, run.local, P, n_full)
                log(rank, f"  {name}: check {result.status()}")
                results = gpu.all_gather(result)
                worst = next((r for r in results if not r.ok),
                             max(results, key=lambda r: r.max_error))
                timing = run.time(job.get("warmup", 5), job.get("reps", 30))
                log(rank, f"  {name}: median {timing.median_ms:.3f} ms")
                all_times = gpu.all_gather(timing.times_ms)
                if job.get("per_step"):
                    steps = run.time_steps(2, job.get("reps", 30))
                    rec["steps"] = step_summary(gpu.all_gather(steps), P)
                graphed = None
                if job.get("graph"):  # the same steps captured in a CUDA graph, replayed
                    check = functools.partial(_check_held, run, mine, theirs, want, P, n_full)
                    graphed = graphs.measure(run, check, job.get("warmup", 5),
                                             job.get("reps", 30))
                run.free()
                rec.update(_summary(all_times), check=worst.status(), ok=worst.ok,
                           max_error=worst.max_error, tolerance=worst.tolerance,
                           kernels=[k.name for k in plan.kernels()])
                records.append(rec)
                if graphed is not None:
                    records.append(_graphed_record(gpu, rec, *graphed))
                    log(rank, f"  {name} (cuda graph): {records[-1]['check']}, median "
                              f"{records[-1]['median_ms'] or float('nan'):.3f} ms")
            del inputs, ref
            kind, grad = _baseline_kind(original)
            if job.get("baselines", True) and kind is not None:
                log(rank, f"  baselines ({kind}, {grad})")
                measure = (baselines_rows.measure_study if kind == "allreduce_rmsnorm"
                           else baselines.measure)
                measured = measure(kind, grad, sizes, rank, P, job.get("warmup", 5),
                                   job.get("reps", 30))
                gathered = gpu.all_gather(measured)
                for bname in measured:
                    kind_ = baselines.row_kind(bname)
                    rec = dict(base, schedule=bname, kind=kind_,
                               check="(not checked)" if kind_ == "baseline"
                               else "(reference: not the same computation)")
                    rec.update(_summary([g[bname] for g in gathered]))
                    records.append(rec)
                    # Logged as well: a run cut off later still shows what it measured.
                    log(rank, f"  {bname}: median {rec['median_ms']:.3f} ms")
                gpu.torch.cuda.empty_cache()
    records.finish()
    if rank == 0:
        log(rank, f"wrote {job['out']} ({len(records)} records, complete)")
    gpu.barrier()
    gpu.close()
    return 0


if __name__ == "__main__":
    try:
        code = main(sys.argv[1])
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    # Skip interpreter teardown: NCCL and CUDA IPC mappings are released by process exit, and
    # library destructors running in arbitrary order can hang a finished rank.
    os._exit(code)
