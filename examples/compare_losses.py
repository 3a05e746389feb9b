"""Compare the per-step losses of two train_gpt.py runs (JSON from --out): they must agree
within |a - b| <= atol + rtol * |a| at every step (fp32: the two optimizers round
differently, and differences grow slowly with training). Exit 1 where they do not.

    python examples/compare_losses.py torch.json workbench.json [--rtol 1e-3 --atol 1e-4]
"""

from __future__ import annotations

import argparse
import json
import sys


def compare(a: list[float], b: list[float], rtol: float, atol: float) -> tuple[bool, str]:
    """(ok, summary) of two loss curves compared step by step."""
    if len(a) != len(b):
        return False, f"runs must have the same number of steps, got {len(a)} and {len(b)}"
    worst, at = 0.0, -1
    bad = []
    for i, (x, y) in enumerate(zip(a, b)):
        d = abs(x - y)
        if d > worst:
            worst, at = d, i
        if not d <= atol + rtol * abs(x):
            bad.append(i)
    head = (f"{len(a)} steps: max |diff| {worst:.3g} at step {at}; tolerance {atol} + {rtol} x "
            f"|loss|; first {a[0]:.4f} / {b[0]:.4f}, last {a[-1]:.4f} / {b[-1]:.4f}")
    if bad:
        return False, head + f"; {len(bad)} steps outside it, first {bad[0]}"
    return True, head + "; every step within it"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    args = ap.parse_args(argv)
    ra, rb = (json.load(open(p)) for p in (args.a, args.b))
    ok, summary = compare(ra["losses"], rb["losses"], args.rtol, args.atol)
    print(("OK " if ok else "MISMATCH ") + summary)
    for r in (ra, rb):
        print(f"  {r['optimizer']}: step {r['step_ms_median']:.3f} ms, optimizer "
              f"{r['opt_ms_median']:.3f} ms, {r['choices']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
