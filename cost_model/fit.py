"""Check (and document) the fit of the NCCL constants to the measured h200x4 table.

    python -m cost_model.fit        # prints predicted/measured - 1 for AR, RS, AG

How H200_NCCL (cost_model/hardware.py) was fitted: the model of cost_model/collectives.py with
free host overhead, per-kind latency (AR, RS; AG = 0), per-protocol (base latency, step latency,
efficiency) and the AllReduce bandwidth factor, minimising the worst relative error over the 24
points of data/nccl_h200x4.csv with scipy.optimize.differential_evolution (seed 0, popsize 30).
Worst error: 12.4% (AllReduce at 256 KiB, 16 MiB; ReduceScatter at 4 MiB, 256 MiB).
"""

from __future__ import annotations

import csv
from pathlib import Path

from cost_model.collectives import choose_plan, collective_time
from cost_model.hardware import preset

DATA = Path(__file__).resolve().parent / "data" / "nccl_h200x4.csv"
KINDS = ("allreduce", "reducescatter", "allgather")


def errors() -> list[tuple[int, dict]]:
    """(nbytes, {kind: predicted / measured - 1}) for every row of the measured table."""
    cluster = preset("h200x4")
    with open(DATA) as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    out = []
    for row in rows:
        n = int(row["nbytes"])
        out.append((n, {k: collective_time(k, n, 4, cluster) / (float(row[f"{k}_ms"]) * 1e-3)
                        - 1 for k in KINDS}))
    return out


def main() -> None:
    cluster = preset("h200x4")
    print(f"{'nbytes':>12} " + " ".join(f"{k:>14}" for k in KINDS) + "  AR protocol")
    worst = 0.0
    for n, errs in errors():
        worst = max(worst, *(abs(e) for e in errs.values()))
        proto = choose_plan("allreduce", n, 4, cluster).protocol
        print(f"{n:>12} " + " ".join(f"{errs[k]:>+14.3f}" for k in KINDS) + f"  {proto}")
    print(f"worst relative error: {worst:.3f}")


if __name__ == "__main__":
    main()
