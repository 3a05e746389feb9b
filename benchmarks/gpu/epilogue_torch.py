"""y = gelu_tanh(x @ w + b) in torch on one GPU, the baselines of the fused MatMul epilogue
(studies/kernel_ops.py:epilogue_*): eager and unfused (matmul, then add + gelu: two
kernels after the GEMM), torch._addmm_activation (cuBLASLt's GELU_BIAS epilogue, what the
workbench's fused schedule calls), and torch.compile of the eager function (Inductor picks its
own fusion). Median of `--reps` CUDA-event timings after warm-up; one CSV row per variant.

    python3 benchmarks/gpu/epilogue_torch.py --T 8192 --H 12288 --F 49152 --dtype f16 \
        --out results.csv
"""

from __future__ import annotations

import argparse
import csv
import statistics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=8192)
    ap.add_argument("--H", type=int, default=12288)
    ap.add_argument("--F", type=int, default=49152)
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16", "f32"])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as fn

    dt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[args.dtype]
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(args.T, args.H, device="cuda", dtype=dt, generator=g)
    # weights scaled by 1/sqrt(K) as the workbench's inputs are (design note 47)
    w = torch.randn(args.H, args.F, device="cuda", dtype=dt, generator=g) / args.H ** 0.5
    b = torch.randn(args.F, device="cuda", dtype=dt, generator=g)
    out = torch.empty(args.T, args.F, device="cuda", dtype=dt)

    def eager():
        return fn.gelu(torch.matmul(x, w) + b, approximate="tanh")

    def addmm_activation():
        return torch._addmm_activation(b, x, w, use_gelu=True, out=out)

    compiled = torch.compile(eager)
    want = eager().float()
    rows = []
    for name, f in (("eager-unfused", eager), ("addmm-activation", addmm_activation),
                    ("torch-compile", compiled)):
        try:
            got = f().float()
        except Exception as e:  # one variant failing must not lose the others' rows
            print(f"{name}: failed: {type(e).__name__}: {e}", flush=True)
            rows.append({"variant": name, "dtype": args.dtype, "T": args.T, "H": args.H,
                         "F": args.F, "median_ms": float("nan"), "min_ms": float("nan"),
                         "normwise_err_vs_eager": float("nan"),
                         "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                         "error": f"{type(e).__name__}: {e}"})
            continue
        err = float((got - want).abs().max() / want.abs().max().clamp(min=1.0))
        for _ in range(args.warmup):
            f()
        times = []
        for _ in range(args.reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            f()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        rows.append({"variant": name, "dtype": args.dtype, "T": args.T, "H": args.H,
                     "F": args.F, "median_ms": statistics.median(times),
                     "min_ms": min(times), "normwise_err_vs_eager": err,
                     "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                     "error": ""})
        print(f"{name:18s} {args.dtype} median {rows[-1]['median_ms']:.3f} ms "
              f"(err vs eager {err:.2e})", flush=True)
    with open(args.out, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
