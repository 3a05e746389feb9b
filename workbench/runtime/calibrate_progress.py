"""A calibration rank's progress line: the launcher ends a rank that stays silent too long, so
every measurement says where it is.
"""

from __future__ import annotations


def log(rank: int, msg: str) -> None:
    """A progress line (the launcher ends a rank that stays silent too long)."""
    print(f"[calibrate rank {rank}] {msg}", flush=True)

