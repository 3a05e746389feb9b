"""The Megatron MLP in f16 (studies/kernel_ops.py:mlp, two MatMuls) on the CPU through the
runtime's check path (workbench.runtime.checks: make_inputs, reference and its problem) at
Megatron's
H and F and a few tokens: with the weights drawn as before (standard normal) the reference
overflows f16 and the check names the statement; with the weights scaled by 1/sqrt(K) (the
inputs compile-and-measure draws now) it stays finite. No GPU needed.

    python benchmarks/mlp_overflow.py --T 64 --H 12288 --F 49152
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from workbench.loader import load
from workbench.runtime import checks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=64)
    ap.add_argument("--H", type=int, default=12288)
    ap.add_argument("--F", type=int, default=49152)
    args = ap.parse_args()
    program = load("studies/kernel_ops.py:mlp").program
    sizes = {"T": args.T, "H": args.H, "F": args.F, "P": 1}
    inputs = checks.make_inputs(program, sizes, seed=0)
    rng = np.random.default_rng(0)
    unscaled = dict(inputs)
    for name in ("w1", "w2"):  # what the inputs were before: standard normal weights
        unscaled[name] = rng.standard_normal(inputs[name].shape, dtype=np.float32).astype(
            inputs[name].dtype)
    for label, data in (("unscaled (before)", unscaled), ("scaled 1/sqrt(K) (now)", inputs)):
        t0 = time.perf_counter()
        ref = checks.reference(program, data, sizes, 1)
        out = ref.values["out"].astype(np.float32)  # exact: beyond f16's range where it overflows
        finite = np.abs(out) <= np.finfo(np.float16).max
        problem = ref.problem
        print(f"{label}: {int((~finite).sum())} of {out.size} outputs not finite, max |out| "
              f"{float(np.abs(out[finite]).max()):.4g}, {time.perf_counter() - t0:.1f} s; "
              f"check: {problem or 'reference finite'}", flush=True)


if __name__ == "__main__":
    main()
