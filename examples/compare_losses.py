"""Compare the per-step losses of train_gpt.py runs (JSON from --out) against torch's own
run-to-run noise (design note 64).

    python examples/compare_losses.py torch.json workbench.json --noise torch_b.json

REF (torch.json) and NOISE (torch_b.json) are two torch runs that differ only in something
that must not matter (DDP's bucket size: the order of the reductions, and under torch.compile
the graph splits; or a rerun: atomics in backward kernels are not deterministic). Their
difference at each step is torch's noise; the envelope at step i is

    tol_i = atol + rtol |ref_i| + factor * max_{j <= i + look} |ref_j - noise_j|

the largest difference torch showed with itself up to a little after that step (`look`, a
tenth of the run: two runs drift apart like a random walk, and one pair is one sample of it),
times `factor` (3), over a floor for fp32 rounding where torch agreed with itself exactly.
The run under test is a MATCH when |ref_i - run_i| <= tol_i at every step; MISMATCH names the
steps outside. Several --noise runs widen the envelope to the largest of their differences.
On synthetic random-walk runs (tests/wbtorch/test_train_gpt_cpu.py) a run drawn like the noise
run is called MISMATCH about 1 time in 8, and an offset of 0.1 nat is always caught.

Without --noise the envelope is the fixed atol + rtol |ref| alone (the check before torch's
noise was measured; rtol 1e-3, atol 1e-4 unless given). Exit 1 on MISMATCH.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

FLOOR_RTOL, FLOOR_ATOL = 1e-5, 1e-6  # fp32 rounding of a loss of a few nats, with margin
FACTOR = 3.0


def envelope(ref: list[float], noise: list[list[float]], factor: float = FACTOR,
             rtol: float = FLOOR_RTOL, atol: float = FLOOR_ATOL,
             look: int | None = None) -> list[float]:
    """Per-step tolerance around `ref` from torch's own noise (the module docstring's tol_i):
    `noise` are other torch runs of the same length; `look` defaults to a tenth of the run."""
    for n in noise:
        if len(n) != len(ref):
            raise ValueError(f"noise runs must have as many steps as the reference, got "
                             f"{len(n)} and {len(ref)}; run them with the same --steps")
    look = len(ref) // 10 if look is None else look
    diff = [max(abs(r - n[i]) for n in noise) for i, r in enumerate(ref)]
    out, seen = [], 0.0
    for i, r in enumerate(ref):
        seen = max(seen, *diff[i:i + look + 1])
        out.append(atol + rtol * abs(r) + factor * seen)
    return out


def outside(ref: list[float], run: list[float], tol: list[float]) -> list[int]:
    """The steps where `run` is farther from `ref` than the tolerance."""
    return [i for i, (r, x, t) in enumerate(zip(ref, run, tol)) if not abs(r - x) <= t]


def check(ref: list[float], run: list[float], tol: list[float], what: str) -> tuple[bool, str]:
    """(ok, summary) of `run` against `ref` within `tol` per step; `what` names the envelope."""
    if len(ref) != len(run):
        return False, (f"runs must have the same number of steps, got {len(ref)} and "
                       f"{len(run)}; run them with the same --steps")
    diffs = [abs(a - b) for a, b in zip(ref, run)]
    at = max(range(len(diffs)), key=diffs.__getitem__)
    head = (f"{len(ref)} steps: max |diff| {diffs[at]:.3g} at step {at} (tolerance there "
            f"{tol[at]:.3g}, {what}); first {ref[0]:.4f} / {run[0]:.4f}, last {ref[-1]:.4f} / "
            f"{run[-1]:.4f}")
    bad = outside(ref, run, tol)
    if not bad:
        return True, head + "; every step within it"
    named = ", ".join(f"{i} (|diff| {diffs[i]:.3g} > {tol[i]:.3g})" for i in bad[:10])
    more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
    return False, head + f"; {len(bad)} steps outside it: {named}{more}"


def compare(a: list[float], b: list[float], rtol: float, atol: float) -> tuple[bool, str]:
    """(ok, summary) of two loss curves within the fixed atol + rtol |a| per step."""
    return check(a, b, [atol + rtol * abs(x) for x in a], f"fixed {atol} + {rtol} x |loss|")


def compare_with_noise(ref: list[float], run: list[float], noise: list[list[float]],
                       factor: float = FACTOR) -> tuple[bool, str]:
    """(ok, summary) of `run` against `ref` inside torch's noise envelope."""
    tol = envelope(ref, noise, factor)
    widest = max(max(abs(r - n[i]) for n in noise) for i, r in enumerate(ref))
    return check(ref, run, tol, f"{factor:g} x torch's own max |diff| so far (largest "
                                f"{widest:.3g}) + fp32 floor")


def _times(r: dict) -> str:
    ph = r.get("phases_ms")
    if ph:
        return ", ".join(f"{k} {v:.3f}" for k, v in ph.items()) + " ms"
    return f"step {r['step_ms_median']:.3f} ms, optimizer {r['opt_ms_median']:.3f} ms"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ref", help="a torch run (JSON of train_gpt.py --out)")
    ap.add_argument("run", help="the run under test")
    ap.add_argument("--noise", nargs="+", default=[],
                    help="torch runs that differ from REF only in what must not matter")
    ap.add_argument("--factor", type=float, default=FACTOR)
    ap.add_argument("--rtol", type=float, default=1e-3, help="without --noise")
    ap.add_argument("--atol", type=float, default=1e-4, help="without --noise")
    args = ap.parse_args(argv)
    missing = [p for p in (args.ref, args.run, *args.noise) if not Path(p).is_file()]
    if missing:
        print(f"error: loss file {missing[0]} must exist (a JSON of train_gpt.py --out), "
              f"got no such file; run that variant first (`harness.py replay-training` "
              f"names each run's file)", file=sys.stderr)
        return 2
    ref, run = (json.load(open(p)) for p in (args.ref, args.run))
    noise = [json.load(open(p)) for p in args.noise]
    if noise:
        ok, summary = compare_with_noise(ref["losses"], run["losses"],
                                         [n["losses"] for n in noise], args.factor)
    else:
        ok, summary = compare(ref["losses"], run["losses"], args.rtol, args.atol)
    print(("MATCH " if ok else "MISMATCH ") + summary)
    for r in (ref, *noise, run):
        kinds = sorted(set(r["choices"]), key=r["choices"].index)
        chosen = "; ".join(f"{r['choices'].count(c)} x {c}" for c in kinds)
        print(f"  {r.get('variant', r['optimizer'])}: {_times(r)}; {chosen}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
