"""What a Perfetto/Chrome trace of one training step (examples/train_gpt.py --trace) says about
where the step went (design note 93): GPU time per stream, the main stream's forward and
backward kernel time (split at the loss's backward kernel), the host's time in autograd's
AccumulateGrad nodes (where the optimizer's post-accumulate-grad hooks run) and in compiled
graph calls, and each GEMM kernel's count and time with the op that launched it.

    python benchmarks/gpu/trace_summary.py TRACE.json[.gz] [...]

Times under the profiler are the profiled step's: the host's are inflated by the profiler
(compare host times between traces, not with untraced runs); the GPU's are not.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import gzip
import json
import sys
from pathlib import Path

LOSS_BACKWARD = "nll_loss_backward"  # the first kernel of backward (cross-entropy's)


def load(path: Path) -> list[dict]:
    """The complete ('X') events of a trace file (gzip or plain JSON)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X"]


def _ms(us: float) -> float:
    return round(us / 1e3, 2)


def summary(events: list[dict]) -> dict:
    """The step's figures (milliseconds) from its complete events."""
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    if not kernels:
        raise ValueError("a trace must hold GPU kernels, got none; record it with CUDA "
                         "activity (train_gpt.py --trace does)")
    per_stream = collections.Counter()
    for e in kernels:
        per_stream[e["tid"]] += e["dur"]
    main = max(per_stream, key=per_stream.get)
    on_main = [e for e in kernels if e["tid"] == main]
    cut = next((i for i, e in enumerate(on_main) if LOSS_BACKWARD in e["name"]), len(on_main))
    host = collections.Counter()
    for e in events:
        if e.get("name") == "torch::autograd::AccumulateGrad":
            host["accumulate_grad"] += e["dur"]
        elif e.get("name", "").startswith("## Call CompiledFxGraph"):
            host["compiled_graphs"] += e["dur"]
    return {"kernels_ms": _ms(sum(per_stream.values())),
            "streams_ms": {str(s): _ms(t) for s, t in per_stream.most_common()},
            "main_forward_ms": _ms(sum(e["dur"] for e in on_main[:cut])),
            "main_backward_ms": _ms(sum(e["dur"] for e in on_main[cut:])),
            "host_accumulate_grad_ms": _ms(host["accumulate_grad"]),
            "host_compiled_graphs_ms": _ms(host["compiled_graphs"]),
            "gemms": gemms(events, kernels)}


def gemms(events: list[dict], kernels: list[dict]) -> list[dict]:
    """Each GEMM kernel (cuBLAS/CUTLASS names) by the innermost op that launched it: count
    and total ms, largest first (the runtime call shares the kernel's correlation id)."""
    launch = {e["args"]["correlation"]: e for e in events
              if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}
    ops = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    starts = [e["ts"] for e in ops]
    rows: dict[tuple, list] = {}
    for k in kernels:
        if "gemm" not in k["name"].lower():
            continue
        call = launch.get(k.get("args", {}).get("correlation"))
        op = None
        if call is not None:
            i = bisect.bisect_right(starts, call["ts"])
            around = [o for o in ops[max(0, i - 64):i] if o["tid"] == call["tid"]
                      and o["ts"] + o["dur"] >= call["ts"]]
            op = min(around, key=lambda o: o["dur"])["name"] if around else None
        row = rows.setdefault((k["name"][:80], op), [0, 0.0])
        row[0] += 1
        row[1] += k["dur"]
    out = [{"kernel": n, "op": op, "count": c, "ms": _ms(t)} for (n, op), (c, t) in rows.items()]
    return sorted(out, key=lambda r: -r["ms"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", type=Path, nargs="+")
    args = ap.parse_args(argv)
    for path in args.traces:
        if not path.is_file():
            print(f"a trace must be a file, got {path}; pass train_gpt.py --trace's output",
                  file=sys.stderr)
            return 2
        try:
            s = summary(load(path))
        except ValueError as e:
            print(f"{path}: {e}", file=sys.stderr)
            return 2
        print(f"== {path}")
        for k, v in s.items():
            if k != "gemms":
                print(f"{k}: {v}")
        for g in s["gemms"]:
            print(f"  gemm {g['ms']:7.2f} ms {g['count']:4d} x {g['kernel']}  <- {g['op']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
