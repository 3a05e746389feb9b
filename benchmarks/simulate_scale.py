"""Wall time of `workbench simulate` on the Adam study (every schedule) at 8, 64, 1024 and
16384 GPUs of h100x8 nodes (1, 8, 128, 2048 nodes).

    python benchmarks/simulate_scale.py            # prints a markdown table

Targets on a 2-core machine (issue 4): 1024 GPUs under 5 s, 16384 GPUs under 60 s.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cli.simulate import predict  # noqa: E402
from cost_model import load_hardware  # noqa: E402
from workbench.loader import load  # noqa: E402

GPUS = (8, 64, 1024, 16384)


def main() -> None:
    loaded = load(str(ROOT / "studies" / "adam.py"))
    print("| GPUs | schedules | wall s | reduced | best | best ms |")
    print("|---:|---:|---:|---|---|---:|")
    for gpus in GPUS:
        cluster = load_hardware("h100x8", nodes=gpus // 8)
        t0 = time.perf_counter()
        preds = predict(loaded, cluster, {"N": 2**28})
        wall = time.perf_counter() - t0
        # a schedule this cluster cannot run (a fused kernel across NVLink domains) is a
        # row with a note and NaN times: never the best
        best = min((p for p in preds if p.ok), key=lambda p: p.time_s)
        print(f"| {gpus} | {len(preds)} | {wall:.2f} | {preds[0].result.reduced} | "
              f"{best.name} | {best.time_s * 1e3:.3f} |")


if __name__ == "__main__":
    main()
