"""Time of the GPU check's float64 reference with error bounds (`checks.reference`) of
LAMB (the shipped study whose global norms keep it from a sampled check), its elementwise
statements in row blocks on threads (`bounds.BLOCK_ELEMENTS`) against one pass over whole
arrays, in the same run: median and range of 3.

    python benchmarks/reference_speed.py [LOG2_N]     (default 24: N = 2^24, P = 1)
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
    program = load("studies/lamb.py").program
    sizes = {"N": n, "P": 1}
    inputs = checks.make_inputs(program, sizes, 0)
    print(f"LAMB, N = 2^{n.bit_length() - 1}, P = 1, {os.cpu_count()} CPUs")
    blocked = bounds.BLOCK_ELEMENTS
    for label, block in (("whole arrays", 1 << 62), ("row blocks on threads", blocked)):
        bounds.BLOCK_ELEMENTS = block
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            checks.reference(program, inputs, sizes, 1)
            times.append(time.perf_counter() - t0)
        print(f"  {label:22} median {statistics.median(times):7.2f} s  "
              f"(range {min(times):.2f}-{max(times):.2f})")
    bounds.BLOCK_ELEMENTS = blocked


if __name__ == "__main__":
    main()
