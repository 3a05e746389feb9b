"""One GPU (P = 1): each generated optimizer step against what a PyTorch user would run for
the same update, and against the HBM floor (issue 17; design note 54).

    torchrun --nproc_per_node=1 benchmarks/gpu/optimizer_steps.py --out DIR \
        [--log2n 24 26 28] [--reps 50] [--schedules fuse-rs-c-ag] \
        [--tuned-log2n 26 28] [--tuned-knobs 1,2,32 1,2,16,stream 1,2,32,stream 1,1,32,stream]

For N = 2^24, 2^26, 2^28 fp32 elements (mixed Adam: fp16 gradients, fp32 master weights and
moments, an fp16 copy of the weights) and each of sgd, sgd-momentum, adam, lamb, adam-mixed:

- generated: the program's schedule(s) compiled and run through the torch bridge
  (workbench.runtime.torch_bridge.BoundPlan: the plan's buffers seen as torch tensors, launched in
  torch's stream order), its one-step result checked against the torch step on the same
  inputs (max |diff| / max |w|);
- torch fused / foreach: torch.optim's fused and foreach implementations (SGD, SGD-momentum,
  Adam; Adam mixed as AMP-with-master-weights runs it: fp16 -> fp32 gradient copy,
  torch._fused_adam_, fp32 -> fp16 weight copy); LAMB in eager torch ops (PyTorch has no LAMB);
- torch.compile: the torch.optim step under torch.compile (PyTorch's "compiling the optimizer"
  recipe), LAMB's and mixed Adam's torch-op step under torch.compile (dynamic=False, one
  compile per size: what a user with fixed parameters gets);
- copy: a device-to-device copy moving the step's minimal HBM traffic (half read, half
  written): the floor an update that streams its operands once cannot beat.

Times: CUDA events around each call, 5 warm-up calls, `--reps` calls, the median, twice: with
the GPU idle at the start event (the host's issue of the call inside the time: Python,
guards, launches; what a launch-bound step costs) and with the GPU busy on a spin kernel while
the host issues it (the device's time alone: what a step queued behind backward costs), plus
the host issue time of the call. Writes DIR/optimizer_steps.csv and .md (per case and size:
the generated step, the fastest torch baseline and its speedup, every baseline, the copy
floor and how far from it, in both timings).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# (case, program spec, bytes of HBM traffic per element of the minimal one-pass update):
# sgd reads g, w, writes w (3 x 4); momentum adds the buffer read and write (5 x 4); adam
# reads g, w, m, v, writes w, m, v (7 x 4); lamb needs a second pass for the norms of w and
# u: reads g, w, m, v, writes m, v, u, then reads u, w, writes w (10 x 4); mixed adam reads
# g (2), w, m, v (12), writes w, m, v (12) and w16 (2).
CASES = [
    ("sgd", "studies/sgd.py", 12),
    ("sgd-momentum", "studies/sgd_momentum.py", 20),
    ("adam", "studies/adam.py", 28),
    ("lamb", "studies/lamb.py", 40),
    ("adam-mixed", "studies/adam.py:mixed", 28),
]
# The fused collective's codegen knobs tried at every size: (unroll, blocks per SM, bytes per
# vector, cache hint); --knobs adds others (each unroll, vector width or hint is another nvcc
# build per program).
KNOBS = [(1, 2, 16, "default"), (1, 1, 16, "default")]
# Tried at --tuned-log2n sizes only (2^26, 2^28: where the generated step trailed
# torch.compile by 3-9 %, run 5): 32-byte vectors (two 16-byte accesses per operand per
# thread) and evict-first streaming loads/stores (codegen.tuning, design note 55).
TUNED_KNOBS = [(1, 2, 32, "default"), (1, 2, 16, "stream"), (1, 2, 32, "stream"),
               (1, 1, 32, "stream")]
HYPER = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "wd": 0.01, "mu": 0.9,
         "step": 1.0}


# GPU cycles of the spin (torch.cuda._sleep) enqueued ahead of each device-timed call: ~1 ms
# on an H100 (1.98 GHz boost), far above the host issue time of any step here (GPU run 22:
# at most a few tens of microseconds), so the call is fully enqueued before its start event.
SPIN_CYCLES = 2_000_000


def timeit(torch, fn, reps: int, warmup: int = 5) -> tuple[float, float, float]:
    """(median ms between CUDA events around fn() with the GPU idle at the start event, the
    host's issue of the call inside it (a launch-bound step pays its Python and launch
    overhead here); median ms on the GPU alone; median us of host issue): see device_time."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return (statistics.median(times), *device_time(torch, fn, reps))


def device_time(torch, fn, reps: int) -> tuple[float, float]:
    """(median ms on the GPU, median us of host issue) of fn(): a spin kernel keeps the GPU
    busy while the host issues the call, so the start event fires when the spin ends, with
    the call's work already queued behind it (as an optimizer step queued behind backward
    in training): the events then time the GPU's work alone. (nan, nan) without
    torch.cuda._sleep."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        return float("nan"), float("nan")
    gpu, host = [], []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sleep(SPIN_CYCLES)
        a.record()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e6)
        b.record()
        b.synchronize()
        gpu.append(a.elapsed_time(b))
    return statistics.median(gpu), statistics.median(host)


def inputs(torch, case: str, n: int, seed: int = 0):
    """The same starting values for every variant: gradients, weights, state (v >= 0)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    gdt = torch.float16 if case == "adam-mixed" else torch.float32
    x = {"g": torch.randn(n, device="cuda", generator=gen).to(gdt),
         "w": torch.randn(n, device="cuda", generator=gen)}
    if case == "sgd-momentum":
        x["b"] = torch.randn(n, device="cuda", generator=gen) * 0.1
    if case in ("adam", "lamb", "adam-mixed"):
        x["m"] = torch.randn(n, device="cuda", generator=gen) * 0.1
        x["v"] = torch.rand(n, device="cuda", generator=gen) * 0.01
    return x


def torch_ops_step(torch, case: str):
    """The step in torch ops on tensors (g, w, state) -> updates in place; the reference of
    the check and, under torch.compile, the compiled baseline of LAMB and mixed Adam."""
    h = HYPER
    b1, b2, lr, eps = h["beta1"], h["beta2"], h["lr"], h["eps"]
    bc1, bc2 = 1 - b1 ** h["step"], 1 - b2 ** h["step"]

    def sgd(g, w):
        w.sub_(lr * g)

    def sgd_momentum(g, w, b):
        b.mul_(h["mu"]).add_(g)
        w.sub_(lr * b)

    def adam(g, w, m, v, w16=None):
        g = g.float()
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        w.sub_(lr * (m / bc1) / ((v / bc2).sqrt() + eps))
        if w16 is not None:
            w16.copy_(w)

    def lamb(g, w, m, v):
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        u = (m / bc1) / ((v / bc2).sqrt() + eps) + h["wd"] * w
        w.sub_(u * (lr * torch.linalg.vector_norm(w) / torch.linalg.vector_norm(u)))

    return {"sgd": sgd, "sgd-momentum": sgd_momentum, "adam": adam, "lamb": lamb,
            "adam-mixed": adam}[case]


def state_args(case: str, x: dict) -> list:
    return [x[k] for k in ("g", "w", "b", "m", "v") if k in x]


def generated(torch, gpu, case: str, spec: str, sched: str, x: dict, reps: int,
              unroll: int = 1, blocks: int | None = None, vec_bytes: int = 16,
              cache: str = "default"):
    """(median ms, check error) of a schedule of the program through the torch bridge, with
    the codegen knobs that change speed per machine: the fused collective's unroll, its
    blocks per SM, its bytes per vector and its cache hint."""
    from codegen.lower import lower
    from wbtorch.programs import pick_schedule, roles
    from workbench.loader import load
    from workbench.runtime.torch_bridge import BoundPlan

    pf = load(str(ROOT / spec))
    program = pick_schedule(pf, sched)
    r = roles(program)
    n = x["w"].numel()
    run = BoundPlan(gpu, lower(program, 1, collective_unroll=unroll, collective_vec_bytes=vec_bytes,
                                collective_cache=cache), {"N": n, "P": 1}, blocks)
    try:
        names = {"g": r.grad, "w": r.weights, **{s: s for s in r.state}}
        for key, name in names.items():
            run.view(name).copy_(x[key])
        for s in r.scalars:
            run.view(s).fill_(HYPER[s])
        run.run()
        # the torch step on copies of the same inputs is the reference
        ref = {k: t.clone() for k, t in x.items()}
        w16 = torch.empty(n, device="cuda", dtype=torch.float16) if case == "adam-mixed" else None
        torch_ops_step(torch, case)(*state_args(case, ref), *([w16] if w16 is not None else []))
        torch.cuda.synchronize()
        got = run.view(r.weights)
        if case == "adam-mixed" and got.numel() != n:  # master weights sliced: check w16
            got, want = run.view("w16").float(), w16.float()
        else:
            want = ref["w"]
        err = float((got - want).abs().max() / want.abs().max())
        ms = timeit(torch, run.run, reps)
    finally:
        run.free()
    return ms, err


def kernel_names(spec: str, sched: str, unroll: int, vec_bytes: int, cache: str) -> tuple:
    """The generated kernels' names (their compile-cache keys) of a variant, CPU only."""
    from codegen.lower import lower
    from wbtorch.programs import pick_schedule
    from workbench.loader import load

    program = pick_schedule(load(str(ROOT / spec)), sched)
    plan = lower(program, 1, collective_unroll=unroll, collective_vec_bytes=vec_bytes,
                 collective_cache=cache)
    return tuple(k.name for k in plan.kernels())


def baselines(torch, case: str, x: dict, reps: int) -> dict:
    """Name -> median ms of each torch baseline for the case, on clones of the inputs."""
    out = {}
    h = HYPER
    opt_cls = {"sgd": torch.optim.SGD, "sgd-momentum": torch.optim.SGD,
               "adam": torch.optim.Adam}.get(case)
    if opt_cls is not None:
        kw = {"lr": h["lr"]}
        if case == "sgd-momentum":
            kw["momentum"] = h["mu"]
        if case == "adam":
            kw.update(betas=(h["beta1"], h["beta2"]), eps=h["eps"])
        for impl in ("fused", "foreach", "compile"):
            p = torch.nn.Parameter(x["w"].clone())
            p.grad = x["g"].clone()
            opt = opt_cls([p], **kw, **({"fused": True} if impl == "fused" else
                                          {"foreach": impl == "foreach"}))
            fn = opt.step
            if impl == "compile":  # PyTorch's "compiling the optimizer" recipe
                torch._dynamo.reset()  # see workbench.runtime.baselines.compiled: no eager fallback

                def whole_step(opt=opt):
                    opt.step()

                fn = torch.compile(whole_step, dynamic=False)
            t0 = time.time()
            fn()  # the first call creates the state (and compiles)
            torch.cuda.synchronize()
            if impl == "compile":
                print(f"    torch.compile warm-up {time.time() - t0:.1f} s", flush=True)
            out[f"torch {impl}"] = timeit(torch, fn, reps)
            del opt, p
    else:
        args = [t.clone() for t in state_args(case, x)]
        step = torch_ops_step(torch, case)
        if case == "adam-mixed":
            w16 = torch.empty_like(x["g"])
            g32 = torch.empty_like(x["w"])
            g16, w, m, v = args
            st = torch.tensor(1.0, device="cuda")

            def fused():
                g32.copy_(g16)
                torch._fused_adam_([w], [g32], [m], [v], [], [st], lr=h["lr"],
                                   beta1=h["beta1"], beta2=h["beta2"], weight_decay=0.0,
                                   eps=h["eps"], amsgrad=False, maximize=False)
                w16.copy_(w)

            out["torch fused"] = timeit(torch, fused, reps)
            args.append(w16)
        else:
            out["torch eager ops"] = timeit(torch, lambda: step(*args), reps)
        torch._dynamo.reset()
        compiled = torch.compile(step, dynamic=False)
        t0 = time.time()
        compiled(*args)
        torch.cuda.synchronize()
        print(f"    torch.compile warm-up {time.time() - t0:.1f} s", flush=True)
        out["torch compile"] = timeit(torch, lambda: compiled(*args), reps)
    return out


def copy_floor(torch, nbytes: int, reps: int) -> float:
    """timeit's times of a D2D copy moving `nbytes` of HBM traffic (nbytes / 2 read, / 2
    written)."""
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = timeit(torch, lambda: dst.copy_(src), reps)
    # freed on return (the next size allocates its own)
    return ms


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--log2n", type=int, nargs="+", default=[24, 26, 28])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--cases", nargs="+", default=[c for c, _, _ in CASES])
    ap.add_argument("--schedules", nargs="+", default=["fuse-rs-c-ag"])
    ap.add_argument("--knobs", nargs="+", default=[",".join(map(str, k)) for k in KNOBS],
                    help="UNROLL,BLOCKS_PER_SM[,VEC_BYTES[,CACHE]] (default: 1,2 1,1; "
                         "VEC_BYTES 16 or 32, CACHE default or stream)")
    ap.add_argument("--tuned-knobs", nargs="*",
                    default=[",".join(map(str, k)) for k in TUNED_KNOBS],
                    help="knobs tried at --tuned-log2n sizes only (same format; none to skip)")
    ap.add_argument("--tuned-log2n", type=int, nargs="*", default=[26, 28])
    args = ap.parse_args(argv)
    knobs = [parse_knob(k) for k in args.knobs]
    tuned = [parse_knob(k) for k in args.tuned_knobs]
    import torch
    import torch.distributed as dist

    from workbench.runtime.torch_bridge import TorchGpu

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    gpu = TorchGpu()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for lg in args.log2n:
        n = 2 ** lg
        for case, spec, bpe in CASES:
            if case not in args.cases:
                continue
            print(f"== {case} N=2^{lg}", flush=True)
            x = inputs(torch, case, n)
            floor = copy_floor(torch, bpe * n, args.reps)
            rows.append(dict(case=case, log2n=lg, variant="copy (HBM floor)", **times(floor),
                             check=""))
            for sched in args.schedules:
                extra = [k for k in tuned if k not in knobs] if lg in args.tuned_log2n else []
                timed = set()
                for unroll, blocks, vec_bytes, cache in knobs + extra:
                    name = f"generated {sched} ({knob_text(unroll, blocks, vec_bytes, cache)})"
                    try:
                        same = (blocks, kernel_names(spec, sched, unroll, vec_bytes, cache))
                    except Exception:  # generated() below reports why this variant fails
                        same = (blocks, name)
                    if same in timed:  # e.g. 32-byte vectors of mixed Adam: V already 8
                        print(f"  {name}: the same kernels as a variant timed above, skipped",
                              flush=True)
                        continue
                    timed.add(same)
                    try:
                        ms, err = generated(torch, gpu, case, spec, sched, x, args.reps, unroll,
                                            blocks, vec_bytes, cache)
                        rows.append(dict(case=case, log2n=lg, variant=name, **times(ms),
                                         check=f"{err:.2e}"))
                    except Exception as e:  # one failing variant must not lose the others
                        print(f"  {name} failed: {type(e).__name__}: {e}", flush=True)
                        rows.append(dict(case=case, log2n=lg, variant=name,
                                         **times((float("nan"),) * 3),
                                         check=f"failed: {e}"[:200]))
            try:
                for name, ms in baselines(torch, case, x, args.reps).items():
                    rows.append(dict(case=case, log2n=lg, variant=name, **times(ms), check=""))
            except Exception as e:
                print(f"  baselines failed: {type(e).__name__}: {e}", flush=True)
            for r in rows:
                if r["case"] == case and r["log2n"] == lg:
                    print(f"  {r['variant']:48s} {r['median_ms']:8.3f} ms (device "
                          f"{r['device_ms']:.3f} ms, host issue {r['host_us']:.0f} us)  "
                          f"{r['check']}", flush=True)
            del x
            torch.cuda.empty_cache()
            write(out, rows, gpu.name, torch.__version__)
    gpu.close()  # pop the context the bridge pushed (the exit hook would, too)
    dist.destroy_process_group()
    return 0


def parse_knob(text: str) -> tuple[int, int, int, str]:
    """(unroll, blocks per SM, bytes per vector, cache hint) of "U,B[,VEC_BYTES[,CACHE]]"."""
    parts = text.split(",")
    if not 2 <= len(parts) <= 4 or not all(p.isdigit() for p in parts[:3]):
        raise SystemExit(f"a knob must be UNROLL,BLOCKS_PER_SM[,VEC_BYTES[,CACHE]], got {text!r}"
                         "; e.g. 1,2 or 1,2,32,stream")
    vec_bytes = int(parts[2]) if len(parts) > 2 else 16
    return int(parts[0]), int(parts[1]), vec_bytes, parts[3] if len(parts) > 3 else "default"


def knob_text(unroll: int, blocks: int, vec_bytes: int, cache: str) -> str:
    """A variant's knobs as the tables show them (the default knobs' text as before)."""
    text = f"unroll {unroll}, {blocks} blocks/SM"
    if vec_bytes != 16:
        text += f", {vec_bytes}-byte vectors"
    if cache != "default":
        text += f", {cache} hints"
    return text


def times(t: tuple) -> dict:
    """A row's time columns from timeit's tuple."""
    return {"median_ms": t[0], "device_ms": t[1], "host_us": t[2]}


def write(out: Path, rows: list[dict], device: str, version: str) -> None:
    with open(out / "optimizer_steps.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["case", "log2n", "variant", "median_ms", "device_ms",
                                          "host_us", "check"])
        w.writeheader()
        w.writerows(rows)
    lines = [f"One GPU ({device}), torch {version}, P = 1, median of CUDA-event times (ms). "
             "generated: the fastest codegen knobs (the default, unroll 1 and 2 blocks/SM, "
             "beside it; 32-byte vectors and stream (evict-first) hints tried at 2^26 and "
             "2^28 by default, design note 55); speedup: the fastest torch baseline's time "
             "over the generated one's; "
             "floor: a D2D copy moving the step's minimal HBM traffic; check: max |generated - "
             "torch| / max |w| after one step from the same inputs.", "",
             "## The GPU idle at the start event (host issue inside the time)", ""]
    lines += _table(rows, "median_ms")
    lines += ["", "## The GPU busy while the host issues the call (device time alone; host "
              "issue: median us of the Python call)", ""]
    lines += _table(rows, "device_ms")
    (out / "optimizer_steps.md").write_text("\n".join(lines) + "\n")


def _table(rows: list[dict], col: str) -> list[str]:
    """Markdown rows of each case and size with the times of column `col`."""
    def ok(r):
        return r[col] == r[col]  # not NaN

    lines = ["| case | N | generated (knobs) | default knobs | fastest torch | speedup | "
             "every torch baseline | copy floor | generated / floor | host issue us "
             "(generated, fastest torch) | check |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["case"], r["log2n"]) for r in rows}, key=lambda k: (k[1], k[0]))
    for case, lg in keys:
        mine = [r for r in rows if (r["case"], r["log2n"]) == (case, lg)]
        gen = [r for r in mine if r["variant"].startswith("generated") and ok(r)]
        base = [r for r in mine if r["variant"].startswith("torch") and ok(r)]
        floor = next((r[col] for r in mine if r["variant"].startswith("copy") and ok(r)), None)
        if not gen or not base:
            continue
        g = min(gen, key=lambda r: r[col])
        default = next((r for r in gen if "(unroll 1, 2 blocks/SM)" in r["variant"]), g)
        b = min(base, key=lambda r: r[col])
        every = ", ".join(f"{r['variant'].removeprefix('torch ')} {r[col]:.3f}" for r in base)
        knobs = g["variant"][g["variant"].find("(") + 1:-1]
        ratio = f"{g[col] / floor:.2f}" if floor else ""
        floor_txt = f"{floor:.3f}" if floor else ""
        lines.append(f"| {case} | 2^{lg} | {g[col]:.3f} ({knobs}) | {default[col]:.3f} | "
                     f"{b[col]:.3f} ({b['variant'].removeprefix('torch ')}) | "
                     f"{b[col] / g[col]:.2f}x | {every} | {floor_txt} | {ratio} | "
                     f"{g['host_us']:.0f}, {b['host_us']:.0f} | {g['check']} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
