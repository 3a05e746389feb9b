"""The timing both link probes use (link_probe.py, link_probe_peers.py): wall clock over
`reps` back-to-back rounds between device synchronizations, the median of `batches` batches."""

import statistics
import time


def seconds_per_round(issues, sync, reps: int, batches: int) -> float:
    """Seconds per round of `issues` (callables, each issuing its work on its device); two
    warm-up rounds first; `sync` waits for every device."""
    for _ in range(2):
        for f in issues:
            f()
    sync()
    per = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(reps):
            for f in issues:
                f()
        sync()
        per.append((time.perf_counter() - t0) / reps)
    return statistics.median(per)
