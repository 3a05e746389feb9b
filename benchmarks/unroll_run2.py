"""GPU run 2's unroll measurements (2x H200, records/gpu/h200x2-run2-unroll) read as
calibration reads its unroll sweep (design note 95): the fused AllReduce's rows at unroll 1
and 2 fitted to an unroll curve (`cost_model.calibration.fit_fused_unrolls`) on a profile's
fixed cost, then the fused Adam schedules of the same run predicted with that curve (the
simulator, as wbtorch's choice asks it) beside what was measured.

    python benchmarks/unroll_run2.py [PROFILE]

(PROFILE default records/calibration/h200x2/profile.json.) No GPU needed.
"""

from __future__ import annotations

import csv
import dataclasses
import sys
from pathlib import Path

from cost_model.calibration import fit_fused_unrolls
from cost_model.hardware import load_hardware
from simulator import simulate
from workbench.interpreter import bind_sizes
from workbench.loader import load
from workbench.options import CodegenOptions

ROOT = Path(__file__).resolve().parents[1]
RUN2 = ROOT / "records/gpu/h200x2-run2-unroll"
PROFILE = ROOT / "records/calibration/h200x2/profile.json"


def rows(name: str, unroll: int, schedule: str) -> list[dict]:
    """The CSV rows of one run-2 file whose schedule is `schedule`."""
    with open(RUN2 / f"{name}-u{unroll}.csv") as f:
        return [r for r in csv.DictReader(f) if r["schedule"] == schedule]


def allreduce_rows() -> list[tuple[int, int, float]]:
    """(nbytes, unroll, seconds) of the fused AllReduce (f32) at unroll 1 and 2."""
    return [(4 * int(r["sizes"].removeprefix("N=")), u, float(r["time_ms"]) * 1e-3)
            for u in (1, 2) for r in rows("allreduce", u, "fused")]


def main(profile: str = str(PROFILE)) -> None:
    cluster = load_hardware(profile)
    P = 2
    measured = allreduce_rows()
    curve = fit_fused_unrolls(measured, P, cluster)
    print(f"profile {profile}")
    print("fused AllReduce rows (nbytes, unroll, ms): "
          + ", ".join(f"({n}, {u}, {t * 1e3:.4f})" for n, u, t in measured))
    print("unroll curve: " + ", ".join(f"{u}: {f:.4f}" for u, f in curve))
    curved = dataclasses.replace(cluster, fused_unroll_bandwidth=tuple(
        (str(u), round(f, 4)) for u, f in curve))
    print(f"{'program':<22} {'unroll':>6} {'simulated ms':>13} {'measured ms':>12}")
    for spec in ("studies/adam.py", "studies/adam.py:mixed"):
        loaded = load(str(ROOT / spec))
        program = loaded.schedules["fuse-rs-c-ag"].apply()
        for u in (1, 2):
            (row,) = [r for r in rows("adam", u, "fuse-rs-c-ag") if r["spec"] == spec]
            N = int(row["sizes"].removeprefix("N="))
            bound = bind_sizes(program, {"N": N, "P": P})
            t = simulate(program, curved, bound, record=False,
                         options=CodegenOptions(unroll=u)).time_s
            print(f"{spec:<22} {u:>6} {t * 1e3:>13.4f} {float(row['time_ms']):>12.4f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
