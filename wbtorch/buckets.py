"""Gradient buckets and state slices, without torch (design note 51): which parameters share
a bucket, where each lives in the bucket's flat buffer, how a bucket is padded so that it
divides by the group size, and which part of a bucket a rank keeps when a schedule keeps the
optimizer state sliced. CI (no torch, no GPU) tests all of it.

A bucket is what one generated kernel (or one NCCL call + torch step) updates: DDP flattens
gradients into buckets of about 25 MiB in reverse registration order, so that the buckets of
the last layers are ready first in backward; this does the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.errors import WorkbenchError

# Elements a bucket is padded to a multiple of, per rank: a generated kernel reads 4 fp32 (or
# 8 fp16) elements per thread and a rank's slice must start on a 16-byte boundary.
ALIGN_ELEMS = 8
DEFAULT_BUCKET_BYTES = 25 * 2**20  # DDP's default bucket_cap_mb


class BucketError(WorkbenchError):
    """Parameters, buckets or optimizer state that the data-parallel optimizer cannot take."""


@dataclass(frozen=True, slots=True)
class Slot:
    """One parameter's place in its bucket: `numel` elements at `offset` of the flat buffer."""

    index: int  # the parameter's position in the list the optimizer was given
    name: str
    offset: int
    numel: int
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Bucket:
    """Parameters flattened into one buffer of `numel` elements (`used` of them hold
    parameters; the rest is padding so that `numel` divides by P * ALIGN_ELEMS)."""

    index: int
    slots: tuple[Slot, ...]
    used: int
    numel: int
    dtype: str

    @property
    def padding(self) -> int:
        return self.numel - self.used

    def rank_range(self, rank: int, P: int) -> tuple[int, int]:
        """The [start, end) elements of the bucket that rank `rank` of P keeps when state is
        sliced (Sliced(0) over the group: contiguous, equal parts)."""
        return rank_range(self.numel, rank, P)


def rank_range(numel: int, rank: int, P: int) -> tuple[int, int]:
    """[start, end) of rank `rank`'s equal part of `numel` elements split P ways."""
    if P < 1 or not 0 <= rank < P:
        raise BucketError(f"a rank must be in 0..P-1 for P >= 1, got rank {rank} of P = {P}")
    if numel % P:
        raise BucketError(f"a bucket of {numel} elements must divide by P = {P} to be sliced, "
                          f"got a remainder of {numel % P}; pad it (plan_buckets does)")
    k = numel // P
    return rank * k, (rank + 1) * k


def padded(numel: int, P: int, align: int = ALIGN_ELEMS) -> int:
    """`numel` rounded up to a multiple of P * align (every rank's slice aligned)."""
    unit = P * align
    return -(-numel // unit) * unit


def plan_buckets(params: list[tuple[str, tuple[int, ...], str]], P: int,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, itemsize: int = 4,
                 alone_bytes: int | None = None) -> list[Bucket]:
    """Buckets for parameters given as (name, shape, dtype) in registration order: filled in
    reverse order (the last layers' gradients are ready first) up to `bucket_bytes` each, one
    dtype per bucket; a parameter larger than the cap gets a bucket of its own, and so does
    one of at least `alone_bytes` (None: no such rule; the optimizer sets it at P = 1, where
    a bucket of one parameter reads torch's gradient tensor in place: design note 82). Each
    bucket is padded to a multiple of P * ALIGN_ELEMS elements (a generated schedule's N must
    divide by P); the padding is never read as a parameter, and stays zero in the gradient."""
    if P < 1:
        raise BucketError(f"the group size P must be at least 1, got {P}")
    if bucket_bytes < itemsize:
        raise BucketError(f"bucket_bytes must hold at least one element, got {bucket_bytes}")
    if not params:
        raise BucketError("the optimizer must be given at least one parameter, got none; pass "
                          "model.parameters() of a model with trainable parameters")
    cap = max(1, bucket_bytes // itemsize)
    alone = cap + 1 if alone_bytes is None else max(1, alone_bytes // itemsize)
    buckets: list[Bucket] = []
    current: list[Slot] = []
    used, dtype = 0, None

    def close():
        nonlocal current, used, dtype
        if current:
            buckets.append(Bucket(len(buckets), tuple(current), used, padded(used, P), dtype))
        current, used, dtype = [], 0, None

    def shape_of(shape):
        return tuple(int(s) for s in shape)

    for index in reversed(range(len(params))):
        name, shape, dt = params[index]
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if numel == 0:
            continue
        if numel >= alone:
            # its own bucket, numbered now; the small parameters around it keep filling the
            # open bucket, which is numbered when it closes (buckets launch in number order,
            # so a bucket's number follows the readiness of its last parameter)
            buckets.append(Bucket(len(buckets), (Slot(index, name, 0, numel, shape_of(shape)),),
                                  numel, padded(numel, P), dt))
            continue
        if current and (dt != dtype or used + numel > cap):
            close()
        current.append(Slot(index, name, used, numel, shape_of(shape)))
        used += numel
        dtype = dt
    close()
    return buckets


def describe(buckets: list[Bucket]) -> str:
    """One line per bucket: its parameters, elements and padding (logged by the optimizer)."""
    lines = []
    for b in buckets:
        pad = f", padded by {b.padding}" if b.padding else ""
        lines.append(f"bucket {b.index}: {len(b.slots)} parameters, {b.used} elements "
                     f"({b.dtype}){pad} -> N = {b.numel}")
    return "\n".join(lines)


def slice_state(full: np.ndarray, bucket: Bucket, rank: int, P: int) -> np.ndarray:
    """This rank's part of a whole bucket-shaped state array (load_state_dict of a state
    saved whole, into a schedule that keeps it sliced)."""
    full = np.asarray(full).reshape(-1)
    if full.size != bucket.numel:
        raise BucketError(f"state of bucket {bucket.index} must have {bucket.numel} elements, "
                          f"got {full.size}; load a state_dict saved with the same parameters "
                          "and bucket size")
    a, b = bucket.rank_range(rank, P)
    return full[a:b]


def join_state(parts: list[np.ndarray], bucket: Bucket) -> np.ndarray:
    """The whole bucket-shaped state from every rank's slice, in rank order."""
    P = len(parts)
    whole = np.concatenate([np.asarray(p).reshape(-1) for p in parts])
    if whole.size != bucket.numel:
        raise BucketError(f"the {P} slices of bucket {bucket.index} must hold {bucket.numel} "
                          f"elements together, got {whole.size}; every rank must pass its slice")
    return whole


def param_state(whole: np.ndarray, bucket: Bucket) -> dict[int, np.ndarray]:
    """A bucket-shaped state array as per-parameter arrays (keyed by parameter index, shaped
    like the parameter): the form torch.optim's state_dict uses."""
    whole = np.asarray(whole).reshape(-1)
    return {s.index: whole[s.offset:s.offset + s.numel].reshape(s.shape) for s in bucket.slots}


def bucket_state(per_param: dict[int, np.ndarray], bucket: Bucket, dtype=np.float32) -> np.ndarray:
    """Per-parameter state arrays (keyed by parameter index) -> one bucket-shaped array
    (padding zero)."""
    out = np.zeros(bucket.numel, dtype=dtype)
    for s in bucket.slots:
        if s.index not in per_param:
            raise BucketError(f"state of parameter {s.index} ({s.name}) must be in the "
                              f"state_dict, got none; save it from an optimizer over the same "
                              "parameters")
        arr = np.asarray(per_param[s.index]).reshape(-1)
        if arr.size != s.numel:
            raise BucketError(f"state of parameter {s.index} ({s.name}) must have {s.numel} "
                              f"elements, got {arr.size}; the model's shapes changed since save")
        out[s.offset:s.offset + s.numel] = arr
    return out
