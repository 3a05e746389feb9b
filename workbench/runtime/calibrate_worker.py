"""One rank of `workbench calibrate`: microbenchmarks through PyTorch, no study programs.

    python -m workbench.runtime.calibrate_worker OUT.json [--passes K]   (P copies, by the launcher)
    python -m workbench.runtime.calibrate_worker --fused-blocks OUT.json
    python -m workbench.runtime.calibrate_worker --fused-unroll OUT.json

Every rank runs the NCCL collectives (all_reduce, reduce_scatter, all_gather, 64 KiB to 1 GiB)
in f32, f16 and bf16 (`collectives_by_dtype`), interleaved, and NCCL send/recv from each rank of
the first half of the GPUs to the same rank of the second half (`p2p`: a pipeline's Send
between two stages), and the host cost of one NCCL call through torch.distributed and through
nccl4py (`host_issue`), and the copy engines' peer-to-peer bandwidth: every rank pushing a
buffer into every other rank's CUDA-IPC-mapped buffer by cuMemcpyDtoDAsync at once
(`copy_engines`, any P > 1); rank 0 alone also measures its GPU: HBM copy and triad
bandwidth, the gap between back-to-back tiny kernels, GEMM throughput, the HBM bandwidth of an
elementwise kernel streaming k arrays (`streams`: a kernel shaped like the generated ones,
nvcc + pycuda), the same for kernels mixing f16 and f32 arrays as the mixed optimizers do
(`streams_f16`), and torch's fused Adam beside them as a 7-stream cross-check.

`--fused-blocks` is a second job (calibrate.py starts it after the fused-kernel sizes): the
workbench's fused AllReduce kernel (studies/allreduce.py, schedule fused, f32) at
256 MiB, launched with grids of sm_count / 32 .. 2 x sm_count blocks, each checked exactly,
for its bandwidth against blocks (`fused_blocks`). `--fused-unroll`, a third job, runs the same
kernel on its full grid generated at unroll 1, 2 and 4 (then 1 again), for its bandwidth
against unroll (`fused_unroll`, design note 95). NCCL's own SM sensitivity is not measured:
its CTA count is a per-communicator setting (NCCL_MIN/MAX_CTAS, read once per process), and
the cost model gives NCCL its channels' SMs whatever runs beside it.

Times are CUDA-event medians after warm-up; a collective's time is the slowest rank's median
(the step waits for it). Rank 0 writes OUT.json. torch is imported inside the functions: this
module imports on a machine without GPUs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
from importlib.resources import files
from pathlib import Path

from codegen.lower import lower
from cost_model.calibration import (
    FUSED_BLOCKS_NBYTES,
)
from cost_model.collectives import bus_factor
from workbench.errors import RuntimeFault
from workbench.files import write_atomic
from workbench.loader import load
from workbench.options import UNROLLS, CodegenOptions
from workbench.runtime.calibrate_copy_engines import copy_engines
from workbench.runtime.calibrate_kernels import device, streams, streams_f16, torch_adam
from workbench.runtime.calibrate_nccl import collectives, host_issue, p2p, runtime_nccl
from workbench.runtime.calibrate_progress import log
from workbench.runtime.executor import PlanRun
from workbench.runtime.gpu import Gpu
from workbench.runtime.launches import KernelLaunch

# The calibration programs are studies (package data of `studies`, read as files, not imported:
# the runtime stays below the CLI, the only importer of studies).
ALLREDUCE_SPEC = Path(str(files("studies") / "allreduce.py"))


def main(out_path: str, warmup: int = 5, reps: int = 25, passes: int = 1) -> int:
    """Run this rank's share; rank 0 writes the raw measurements to out_path."""
    import torch
    import torch.distributed as dist

    rank, P = int(os.environ["WB_RANK"]), int(os.environ["WB_WORLD_SIZE"])
    torch.cuda.set_device(rank)
    raw: dict = {"gpus": P, "nccl_version": ".".join(map(str, torch.cuda.nccl.version())),
                 "torch_version": torch.__version__, "warmup": warmup, "reps": reps,
                 "passes": passes,
                 "timing": "CUDA events, median of reps; collectives: slowest rank's median, "
                           "median over passes"}
    if P > 1:
        dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
        log(rank, "NCCL up")
        rows, errors = collectives(torch, dist, rank, P, warmup, reps, passes=passes)
        raw["collectives"] = rows.pop("f32")
        raw["collectives_by_dtype"] = rows
        raw.update({f"collectives_{d}_error": e for d, e in errors.items()})
        if P % 2 == 0:
            nccl = runtime_nccl(torch, dist, rank, P)
            for key, run in (("p2p", lambda: p2p(torch, dist, rank, P, warmup, reps, nccl,
                                                   passes)),
                             ("host_issue", lambda: host_issue(torch, dist, rank, P, nccl))):
                try:
                    raw[key] = run()
                except Exception as e:  # noqa: BLE001 - recorded in the raw file and logged
                    raw[f"{key}_error"] = f"{type(e).__name__}: {e}"
                    log(rank, f"{key} failed: {type(e).__name__}: {e}")
        # on every GPU count above one: each rank pushes to all the others
        try:
            raw["copy_engines"] = copy_engines(torch, dist, rank, P, warmup, reps)
        except Exception as e:  # noqa: BLE001 - recorded in the raw file and logged
            raw["copy_engines_error"] = f"{type(e).__name__}: {e}"
            log(rank, f"copy_engines failed: {type(e).__name__}: {e}")
    else:
        raw["collectives"] = []
    if rank == 0:
        raw["device"] = device(torch, rank, warmup, reps)
        # Each extra benchmark on its own: a failure is recorded, the rest of the raw file kept.
        for key, fn in (("streams", streams), ("streams_f16", streams_f16),
                        ("torch_adam", torch_adam)):
            try:
                raw["device"][key] = fn(torch, rank, warmup, reps)
            except Exception as e:  # noqa: BLE001 - recorded in the raw file and logged
                raw["device"][f"{key}_error"] = f"{type(e).__name__}: {e}"
                log(rank, f"{key} failed: {type(e).__name__}: {e}")
        write_atomic(out_path, json.dumps(raw, indent=1))  # whole or not at all, no link
        log(rank, f"wrote {out_path}")
    if P > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


def _with_grid(run, blocks: int | None) -> int:
    """Launch the fused collective kernels of a PlanRun with `blocks` blocks from now on
    (None: keep theirs); returns the grid they had (the executor's prepared KernelLaunch)."""
    before, items = None, []
    for item in run.launches:
        if isinstance(item, KernelLaunch) and item.step.spec.kind == "collective":
            before = item.grid
            item = dataclasses.replace(item, grid=before if blocks is None else blocks)
        items.append(item)
    if before is None:
        raise RuntimeFault("the fused AllReduce plan must launch a collective kernel, got none")
    run.launches = items
    return before


def _fused_allreduce(gpu: Gpu, P: int, options: CodegenOptions):
    """The fused AllReduce kernel (studies/allreduce.py, schedule fused, f32) on
    FUSED_BLOCKS_NBYTES, lowered with `options`, its input uploaded: (run, output name,
    expected result). Small integers sum without rounding, so the check is exact."""
    import numpy as np

    program = load(str(ALLREDUCE_SPEC)).schedules["fused"].apply()
    N = FUSED_BLOCKS_NBYTES // 4
    run = PlanRun(gpu, lower(program, P, options), {"N": N, "P": P})
    base = (np.arange(N) % 7).astype(np.float32)
    run.upload({program.inputs[0].name: np.stack([base + r for r in range(P)])})
    return run, program.outputs[0].name, P * base + sum(range(P))


def _checked_ms(gpu: Gpu, run, out: str, want, what: str, warmup: int, reps: int) -> float:
    """Run the kernel once, check it exactly on every rank, then time it: the slowest rank's
    median (ms)."""
    import numpy as np

    run.poison()
    gpu.barrier()
    run.run()
    gpu.drv.Context.synchronize()
    oks = gpu.all_gather(bool(np.array_equal(run.download([out])[out], want)))
    if not all(oks):
        raise RuntimeFault(f"the fused AllReduce kernel must match the reference {what}, got a "
                           f"mismatch on rank(s) {[r for r, ok in enumerate(oks) if not ok]}")
    times = gpu.all_gather(run.time(warmup, reps).times_ms)
    return max(statistics.median(t) for t in times)


def _write(rank: int, gpu: Gpu, out_path: str, data: dict) -> int:
    if rank == 0:
        write_atomic(out_path, json.dumps(data, indent=1))
        log(rank, f"wrote {out_path}")
    gpu.barrier()
    gpu.close()
    return 0


def fused_blocks(out_path: str, warmup: int = 5, reps: int = 25) -> int:
    """The fused AllReduce kernel (f32, FUSED_BLOCKS_NBYTES) with grids of fewer blocks than
    the runtime's full grid (cost_model.calibration.fused_block_counts), each run checked
    exactly and timed; rank 0 writes {"fused_blocks": rows, "fused_blocks_meta": ...} to
    out_path."""
    from cost_model.calibration import fused_block_counts

    rank, P = int(os.environ["WB_RANK"]), int(os.environ["WB_WORLD_SIZE"])
    gpu = Gpu(rank, P)
    log(rank, f"fused blocks: {gpu.name}, {gpu.sm_count} SMs")
    run, out, want = _fused_allreduce(gpu, P, CodegenOptions())  # the default kernel, grid
    full = _with_grid(run, None)  # the runtime's grid
    rows = []
    for blocks in fused_block_counts(gpu.sm_count, full):
        _with_grid(run, blocks)
        ms = _checked_ms(gpu, run, out, want, f"on {blocks} blocks", warmup, reps)
        rows.append({"nbytes": FUSED_BLOCKS_NBYTES, "blocks": blocks, "ms": ms,
                     "check": "ok (exact)"})
        log(rank, f"fused blocks {blocks}: {ms:.3f} ms, "
                  f"{_bus_GBps(P, ms):.0f} GB/s bus")
    run.free()
    meta = {"program": "studies/allreduce.py", "schedule": "fused", "dtype": "f32",
            "full_grid": full, "sm_count": gpu.sm_count, "warmup": warmup, "reps": reps}
    return _write(rank, gpu, out_path, {"fused_blocks": rows, "fused_blocks_meta": meta})


def fused_unroll(out_path: str, warmup: int = 5, reps: int = 25) -> int:
    """The fused AllReduce kernel (f32, FUSED_BLOCKS_NBYTES, the runtime's full grid)
    generated with each unroll codegen has (workbench.options.UNROLLS: vectors per thread per
    loop iteration), each run checked exactly and timed, unroll 1 first and again last (a
    drift of the machine shows as two unroll 1 rows); rank 0 writes {"fused_unroll": rows,
    "fused_unroll_meta": ...} to out_path (design note 95)."""
    rank, P = int(os.environ["WB_RANK"]), int(os.environ["WB_WORLD_SIZE"])
    gpu = Gpu(rank, P)
    log(rank, f"fused unroll: {gpu.name}, {gpu.sm_count} SMs")
    rows = []
    for unroll in (*UNROLLS, UNROLLS[0]):
        run, out, want = _fused_allreduce(gpu, P, CodegenOptions(unroll=unroll))
        ms = _checked_ms(gpu, run, out, want, f"at unroll {unroll}", warmup, reps)
        run.free()
        rows.append({"nbytes": FUSED_BLOCKS_NBYTES, "unroll": unroll, "ms": ms,
                     "check": "ok (exact)"})
        log(rank, f"fused unroll {unroll}: {ms:.3f} ms, {_bus_GBps(P, ms):.0f} GB/s bus")
    meta = {"program": "studies/allreduce.py", "schedule": "fused", "dtype": "f32",
            "sm_count": gpu.sm_count, "warmup": warmup, "reps": reps}
    return _write(rank, gpu, out_path, {"fused_unroll": rows, "fused_unroll_meta": meta})


def _bus_GBps(P: int, ms: float) -> float:
    return bus_factor("allreduce", P) * FUSED_BLOCKS_NBYTES / (ms * 1e-3) / 1e9


# The second jobs (calibrate.py starts each after the fused-kernel sizes), by flag.
JOBS = {"--fused-blocks": fused_blocks, "--fused-unroll": fused_unroll}


if __name__ == "__main__":
    if sys.argv[1] in JOBS:
        # as the compile-and-measure worker: a failure exits non-zero with its traceback, and
        # interpreter teardown is skipped (CUDA IPC mappings and NCCL are released by process
        # exit; library destructors in arbitrary order can hang a finished rank)
        import traceback

        try:
            code = JOBS[sys.argv[1]](sys.argv[2])
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    passes = int(sys.argv[sys.argv.index("--passes") + 1]) if "--passes" in sys.argv else 1
    sys.exit(main(sys.argv[1], passes=passes))

