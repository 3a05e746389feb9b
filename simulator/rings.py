"""When each rank of a collective finishes, from when each arrived and how long each of its
steps takes: the whole group's steps in one computation instead of one SimPy event per rank
and step (design note 30).

Ring (NCCL's ring, and the chain of Broadcast/Reduce): rank r's step k sends to rank r + 1
the data it received from rank r - 1 at step k - 1, so

    T[r][0] = max(s[r], s[r + 1]) + d[r]          (the receiver must be in the kernel too)
    T[r][k] = max(T[r][k - 1], T[r - 1][k - 1]) + d[r]

with s[r] the rank's arrival and d[r] its step time (ranks mod P). With every d equal this is
max(s) + S * d for every rank once S - 1 >= P - 2 (every arrival reaches every rank through
the ring), which all of NCCL's ring collectives satisfy: O(P). Otherwise the recurrence runs
vectorized over the ranks, S numpy passes of P elements.

Tree (NCCL's double binary tree): the reduction goes up to the roots and the result comes
down, so no rank finishes before the last one has arrived and every step runs at the slowest
participating link: T = max(s) + S * max(d) for all ranks (exact when the ranks are equal,
which is all the reduced mode ever sees).
"""

from __future__ import annotations

import numpy as np

# Above this many rank-steps, per-step times are not kept (the timeline gets one row per
# rank and collective instead of one per step).
DETAIL_RANK_STEPS = 4096


def ring_finish(arrive: np.ndarray, step_s: np.ndarray, steps: int,
                keep_steps: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """(finish time per rank, per-step start times [steps, P] or None) of a ring of P =
    len(arrive) ranks running `steps` steps (see the module docstring); step k of rank r
    ends at its start + step_s[r]."""
    P = len(arrive)
    if steps == 0:
        return arrive.copy(), None
    equal = bool(np.all(step_s == step_s[0]))
    if not keep_steps and (P == 1 or (equal and steps - 1 >= P - 2)):
        # the same accumulation as one step after another, ((s + d) + d) + ..., so that
        # the equal-ranks case is the reduced mode's time to the last bit
        t = float(arrive.max())
        d = float(step_s.max())
        for _ in range(steps):
            t += d
        return np.full(P, t), None
    start = np.maximum(arrive, np.roll(arrive, -1))
    starts = [start.copy()] if keep_steps else None
    t = start + step_s
    shifted = np.empty_like(t)
    for _ in range(1, steps):
        shifted[1:] = t[:-1]
        shifted[0] = t[-1]
        np.maximum(t, shifted, out=t)
        if keep_steps:
            starts.append(t.copy())
        t += step_s
    return t, (np.array(starts) if keep_steps else None)


def tree_finish(arrive: np.ndarray, step_s: np.ndarray, steps: int) -> np.ndarray:
    """Finish time per rank of a tree collective of `steps` steps (module docstring)."""
    t = float(arrive.max())
    d = float(step_s.max())
    for _ in range(steps):
        t += d
    return np.full(len(arrive), t)
