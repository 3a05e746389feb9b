"""Time of checking one output against the reference: the chunked single pass the GPU checks
use (`workbench.interpreter.relative_error_where`) against the whole-array float64 passes it
replaced (error, then where, as `checks.compare` computed them before), in the same run.

    python benchmarks/check_speed.py [LOG2_N]     (default 26: 2^26 float32 elements)
"""

import statistics
import sys
import time

import numpy as np

from workbench.interpreter import relative_error_where


def whole_array_passes(got: np.ndarray, want: np.ndarray) -> tuple[float, int]:
    """The previous check: masked float64 copies for the error, a second pass for where."""
    a64, b64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    nan_a, nan_b = np.isnan(a64), np.isnan(b64)
    if not np.array_equal(nan_a, nan_b):
        return float("inf"), 0
    ok = ~nan_b
    err = float(np.max(np.abs(a64[ok] - b64[ok]) / np.maximum(np.abs(b64[ok]), 1.0)))
    diff = np.abs(a64 - b64)
    diff = np.where(np.isnan(diff), np.inf, diff) / np.maximum(np.abs(b64), 1.0)
    return err, int(np.argmax(diff))


def median_s(fn, reps: int = 3) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    n = 2 ** int(sys.argv[1]) if len(sys.argv) > 1 else 2**26
    rng = np.random.default_rng(0)
    want = rng.standard_normal(n, dtype=np.float32)
    got = want + np.float32(1e-6) * rng.standard_normal(n, dtype=np.float32)
    assert relative_error_where(got, want) == whole_array_passes(got, want)
    before = median_s(lambda: whole_array_passes(got, want))
    after = median_s(lambda: relative_error_where(got, want))
    print(f"{n} float32 elements: whole-array passes {before:.2f} s, chunked single pass "
          f"{after:.2f} s ({before / after:.1f}x), median of 3")


if __name__ == "__main__":
    main()
