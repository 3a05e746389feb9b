"""Time of the GPU check's float64 reference with error bounds (`checks.reference`) of a
shipped study (default LAMB, whose global norms keep it from a sampled check) in the same run,
median and range of 3, three ways: one pass over whole arrays, every rank its own; the
elementwise statements in row blocks on threads (`bounds.BLOCK_ELEMENTS`), every rank its
own; and row blocks with the ranks that do the same work sharing it (`bounds._same_work`:
an unscheduled optimizer's update on an AllReduce's result runs once, not P times).

    python benchmarks/reference_speed.py [LOG2_N] [P] [STUDY] [blocks]
        (default 24 1 studies/lamb.py: N = 2^24, P = 1; `blocks`: the two row-block ways only)
"""

import os
import statistics
import sys
import time

from workbench.interpreter import bounds
from workbench.loader import load
from workbench.runtime import checks


def main() -> None:
    n = 2 ** int(sys.argv[1]) if len(sys.argv) > 1 else 2**24
    P = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    spec = sys.argv[3] if len(sys.argv) > 3 else "studies/lamb.py"
    program = load(spec).program
    sizes = {"N": n, "P": P}
    inputs = checks.make_inputs(program, sizes, 0)
    print(f"{spec}, N = 2^{n.bit_length() - 1}, P = {P}, {os.cpu_count()} CPUs")
    blocked, shared = bounds.BLOCK_ELEMENTS, bounds._same_work

    def own(b, op, t, P):
        return list(range(P))

    ways = [("whole arrays, per rank", 1 << 62, own), ("row blocks, per rank", blocked, own),
            ("row blocks, shared work", blocked, shared)]
    for label, block, work in ways[1:] if sys.argv[4:5] == ["blocks"] else ways:
        bounds.BLOCK_ELEMENTS, bounds._same_work = block, work
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            checks.reference(program, inputs, sizes, P)
            times.append(time.perf_counter() - t0)
        print(f"  {label:24} median {statistics.median(times):7.2f} s  "
              f"(range {min(times):.2f}-{max(times):.2f})")
    bounds.BLOCK_ELEMENTS, bounds._same_work = blocked, shared


if __name__ == "__main__":
    main()
