"""One GPU job: P ranks of `workbench.runtime.worker` launched on this machine, their results
read back from rank 0's file. The commands (`compile-and-measure`, `calibrate`) and
calibration's own benchmarks all run their kernels through `run_job`."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from codegen.compiled import (
    compile_folder,
    read_compiled,
    refuse_sizes,
    run_sizes,
    write_manifest,
)
from codegen.lower import stage_order
from codegen.plan import Plan
from workbench import interrupts
from workbench.errors import RuntimeFault, WorkbenchError
from workbench.files import temporary_folder
from workbench.loader import load
from workbench.options import CodegenOptions
from workbench.provenance import provenance
from workbench.runtime import compiler, launcher
from workbench.runtime.worker import stage_split, write_json_atomic


def gpu_count(command: str = "compile-and-measure") -> int:
    """The GPUs this process may use: nvidia-smi's count, narrowed by CUDA_VISIBLE_DEVICES
    when it is set (several jobs share one machine by giving each its own devices). Without
    nvidia-smi, a RuntimeFault naming `command`, the command that needs them."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise RuntimeFault(f"{command} must run on a machine with NVIDIA GPUs, got no "
                           "nvidia-smi on PATH; run it on the GPU machine")
    out = subprocess.run([smi, "-L"], capture_output=True, text=True)
    present = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    return visible_of(present, os.environ.get("CUDA_VISIBLE_DEVICES"))


def visible_of(present: int, visible: str | None) -> int:
    """How many of `present` GPUs a CUDA_VISIBLE_DEVICES value leaves (None: all; CUDA stops
    at the first entry it cannot use, so "0,1,-1,2" leaves 2)."""
    if visible is None:
        return present
    count = 0
    for entry in visible.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        count += 1
    return min(present, count)


def run_job(specs, P: int, sizes: list[dict], schedule: str, reps: int, warmup: int,
            baselines: bool, hang_s: float, echo=None,
            options: CodegenOptions | None = None, partial: str | Path | None = None,
            per_step: bool = False, graph: bool = False,
            limit_s: float | None = None, plans=()) -> dict:
    """Launch P workers on this machine for the job (P: every GPU; a pipeline of S stages
    runs P / S ranks per stage); return the results JSON of rank 0.

    Rank 0 rewrites its results as it goes into `partial` (default: STEM.partial.json in
    compile-and-measure's --out folder, else in a private temporary folder), removed once
    the run is complete. A run that fails raises its RuntimeFault plus where the records
    written before the fault are; a run cut off from outside leaves that file behind.
    `per_step`: also time each step of every schedule (the records' "steps"); `graph`: also
    time every schedule captured in a CUDA graph and replayed (records "NAME (cuda graph)",
    workbench.runtime.graphs). `options`: how every schedule is generated and launched (None:
    the defaults); the results' meta records them with the git commit (`codegen`, `commit`).
    `limit_s`: a wall-clock limit on the whole run (None: none). `plans`: compiled folders
    (`workbench compile --out`) to run besides the program files `specs`, which are lowered
    here once each into folders of their own: the ranks run plans, never a program file.
    """
    if reps < 20:
        raise WorkbenchError(f"--reps must be at least 20 for a stable median, got {reps}")
    wanted = [w.strip() for w in schedule.split(",") if w.strip()] or ["all"]
    known = {"unscheduled"}  # names only the unscheduled program, which always runs
    loaded = []
    for spec in specs:
        pf = load(spec)  # a broken program file fails here, before GPUs
        known |= set(pf.schedules)
        # A pipeline runs P = --gpus / stages ranks per stage.
        loaded.append((spec, pf, stage_split(P, len(stage_order(pf.program)), spec)))
    compiled = [read_compiled(folder) for folder in plans]
    for c in compiled:
        known |= set(c.names)
        if c.gpus != P:
            raise WorkbenchError(f"--gpus must be the {c.gpus} GPUs {c.folder} was compiled "
                                 f"for, got --gpus {P}; compile it again with --gpus {P}")
        if c.options != (options or CodegenOptions()):  # the results say how plans were made
            mine, theirs = (options or CodegenOptions()).changed(), c.options.changed()
            raise WorkbenchError(f"the codegen options must be those {c.folder} was compiled "
                                 f"with ({_knobs(theirs)}), got {_knobs(mine)}; drop them, or "
                                 "compile it again with them")
    unknown = [w for w in wanted if w != "all" and w not in known]
    if unknown:
        what = specs[0] if len(specs) == 1 else "the programs"
        raise WorkbenchError(f"--schedule must name a schedule of {what}, got "
                             f"{', '.join(map(repr, unknown))}; known: "
                             f"{', '.join(sorted(known)) or 'none'}")
    opts = options or CodegenOptions()
    for c in compiled:  # sizes a compiled plan's chunks cannot take: refused before any rank
        runnable = [(n, plan) for n, plan in c.plans(wanted) if isinstance(plan, Plan)]
        for size_set in sizes:
            refuse_sizes(runnable, c.sizes_at(size_set))
    with _partial_file(partial, job_stem([*specs, *(c.spec for c in compiled)], P)) as out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.unlink(missing_ok=True)  # an earlier run's leftover: this run rewrites it
        with temporary_folder("wb-job-") as tmp:
            # Each program is lowered once, here, into a compiled folder (codegen.compiled):
            # the ranks run its plans as they are, as they run a folder of `workbench compile`.
            folders = [str(f) for f in plans]
            for k, (spec, pf, stage_P) in enumerate(loaded):
                folder = Path(tmp) / f"program{k}"
                mine = ["unscheduled"] + [w for w in wanted if w == "all" or w in pf.schedules]
                runs_at = [run_sizes(pf.program, pf.sizes, size_set, stage_P) for size_set in sizes]
                write_manifest(folder, compile_folder(folder, pf, spec, P, stage_P, opts,
                                                      {**pf.sizes, "P": stage_P}, mine,
                                                      provenance=provenance(opts),
                                                      runs_at=runs_at))
                folders.append(str(folder))
            # what the machine must have, once every plan is known to run at these sizes
            launcher.require_gpus(P, gpu_count())
            if importlib.util.find_spec("pycuda") is None:
                raise RuntimeFault("pycuda must be installed for compile-and-measure, got none; "
                                   "pip install 'coconet-workbench[gpu]' (pycuda builds from "
                                   "source against /usr/local/cuda; nvcc is needed too)")
            compiler.nvcc_path()
            job = {"programs": [{"folder": f, "schedules": wanted} for f in folders],
                   "sizes": sizes, "P": P, "reps": reps, "warmup": warmup,
                   "baselines": baselines, "out": str(out), "seed": 0,
                   "options": opts.as_dict(), "provenance": provenance(opts), "per_step": per_step,
                   "graph": graph}
            job_path = Path(tmp) / "job.json"
            job_path.write_text(json.dumps(job))
            try:
                launcher.launch(P, launcher.python_argv("workbench.runtime.worker", str(job_path)),
                                hang_s=hang_s, echo=echo, limit_s=limit_s)
            except RuntimeFault as e:
                mark_incomplete(out, str(e).split("\n")[0], getattr(e, "ranks_ok", None))
                raise RuntimeFault(f"{e}\n{partial_note(out)}") from None
        results = read_results(out)
        if not results.get("meta", {}).get("complete"):
            raise RuntimeFault(f"rank 0 must mark its results complete when every rank exits 0, "
                               f"got an incomplete file; {partial_note(out)}")
        out.unlink()
    return results


@contextlib.contextmanager
def _partial_file(partial: str | Path | None, stem: str) -> Iterator[Path]:
    """`partial`, or STEM.partial.json in a folder of the run's own (mode 0700, a fresh name,
    never a fixed name in the shared temporary folder), which the run's end removes: kept
    only while it holds the partial file a RuntimeFault's message names; a Ctrl-C or a
    refusal before launch removes it with what it holds."""
    if partial is not None:
        yield Path(partial)
        return
    private = None
    try:
        # named before it exists, so that a Ctrl-C landing as it is made still finds it
        private = Path(tempfile.gettempdir()) / f"wb-partial-{secrets.token_hex(6)}"
        os.mkdir(private, 0o700)
        yield private / f"{stem}.partial.json"
    except RuntimeFault:
        with contextlib.suppress(OSError):
            private.rmdir()  # not empty: rank 0's partial file, which the message names
        raise
    except BaseException:
        with interrupts.deferred():  # a second signal must not leave it half removed
            if private is not None:
                shutil.rmtree(private, ignore_errors=True)
        raise
    private.rmdir()


def read_results(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RuntimeFault(f"rank 0's results must be readable JSON at {path}, got {e}; rerun, "
                           "and look at rank 0's last lines") from None


def mark_incomplete(path: Path, fault: str, ranks_ok) -> None:
    """Mark a failed run's partial results as such: complete false (rank 0 may have finished
    and marked them complete while another rank hung), the fault, and the ranks that had
    exited 0. Rewritten atomically; a file that is absent or unreadable is left as it is."""
    try:
        results = json.loads(path.read_text())
        meta = results["meta"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    meta.update(complete=False, fault=fault)
    if ranks_ok is not None:
        meta["ranks_exited_0"] = list(ranks_ok)
    write_json_atomic(str(path), results)


def partial_note(path: Path) -> str:
    """How many records a failed run wrote, and where; or that it wrote none."""
    if not path.exists():
        return f"No records were written before the fault (rank 0 had not started {path})."
    try:
        n = len(json.loads(path.read_text())["records"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"The partial results at {path} could not be read ({e})."
    return f"{n} record{'s were' if n != 1 else ' was'} written before the fault: {path}"


def _knobs(changed: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in changed.items()) or "the defaults"


def job_stem(specs, P: int) -> str:
    """The results' file stem for these program specs on P ranks: adam-mixed+sgd-p2."""
    return "+".join(Path(s.split(":")[0]).stem + ("-" + s.split(":")[1] if ":" in s else "")
                    for s in specs) + f"-p{P}"
