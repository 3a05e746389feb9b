"""The fused AllReduce + residual + RMSNorm row kernels' HBM bandwidth at P = 1 beside
torch.compile's kernel (issue 25 item 4, design note 80), in one process on one GPU.

For each dtype, size (T x H) and row-kernel variant (`--variants`: codegen.lower_rows'
ROW_LOADS_IN_FLIGHT and ROW_GROUPS set before lowering; `as-is` takes the tree's own
defaults, which is how a checkout without those knobs, the code before the fix, is measured):
every schedule of `--schedules` of studies/allreduce_rmsnorm.py is lowered at P = 1,
compiled, run on fresh random inputs into NaN-poisoned outputs and checked against the
reference interpreter (workbench.runtime.checks, sampled at large sizes, as compile-and-
measure checks), then timed with CUDA events (warm-up, `--reps`, median; every run on the
inputs as uploaded), eagerly and captured in a CUDA graph and replayed (the graphed outputs
checked again). torch.compile(fullgraph=True) of the same epilogue (the baseline's,
workbench.runtime.baselines_rows) is timed the same way, eager and graphed. At P = 1 the
AllReduce is the input itself: the rows measure the epilogue's HBM traffic, read y and r,
write h and out (and read g, 1/T of it).

With `--nvtx`, each kernel is launched once more inside an NVTX range "prof", so that Nsight
Compute profiles exactly those launches:
    ncu --nvtx --nvtx-include 'prof/' --set full -o REPORT python3 rows_bandwidth.py ...
(each launch's label is printed, numbered in launch order: ncu's IDs follow them).

`--compile-only` (no GPU) lowers and compiles every kernel of the run into the cubin cache
(WB_CACHE_DIR), so that a device call can carry it and skip nvcc.

    python3 benchmarks/gpu/rows_bandwidth.py --dtypes f16 bf16 --H 4096 8192 16384 --T 8192 \
        --variants as-is loads8-groups loads4-groups --torch --out RES/rows.json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

STUDY = "studies/allreduce_rmsnorm.py"
EPS = 1e-6  # the study's


def parse_variant(label: str) -> dict:
    """The codegen.lower_rows knobs a variant label sets: 'as-is' -> {} (the tree's defaults);
    otherwise '-'-separated parts: 'loads<N>' (ROW_LOADS_IN_FLIGHT), 'groups' / 'nogroups'
    (ROW_GROUPS), 'regs' (the row cache in registers) or 'shared<B>' (in shared memory, launch
    bound B blocks a SM: ROW_CACHE_SHARED, ROW_SHARED_MIN_BLOCKS), 'rows' (one row a block,
    threads by the row's length: the codegen option row_grid = "rows", design note 91),
    'mb<B>' (the option row_min_blocks: 'rows-mb1' is the rows form at 64 registers), e.g.
    'loads8-groups', 'shared4', 'rows', 'rows-mb1'. Upper-case keys are lower_rows' module
    knobs, lower-case ones CodegenOptions fields."""
    if label == "as-is":
        return {}
    knobs: dict = {}
    for part in label.split("-"):
        if part.startswith("loads") and part[5:].isdigit():
            knobs["ROW_LOADS_IN_FLIGHT"] = int(part[5:])
        elif part in ("groups", "nogroups"):
            knobs["ROW_GROUPS"] = part == "groups"
        elif part == "regs":
            knobs["ROW_CACHE_SHARED"] = False
        elif part.startswith("shared") and part[6:] in ("1", "2", "3", "4"):
            knobs.update(ROW_CACHE_SHARED=True, ROW_SHARED_MIN_BLOCKS=int(part[6:]))
        elif part == "rows":
            knobs["row_grid"] = "rows"
        elif part.startswith("mb") and part[2:] in ("1", "2", "3", "4"):
            knobs["row_min_blocks"] = int(part[2:])
        else:
            raise SystemExit(f"a variant must be as-is or parts loads<N>, groups, nogroups, "
                             f"regs, shared<1-4>, rows, mb<1-4> joined by '-', got {label!r}")
    return knobs


def lowered(program, knobs: dict):
    """The program lowered at P = 1 with the row-kernel knobs set (module knobs put back
    after; options fields given to the lowering)."""
    import codegen.lower_rows as lr
    from codegen.lower import lower
    from workbench.options import CodegenOptions

    module = {k: v for k, v in knobs.items() if k.isupper()}
    options = CodegenOptions(**{k: v for k, v in knobs.items() if not k.isupper()})
    saved = {k: getattr(lr, k) for k in module}
    for k, v in module.items():
        setattr(lr, k, v)
    try:
        return lower(program, 1, options)
    finally:
        for k, v in saved.items():
            setattr(lr, k, v)


def programs(dtype: str, schedules: list[str], study: str = ""):
    """(original program, [(schedule name, scheduled program)]) of the study in `dtype`, or of
    `study` (PROGRAM.py:NAME, e.g. studies/rmsnorm.py:residual_bf16) when given."""
    from workbench.loader import load

    pf = load(study or STUDY + (":bf16" if dtype == "bf16" else ""))
    return pf.program, [(n, pf.program if n == "unscheduled" else pf.schedules[n].apply())
                        for n in schedules]


def compile_only(args) -> None:
    """Every kernel of the run (and of every schedule of `--specs`, each variant's knobs) into
    the cubin cache."""
    from codegen.render import include_dir
    from workbench.loader import load
    from workbench.runtime.compiler import compile_cubin

    jobs = []
    for dt in args.dtypes:
        _, scheds = programs(dt, args.schedules, args.study)
        jobs += [(f"{dt} {label} {name}", prog, parse_variant(label))
                 for label in args.variants for name, prog in scheds]
    for spec in args.specs:  # with each variant's knobs (a snippet sets them on the GPU)
        pf = load(spec)
        for label in args.variants:
            knobs = parse_variant(label)
            jobs += [(f"{spec} {label} unscheduled", pf.program, knobs)]
            jobs += [(f"{spec} {label} {n}", s.apply(), knobs) for n, s in pf.schedules.items()]
    for what, prog, knobs in jobs:
        plan = lowered(prog, knobs)
        for k in plan.kernels():
            compile_cubin(k.name, plan.source(k), include_dir())
            print(f"compiled {what}: {k.name}", flush=True)


def _warm_one(job) -> str:
    """One torch.compile of the epilogue at (dtype, T, H), run once (compiled, autotuned)."""
    dt, T, H = job
    import torch

    from workbench.runtime import baselines_rows

    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dt]
    t0 = time.time()
    try:
        y, r, g = (torch.randn(shape, device="cuda").to(dtype)
                   for shape in ((T, H), (T, H), (H,)))
        compiled = torch.compile(baselines_rows._epilogue(torch, EPS), dynamic=False,
                                 fullgraph=True)
        compiled(y, r, g)
        torch.cuda.synchronize()
    except Exception as e:  # the others go on; the timing process then compiles this one
        return f"not warmed: torch.compile {dt} T={T} H={H}: {type(e).__name__}: {e}"[:400]
    return f"warmed torch.compile {dt} T={T} H={H} in {time.time() - t0:.1f} s"


def warm_torch(args) -> None:
    """torch.compile of the epilogue at every (dtype, T, H) of the run, in `--warm-procs`
    processes at once, so that the timing process finds each compiled and autotuned in
    Inductor's on-disk caches (FX graph cache, autotuning results) instead of compiling one
    after the other (12 compiles one by one outlast a 150 s call; note 86's part was cut by
    them)."""
    import multiprocessing as mp

    jobs = [(dt, T, H) for dt in args.dtypes for T in args.T for H in args.H]
    with mp.get_context("spawn").Pool(max(1, min(args.warm_procs, len(jobs)))) as pool:
        for line in pool.imap_unordered(_warm_one, jobs):
            print(line, flush=True)


def median(xs) -> float:
    return statistics.median(xs)


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtypes", nargs="+", default=["f16", "bf16"])
    ap.add_argument("--H", nargs="+", type=int, default=[4096, 8192, 16384])
    ap.add_argument("--T", nargs="+", type=int, default=[8192])
    ap.add_argument("--schedules", default="fuse-ar-c-oneshot",
                    help="comma-separated schedules of the study")
    ap.add_argument("--variants", nargs="+", default=["as-is"])
    ap.add_argument("--study", default="",
                    help="another row program, PROGRAM.py:NAME (checks; --dtypes then labels)")
    ap.add_argument("--torch", action="store_true", help="also torch.compile's epilogue")
    ap.add_argument("--torch-min-T", type=int, default=0,
                    help="torch.compile's epilogue only at T >= this (its compile is slow)")
    ap.add_argument("--no-time", action="store_true", help="check (and --nvtx) only")
    ap.add_argument("--nvtx", action="store_true", help="one more launch each in NVTX 'prof'")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", default="", help="prefix of every label (e.g. before/after)")
    ap.add_argument("--out", default="", help="JSON of every record")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--warm-torch", action="store_true",
                    help="only compile torch's epilogue at every size, in parallel processes "
                         "(fills Inductor's caches for a later timing process)")
    ap.add_argument("--warm-procs", type=int, default=12)
    ap.add_argument("--prepare-first", action="store_true",
                    help="every size's inputs and references before any GPU work")
    ap.add_argument("--wait-for", default="",
                    help="a file to wait for (up to 120 s) before any GPU work")
    ap.add_argument("--specs", nargs="*", default=[],
                    help="--compile-only: also every schedule of these PROGRAM.py[:NAME]")
    args = ap.parse_args()
    args.schedules = [s for s in args.schedules.split(",") if s]
    for v in args.variants:
        parse_variant(v)
    if args.compile_only:
        compile_only(args)
        return 0
    if args.warm_torch:
        warm_torch(args)
        return 0

    os.environ.setdefault("WB_RANK", "0")
    os.environ.setdefault("WB_WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    import torch

    from workbench import interpreter
    from workbench.runtime import baselines_rows, checks, graphs
    from workbench.runtime.baselines import event_times, restorer
    from workbench.runtime.executor import PlanRun
    from workbench.runtime.gpu import Gpu

    gpu = Gpu(0, 1)
    print(f"device {gpu.name}, {gpu.sm_count} SMs, torch {torch.__version__}", flush=True)
    records, t0, nvtx_labels = [], time.time(), []

    def nvtx_once(label: str, fn) -> None:
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("prof")
        fn()
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        print(f"nvtx launch {len(nvtx_labels)}: {label}", flush=True)
        nvtx_labels.append(label)

    # T-major: a part cut by its time limit loses the last T (--T 8192 128: the small rows)
    cases = [(dt, T, H) for T in args.T for dt in args.dtypes for H in args.H]
    prepare = functools.partial(_prepare, checks, interpreter, args)
    ready: dict = {}
    if args.prepare_first:  # the CPU's part (inputs, references) while the GPU is busy
        ready = {c: prepare(*c) for c in cases}
        print(f"inputs and references ready in {time.time() - t0:.0f} s", flush=True)
    _wait_for(args.wait_for)
    for dt, T, H in cases:
        original, scheds, sizes, inputs, reference = ready.pop((dt, T, H), None) or prepare(
            dt, T, H)
        nbytes = (4 * T * H + H) * 2  # read y, r, g; write h, out (2-byte types)
        for label in args.variants:
            for name, prog in scheds:
                tag = f"{args.tag}{label} {name}"
                plan = lowered(prog, parse_variant(label))
                run = PlanRun(gpu, plan, sizes)
                run.upload(inputs)
                run.poison()
                run.run()
                gpu.drv.Context.synchronize()
                check = functools.partial(_check, checks, run, prog, original, reference)
                res = check()
                rec = {"dtype": dt, "T": T, "H": H, "what": tag, "schedule": name,
                       "variant": label, "kernels": [k.name for k in plan.kernels()],
                       "launches": [(getattr(x, "grid", None), getattr(x, "threads", None))
                                    for x in run.launches],
                       "check": res.status(), "ok": res.ok,
                       "max_error": res.max_error, "bytes": nbytes}
                if not args.no_time:
                    eager = run.time(args.warmup, args.reps)
                    graphed, gres = graphs.measure(run, check, args.warmup, args.reps)
                    rec.update(eager_ms=eager.median_ms,
                               graph_ms=graphed.median_ms if graphed else None,
                               graph_check=gres.status() if graphed else str(gres),
                               ok=res.ok and (graphed is None or gres.ok))
                if args.nvtx:
                    nvtx_once(f"{tag} {dt} T{T} H{H}", run.run)
                run.free()
                records.append(rec)
                _print(rec)
                _save(args.out, records)
        if args.torch and T >= args.torch_min_T:
            _torch_rows(torch, baselines_rows, event_times, restorer, inputs, dt, T,
                        H, nbytes, args, records, nvtx_once)
        del inputs, reference
        torch.cuda.empty_cache()
    print(f"done in {time.time() - t0:.0f} s", flush=True)
    _save(args.out, records)
    gpu.close()
    return 0 if all(r.get("ok", True) for r in records) else 1


@functools.cache
def _programs(dt: str, schedules: tuple, study: str):
    return programs(dt, list(schedules), study)


def _prepare(checks, interpreter, args, dt: str, T: int, H: int):
    """What a size's measurement needs of the CPU: the programs, the bound sizes, fresh random
    inputs and the reference interpreter's outputs (the check's 4 parts)."""
    original, scheds = _programs(dt, tuple(args.schedules), args.study)
    sizes = {"T": T, "H": H, "P": 1}
    inputs = checks.make_inputs(original, sizes, args.seed + T + H)
    ref = checks.reference(original, inputs, sizes, 1)
    length = checks.pointwise_length(original)
    n_full = (None if length is None else
              interpreter.concrete(length, interpreter.bind_sizes(original, sizes)))
    return original, scheds, sizes, inputs, (ref, n_full)


def _wait_for(path: str, limit_s: float = 120.0) -> None:
    """Until `path` exists (another process's end, e.g. --warm-torch's), at most `limit_s`."""
    if not path:
        return
    start = time.time()
    while not Path(path).exists() and time.time() - start < limit_s:
        time.sleep(0.2)
    print(f"waited {time.time() - start:.0f} s for {path}"
          f"{'' if Path(path).exists() else ' (not there: going on)'}", flush=True)


def _save(path: str, records: list) -> None:
    """Every record so far (a run cut off by its time limit keeps what it measured)."""
    if path:
        Path(path).write_text(json.dumps(records, indent=1, default=str))


def _check(checks, run, prog, original, reference):
    """The outputs the last run left, against the interpreter's (one rank of one)."""
    ref, n_full = reference
    got = run.download([v.name for v in prog.outputs])
    return checks.compare(got, prog, original, ref, 0, 1, n_full)


def _torch_rows(torch, baselines_rows, event_times, restorer, inputs, dt, T, H, nbytes, args,
                records, nvtx_once) -> None:
    """torch.compile(fullgraph=True) of the epilogue on the same inputs: eager and graphed."""
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dt]
    y, r, g = (torch.from_numpy(inputs[k].astype("float32")).to("cuda").to(dtype)
               for k in ("y", "r", "g"))
    epilogue = baselines_rows._epilogue(torch, EPS)
    torch._dynamo.reset()
    t0 = time.time()
    compiled = torch.compile(epilogue, dynamic=False, fullgraph=True)
    compiled(y, r, g)
    torch.cuda.synchronize()
    compile_s = time.time() - t0  # short where --warm-torch filled Inductor's caches
    before = restorer(y)
    rec = {"dtype": dt, "T": T, "H": H, "what": "torch.compile epilogue", "bytes": nbytes,
           "compile_s": round(compile_s, 2)}
    if not args.no_time:
        rec["eager_ms"] = median(event_times(torch, lambda: compiled(y, r, g), args.warmup,
                                             args.reps, before))
        replay = baselines_rows._graphed(torch, lambda: compiled(y, r, g), before, args.warmup)
        rec["graph_ms"] = median(event_times(torch, replay, args.warmup, args.reps, before))
    if args.nvtx:
        nvtx_once(f"{args.tag}torch.compile {dt} T{T} H{H}", lambda: compiled(y, r, g))
    records.append(rec)
    _print(rec)
    _save(args.out, records)


def _print(rec: dict) -> None:
    ms = rec.get("graph_ms") or rec.get("eager_ms")
    rate = f"{gbps(rec['bytes'], ms):7.0f} GB/s" if ms else ""
    eager = f"{rec['eager_ms']:.4f}" if rec.get("eager_ms") else "-"
    graph = f"{rec['graph_ms']:.4f}" if rec.get("graph_ms") else "-"
    shape = " ".join(f"{g}x{t}" for g, t in rec.get("launches", ()) if g)  # grid x threads
    print(f"{rec['dtype']:4} T={rec['T']:5} H={rec['H']:5} {rec['what']:42} "
          f"eager {eager:>8} graph {graph:>8} ms {rate} {rec.get('check', '')} {shape}",
          flush=True)


if __name__ == "__main__":
    sys.exit(main())
