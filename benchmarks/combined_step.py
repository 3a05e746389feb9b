"""The combined step on one cluster laid out as a device mesh (simulator.mesh): the
model-parallel layer (studies/model_parallel.py, T=8192, H=12288, f16) over tp=8 inside each
node, then the Adam step (studies/adam.py, fp32) over dp across nodes on each GPU's shard of
the layer's weight (N = H*H/8), every rank simulated on one shared network. Rows: each phase
alone, the two one after another, and the two at once (the optimizer's collectives beside the
next layer's, meeting on the NVLink), per schedule of each phase.

    python benchmarks/combined_step.py             # dgx-h100, 16 and 128 nodes

Each row also prints its wall time (2-core development machine).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cost_model import load_hardware  # noqa: E402
from simulator.mesh import Mesh, Phase, simulate_mesh  # noqa: E402
from workbench.interpreter import bind_sizes  # noqa: E402
from workbench.loader import load  # noqa: E402

NODES = (16, 128)
LAYER = ("unscheduled", "fuse-ar-c")  # overlap-mm-fuse-ar-c: same tp time in this model
ADAM = ("unscheduled", "rs-c-ag-sliced-state")


def programs(loaded, names):
    for name in names:
        yield name, loaded.program if name == "unscheduled" else loaded.schedules[name].apply()


def main() -> None:
    layer, adam = load(str(ROOT / "studies/model_parallel.py")), load(str(ROOT / "studies/adam.py"))
    print("| GPUs | mesh | layer (tp) | adam (dp) | layer ms | adam ms | one after another ms "
          "| at once ms | wall s |")
    print("|---:|---|---|---|---:|---:|---:|---:|---:|")
    for nodes in NODES:
        cluster = load_hardware("dgx-h100", nodes=nodes)
        mesh = Mesh.parse(f"tp=8,dp={nodes}")
        n = 12288 * 12288 // 8 // nodes * nodes  # a GPU's shard of W, a multiple of dp
        for lname, lprog in programs(layer, LAYER):
            tp = Phase(lprog, "tp", bind_sizes(lprog, {**layer.sizes, "P": 8}))
            for aname, aprog in programs(adam, ADAM):
                dp = Phase(aprog, "dp", bind_sizes(aprog, {"N": n, "P": nodes}))
                t0 = time.perf_counter()
                times = [simulate_mesh(cluster, mesh, phases, concurrent=c, record=False).time_s
                         for phases, c in (([tp], False), ([dp], False), ([tp, dp], False),
                                           ([tp, dp], True))]
                wall = time.perf_counter() - t0
                print(f"| {cluster.world_size} | {mesh} | {lname} | {aname} | "
                      + " | ".join(f"{t * 1e3:.3f}" for t in times) + f" | {wall:.1f} |",
                      flush=True)


if __name__ == "__main__":
    main()
