"""CPU time, wall time, peak memory and SimPy events of `workbench simulate` on the Adam study
(every schedule) at 8, 64, 1024, 16384 and 131072 GPUs of dgx-h100 nodes (1 to 16384 nodes),
reduced by symmetry and with every rank simulated (`--full`).

    python benchmarks/simulate_scale.py                 # both modes, every size
    python benchmarks/simulate_scale.py full 16384      # one mode, one size (JSON)

Each (mode, size) runs in a fresh process, so its peak RSS (ru_maxrss of the child) is its
own; wall and CPU seconds are the simulation's (the machine is shared: CPU time is the
figure that does not depend on its load); events are the SimPy events the simulations of
every schedule processed (SimResult.events). Targets on a 2-core machine (issue 37): full at
16384 GPUs within 30 s of CPU, at 131072 within 5 min of CPU and 4 GiB.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GPUS = (8, 64, 1024, 16384, 131072)


def one(mode: str, gpus: int) -> dict:
    """Simulate every schedule once in this process; the numbers as a dict."""
    from cost_model import load_hardware
    from workbench.cli.simulate import predict
    from workbench.loader import load

    loaded = load(str(ROOT / "studies" / "adam.py"))
    cluster = load_hardware("dgx-h100", nodes=gpus // 8)
    t0, c0 = time.perf_counter(), time.process_time()
    preds = predict(loaded, cluster, {"N": 2**28}, reduced=mode == "reduced")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    # a schedule this cluster cannot run (a fused kernel across NVLink domains) is a row
    # with a note and NaN times, and one the backend does not generate (the ring form,
    # simulated only) is timed but, as in `workbench simulate`, never the best
    best = min((p for p in preds if p.ranked), key=lambda p: p.time_s)
    return {"gpus": gpus, "mode": mode, "schedules": len(preds), "wall_s": wall, "cpu_s": cpu,
            "ranks": best.result.ranks_simulated, "best": best.name,
            "events": sum(p.result.events for p in preds if p.ok),
            "best_ms": best.time_s * 1e3,
            "times_ms": {p.name: p.time_s * 1e3 for p in preds if p.ok}}


def main() -> None:
    if len(sys.argv) == 3:  # the child: one mode, one size
        out = one(sys.argv[1], int(sys.argv[2]))
        out["rss_MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(out))
        return
    print("| GPUs | mode | ranks simulated | schedules | wall s | CPU s | peak RSS MB | events "
          "| best | best ms |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for gpus in GPUS:
        rows = []
        for mode in ("reduced", "full"):
            proc = subprocess.run([sys.executable, __file__, mode, str(gpus)],
                                  capture_output=True, text=True, check=True)
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            rows.append(r)
            print(f"| {gpus} | {mode} | {r['ranks']} | {r['schedules']} | {r['wall_s']:.2f} | "
                  f"{r['cpu_s']:.2f} | {r['rss_MB']:.0f} | {r['events']} | {r['best']} | "
                  f"{r['best_ms']:.3f} |",
                  flush=True)
        reduced, full = (row["times_ms"] for row in rows)
        worst = max(abs(full[k] / reduced[k] - 1) for k in reduced)
        print(f"|  | full vs reduced: largest relative difference {worst:.1e} |  |  |  |  |  |  "
              "|  |  |", flush=True)


if __name__ == "__main__":
    main()
