"""The fused residual + RMSNorm row kernel against a torch.compile'd residual + RMSNorm on the
same GPU (`harness.py replay-rmsnorm` runs it after compile-and-measure has timed the
workbench's kernel).

For each size and dtype of the workbench's timing CSV (studies/rmsnorm.py, schedule
`fused`, P = 1): torch.compile of the same computation (h = x + r; out = h * rsqrt(mean(h^2) +
eps) * g, statistics in f32, returning out and h), its output checked against the reference
interpreter on the first rows, timed with CUDA events (warm-up, `--reps` repetitions, median),
and both kernels' achieved bandwidth: bytes = read x, r, g + write out, h (the minimum traffic)
over the median time, against the GPU's HBM datasheet peak.

    python3 benchmarks/gpu/rmsnorm_vs_torch.py --workbench RES/rmsnorm-time.csv --out RES
    python3 benchmarks/gpu/rmsnorm_vs_torch.py --workbench b1=RES/t-b1.csv b2=RES/t-b2.csv ...

A `LABEL=PATH` names the kernel variant of that CSV (replay-rmsnorm: the row kernels' minimum
blocks per SM, WB_ROW_MIN_BLOCKS); torch is timed once per size and dtype, every variant is
set beside it, and a second table names the fastest variant of each size.
    python3 benchmarks/gpu/rmsnorm_vs_torch.py --self-test     # CPU only: parsing and tables
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

EPS = 1e-6  # studies/rmsnorm.py's EPS
ITEMSIZE = {"f16": 2, "bf16": 2, "f32": 4}
# HBM datasheet peaks (GB/s): H100 SXM5 3.35 TB/s (H100 datasheet), H200 SXM 4.8 TB/s (H200
# datasheet). The fraction of peak is reported beside the GB/s; unknown GPUs get none.
HBM_PEAK_GBPS = {"H100": 3350.0, "H200": 4800.0}
CHECK_ROWS = 64  # rows of torch's output checked against the interpreter


def dtype_of(spec: str) -> str | None:
    """The dtype of a residual + RMSNorm program spec of rmsnorm.py (None: another program)."""
    path, _, name = spec.partition(":")
    if not path.endswith("rmsnorm.py"):
        return None
    if name in ("", "residual_f16"):
        return "f16"
    if name.startswith("residual_"):
        return name.removeprefix("residual_")
    return None


def parse_sizes(text: str) -> dict[str, int]:
    """'T=128 H=4096' (compile-and-measure's CSV) or 'H=4096,T=128' -> {'H': 4096, 'T': 128};
    powers of two may be written 2^k."""
    out = {}
    for part in text.replace(",", " ").split():
        k, _, v = part.partition("=")
        out[k] = 2 ** int(v[2:]) if v.startswith("2^") else int(v)
    return out


def split_variant(arg: str) -> tuple[str, Path]:
    """'b2=path.csv' -> ('b2', path.csv); a bare path has the variant ''."""
    label, sep, path = arg.partition("=")
    return (label, Path(path)) if sep and label and "/" not in label else ("", Path(arg))


def workbench_rows(csv_path: Path, variant: str = "") -> list[dict]:
    """The fused residual + RMSNorm records of a compile-and-measure CSV that checked ok."""
    rows = []
    with open(csv_path) as f:
        for rec in csv.DictReader(f):
            dt = dtype_of(rec["spec"])
            if dt is None or rec["schedule"] != "fused" or rec.get("kind", "workbench") != \
                    "workbench":
                continue
            sizes = parse_sizes(rec["sizes"])
            rows.append({"variant": variant, "dtype": dt, "H": sizes["H"], "T": sizes["T"],
                         "workbench_ms": float(rec["time_ms"]), "check": rec["check"]})
    return rows


def traffic_bytes(T: int, H: int, dtype: str) -> int:
    """Minimum HBM traffic of residual + RMSNorm: read x, r (T x H) and g (H), write out, h."""
    return (4 * T * H + H) * ITEMSIZE[dtype]


def hbm_peak_gbps(device: str) -> float | None:
    for key, peak in HBM_PEAK_GBPS.items():
        if key in device:
            return peak
    return None


def table_rows(rows: list[dict], device: str) -> list[dict]:
    """Rows with bandwidths and ratios: wb_over_torch = workbench time / torch.compile time
    (below 1: the workbench kernel is faster)."""
    peak = hbm_peak_gbps(device)
    out = []
    for r in rows:
        nbytes = traffic_bytes(r["T"], r["H"], r["dtype"])
        wb_gbps = nbytes / (r["workbench_ms"] * 1e-3) / 1e9
        t_gbps = nbytes / (r["torch_ms"] * 1e-3) / 1e9
        out.append({**r, "bytes": nbytes,
                    "wb_over_torch": r["workbench_ms"] / r["torch_ms"],
                    "wb_GBps": wb_gbps, "torch_GBps": t_gbps,
                    "hbm_peak_GBps": peak if peak else "",
                    "wb_of_peak": wb_gbps / peak if peak else "",
                    "torch_of_peak": t_gbps / peak if peak else ""})
    return out


COLUMNS = ["variant", "dtype", "H", "T", "workbench_ms", "torch_ms", "wb_over_torch", "wb_GBps",
           "torch_GBps", "hbm_peak_GBps", "wb_of_peak", "torch_of_peak", "bytes", "check",
           "torch_check"]


BEST_COLUMNS = ["dtype", "H", "T", "variant", "workbench_ms", "torch_ms", "wb_over_torch",
                "wb_of_peak", "torch_of_peak", "others_ms"]


def best_rows(rows: list[dict]) -> list[dict]:
    """Per (dtype, H, T): the row of the fastest variant, with the others' times."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["dtype"], r["H"], r["T"]), []).append(r)
    out = []
    for group in groups.values():
        fastest = min(group, key=lambda r: r["workbench_ms"])
        others = " ".join(f"{r['variant']}:{r['workbench_ms']:.4g}" for r in group
                          if r is not fastest)
        out.append({**fastest, "others_ms": others})
    return out


def write_tables(rows: list[dict], out_dir: Path, device: str, stem: str) -> None:
    """CSV and markdown of the comparison in out_dir (stem.csv, stem.md)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)

    def fmt(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = [f"Residual + RMSNorm on {device}: fused row kernel vs torch.compile "
             "(median of CUDA-event times; wb_over_torch < 1: the workbench kernel is faster)",
             "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in COLUMNS) + " |" for r in rows]
    best = best_rows(rows)
    if len(best) < len(rows):
        lines += ["", "Fastest variant of each size (the one to keep):", "",
                  "| " + " | ".join(BEST_COLUMNS) + " |", "|" + "---|" * len(BEST_COLUMNS)]
        lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in BEST_COLUMNS) + " |"
                  for r in best]
    (out_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


# ---------------------------------------------------------------- on the GPU


def residual_rmsnorm(x, r, g):
    """The computation torch.compile gets: rmsnorm.py's residual program in torch ops."""
    import torch

    h = x + r
    hf = h.float()
    out = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS) * g.float()
    return out.to(x.dtype), h


def torch_check(out, h, x, r, g, dt: str) -> str:
    """torch's (out, h) on the first CHECK_ROWS rows against the reference interpreter running
    rmsnorm.py's residual program on the same inputs: the two compute the same thing."""
    import numpy as np

    from workbench import interpreter
    from workbench.loader import load

    rows = min(x.shape[0], CHECK_ROWS)
    pf = load(f"studies/rmsnorm.py:residual_{dt}")
    ins = {k: v.float().cpu().numpy().astype(
        interpreter.numpy_dtype(pf.program.value(k).type.dtype))
        for k, v in (("x", x[:rows]), ("r", r[:rows]), ("g", g))}
    want = interpreter.run(pf.program, ins, {"T": rows, "H": x.shape[1], "P": 1})
    err = max(interpreter.max_relative_error(out[:rows].float().cpu().numpy(),
                                             want["out"].astype(np.float32)),
              interpreter.max_relative_error(h[:rows].float().cpu().numpy(),
                                             want["h"].astype(np.float32)))
    tol = interpreter.RTOL[dt]
    return f"{'ok' if err <= tol else 'MISMATCH'} ({err:.2g} <= {tol:g})"


def torch_rows(rows: list[dict], warmup: int, reps: int) -> str:
    """Time torch.compile's residual + RMSNorm at each row's size and dtype (adds torch_ms and
    torch_check to each row); returns the device name."""
    import torch

    from workbench.runtime.baselines import event_times

    device = torch.cuda.get_device_name(0)
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    # One specialized graph per shape and dtype (18 here): raise dynamo's recompile limit
    # (8 by default), past which it would silently run the function eagerly.
    for knob in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    compiled = torch.compile(residual_rmsnorm, dynamic=False, fullgraph=True)
    done: dict[tuple, dict] = {}
    for row in rows:
        T, H, dt = row["T"], row["H"], row["dtype"]
        if (dt, H, T) in done:  # another variant of a size already timed: torch once
            row["torch_ms"] = done[(dt, H, T)]["torch_ms"]
            row["torch_check"] = done[(dt, H, T)]["torch_check"]
            continue
        done[(dt, H, T)] = row
        gen = torch.Generator(device="cuda").manual_seed(T * 7 + H)
        x, r = (torch.randn(T, H, device="cuda", dtype=tdt[dt], generator=gen) for _ in "xr")
        g = torch.randn(H, device="cuda", dtype=tdt[dt], generator=gen)
        out, h = compiled(x, r, g)
        torch.cuda.synchronize()
        row["torch_check"] = torch_check(out, h, x, r, g, dt)
        times = event_times(torch, lambda x=x, r=r, g=g: compiled(x, r, g), warmup, reps)
        row["torch_ms"] = statistics.median(times)
        print(f"{dt} H={H} T={T}: workbench {row['variant']} {row['workbench_ms']:.4f} ms, "
              "torch.compile "
              f"{row['torch_ms']:.4f} ms, torch check {row['torch_check']}", flush=True)
    return device


def self_test(tmp: Path) -> None:
    """CPU-only: parse a compile-and-measure CSV and write the tables with made-up torch
    times (nothing here is a measurement)."""
    csv_path = tmp / "wb.csv"
    csv_path.write_text(
        "spec,program,sizes,P,schedule,kind,time_ms,spread_ms,min_ms,reps,check\n"
        "studies/rmsnorm.py,residual_rmsnorm_f16,T=128 H=4096,1,fused,workbench,"
        "0.01,0,0.01,50,ok\n"
        "studies/rmsnorm.py,residual_rmsnorm_f16,\"H=4096,T=128\",1,unscheduled,"
        "workbench,0.02,0,0.02,50,ok\n"
        "studies/rmsnorm.py:residual_bf16,residual_rmsnorm_bf16,\"H=2^14,T=8192\",1,"
        "fused,workbench,0.5,0,0.5,50,ok\n"
        "studies/rmsnorm.py:axis_f16,axis_f16,\"H=4096,T=128\",1,fused,workbench,"
        "0.01,0,0.01,50,ok\n")
    rows = workbench_rows(csv_path)
    assert [(r["dtype"], r["H"], r["T"]) for r in rows] == [("f16", 4096, 128),
                                                            ("bf16", 16384, 8192)], rows
    for r in rows:
        r["torch_ms"], r["torch_check"] = 2 * r["workbench_ms"], "not run (self-test)"
    out = table_rows(rows, "NVIDIA H100 80GB HBM3")
    assert abs(out[0]["wb_over_torch"] - 0.5) < 1e-12
    assert out[1]["bytes"] == (4 * 8192 * 16384 + 16384) * 2
    assert abs(out[1]["wb_GBps"] - out[1]["bytes"] / 0.5e-3 / 1e9) < 1e-6
    write_tables(out, tmp, "NVIDIA H100 80GB HBM3 (self-test)", "self-test")
    assert (tmp / "self-test.csv").read_text().startswith("variant,dtype,H,T,")
    # Variants: the same sizes from two CSVs, labelled; the fastest of each size is named.
    assert split_variant("b2=/x/t.csv") == ("b2", Path("/x/t.csv"))
    assert split_variant("/x/a=b.csv") == ("", Path("/x/a=b.csv"))
    slow = tmp / "slow.csv"
    slow.write_text(csv_path.read_text().replace(",0.5,0,0.5,", ",0.7,0,0.7,"))
    both = workbench_rows(slow, "b1") + workbench_rows(csv_path, "b2")
    for r in both:
        r["torch_ms"], r["torch_check"] = 0.6, "not run (self-test)"
    best = best_rows(table_rows(both, "NVIDIA H100 80GB HBM3"))
    big = [r for r in best if r["H"] == 16384]
    assert len(best) == 2 and big[0]["variant"] == "b2", best
    assert big[0]["others_ms"] == "b1:0.7", big[0]["others_ms"]
    write_tables(table_rows(both, "GPU"), tmp, "GPU (self-test)", "self-test-variants")
    assert "Fastest variant" in (tmp / "self-test-variants.md").read_text()
    try:  # the check of torch's result, on the CPU where torch is installed
        import torch
    except ImportError:
        print("self-test ok (torch absent: torch_check not run)")
        return
    for dt, tdt in (("f16", torch.float16), ("bf16", torch.bfloat16), ("f32", torch.float32)):
        x, r = torch.randn(80, 1000).to(tdt), torch.randn(80, 1000).to(tdt)
        g = torch.randn(1000).to(tdt)
        verdict = torch_check(*residual_rmsnorm(x, r, g), x, r, g, dt)
        assert verdict.startswith("ok"), (dt, verdict)
        wrong = torch_check(*residual_rmsnorm(x, r, 2 * g), x, r, g, dt)
        assert wrong.startswith("MISMATCH"), (dt, wrong)
        print(f"torch_check {dt} on the CPU: {verdict}")
    print("self-test ok")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workbench", nargs="+",
                    help="compile-and-measure CSVs holding rmsnorm.py's fused residual rows, "
                         "each PATH or LABEL=PATH (LABEL: the kernel variant it timed)")
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--stem", default="rmsnorm-vs-torch")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args(argv)
    if args.self_test:
        import tempfile

        self_test(Path(tempfile.mkdtemp()))
        return 0
    if args.reps < 50:
        ap.error(f"--reps must be >= 50, got {args.reps}")
    rows = []
    for arg in args.workbench:
        variant, path = split_variant(arg)
        rows += workbench_rows(path, variant)
    if not rows:
        print(f"no fused residual + RMSNorm rows in {args.workbench}", file=sys.stderr)
        return 1
    device = torch_rows(rows, args.warmup, args.reps)
    # Each size's variants side by side, sizes in the order the CSVs first name them.
    order: dict[tuple, int] = {}
    for r in rows:
        order.setdefault((r["dtype"], r["H"], r["T"]), len(order))
    rows.sort(key=lambda r: (order[(r["dtype"], r["H"], r["T"])], r["variant"]))
    write_tables(table_rows(rows, device), args.out, device, args.stem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
