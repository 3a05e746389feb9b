"""Reading a raw calibration file: what `workbench calibrate` measures, checked, as rows.

The raw file is JSON written by the GPU half (workbench/runtime/calibrate.py,
workbench/runtime/calibrate_worker.py,
which sweeps the sizes and shapes named here). Every section but `device` (and `collectives`
on more than one GPU) is optional: files written before a section existed still read, and a
missing section leaves its profile fields as the base preset has them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from cost_model.calibration.nccl import KINDS, Table
from cost_model.hardware import NCCL_DTYPES
from workbench.errors import HardwareError, WorkbenchError
from workbench.files import read_bounded
from workbench.options import UNROLLS

FIX = "run `workbench calibrate --gpus P` on the GPU machine to measure it again"


# ---------------------------------------------------------------- what the GPU half sweeps


# (inputs, outputs) of the calibration's k-stream kernels (workbench/runtime/calibrate_worker.py)
STREAM_SHAPES = [(1, 1), (2, 1), (4, 1), (6, 1), (8, 1), (4, 3), (5, 4)]

# The array counts of a mixed f16/f32 stream row (device.streams_f16).
F16_STREAM_KEYS = ("f32_inputs", "f16_inputs", "f32_outputs", "f16_outputs")

# (f32_inputs, f16_inputs, f32_outputs, f16_outputs) of the mixed stream kernels
# (workbench/runtime/calibrate_worker.py), each array of the same element count, shaped like
# the mixed-precision optimizers' kernels: a cast of the f16 gradient, a moment update
# m = b m + (1 - b) g (f16 g), the f16 copy of the weights, the fused mixed Adam (w, m, v, g
# in; w, m, v, w16 out), and two all-f16 kernels.
F16_STREAM_SHAPES = [(0, 1, 1, 0), (1, 1, 1, 0), (1, 0, 0, 1), (3, 1, 3, 1), (0, 2, 0, 1),
                     (0, 1, 0, 1)]

# The bytes per peer of the copy-engine pushes (workbench/runtime/calibrate_worker.py
# `copy_engines`): 256 MiB and 1 GiB, both far beyond a copy's fixed cost, the sizes a fused
# collective moves (2x H200: 0.70 ms at 256 MiB, 2.75 ms at 1 GiB; the section takes 0.4 s).
COPY_ENGINE_NBYTES = [2**28, 2**30]

# The buffer of the fused kernel's block and unroll sweeps (workbench/runtime/calibrate_worker.py):
# 256 MiB.
# On 2x H200 the full grid takes 0.81 ms there, 36x the kernel's fixed cost (22.6 us), so the
# time is bandwidth; fewer blocks only take longer.
FUSED_BLOCKS_NBYTES = 2**28


def fused_block_counts(sm_count: int, full_grid: int) -> list[int]:
    """The grids of the fused kernel's block sweep: sm_count / 32 .. sm_count blocks (one per
    SM, down to a handful), then the runtime's full grid."""
    counts = {max(1, sm_count // d) for d in (32, 16, 8, 4, 2, 1)} | {full_grid}
    return sorted(c for c in counts if c <= full_grid)


# ---------------------------------------------------------------- reading and checking


def read_raw(path: Path, gpus: int) -> dict:
    """Read and check a raw calibration file (JSON, as written by `workbench calibrate`)."""
    path = Path(path)
    if not path.exists():  # a FIFO or a folder: refused by read_bounded, saying what it is
        raise HardwareError(f"calibration raw file must be an existing file, got {path}; {FIX}")
    try:
        # bounded (a raw file is kilobytes), decoded as UTF-8, nested no deeper than JSON's
        # recursion allows: each was a traceback (issue 40); the message quotes no content
        raw = json.loads(read_bounded(path, "calibration raw file", FIX, follow=True)
                         .decode("utf-8"))
    except WorkbenchError as e:
        raise HardwareError(str(e)) from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError
        why = ("bytes that are not UTF-8" if isinstance(e, UnicodeDecodeError) else
               "nesting too deep" if isinstance(e, RecursionError) else
               f"JSONDecodeError at line {e.lineno} column {e.colno}"
               if isinstance(e, json.JSONDecodeError) else type(e).__name__)
        raise HardwareError(f"calibration raw file {path} must be valid JSON, got {why}; "
                            f"{FIX}") from None
    if not isinstance(raw, dict):
        raise HardwareError(f"calibration raw file {path} must hold a JSON object, got "
                            f"{type(raw).__name__}; {FIX}")
    if raw.get("gpus") != gpus:
        raise HardwareError(f"calibration raw file's gpus must equal --gpus, got "
                            f"{raw.get('gpus')!r} in {path} with --gpus {gpus}; pass --gpus "
                            f"{raw.get('gpus')} or measure again with --gpus {gpus}")
    dev = raw.get("device")
    need = {"copy": "Bps", "triad": "Bps", "launch": "eager_s_per_kernel", "gemm": "f16"}
    if not isinstance(dev, dict) or any(not isinstance(dev.get(k), dict) or v not in dev[k]
                                        for k, v in need.items()):
        raise HardwareError(f"calibration raw file {path} must hold device measurements "
                            f"({', '.join(f'{k}.{v}' for k, v in need.items())}), got "
                            f"{sorted(dev) if isinstance(dev, dict) else dev!r}; {FIX}")
    rows = raw.get("collectives")
    if gpus > 1:
        if not isinstance(rows, list) or not rows:
            raise HardwareError(f"calibration raw file {path} must hold collective rows for "
                                f"{gpus} GPUs, got {rows!r}; {FIX}")
        _check_collective_rows(rows, path, "collective rows")
    by_dtype = raw.get("collectives_by_dtype")
    if by_dtype is not None:
        if not isinstance(by_dtype, dict) or any(d not in NCCL_DTYPES for d in by_dtype):
            raise HardwareError(f"calibration raw file {path} collectives_by_dtype must map a "
                                f"dtype ({', '.join(NCCL_DTYPES)}) to collective rows, got "
                                f"{sorted(by_dtype) if isinstance(by_dtype, dict) else by_dtype!r}"
                                f"; {FIX}")
        for dtype, drows in by_dtype.items():
            if not isinstance(drows, list) or not drows:
                raise HardwareError(f"calibration raw file {path} collectives_by_dtype.{dtype} "
                                    f"must be a non-empty list of rows, got {drows!r}; {FIX}")
            _check_collective_rows(drows, path, f"collectives_by_dtype.{dtype} rows")
    _check_rows(dev.get("streams"), path, "device.streams",
                lambda r: all(_count(r.get(k), 1) for k in ("inputs", "outputs"))
                and all(_positive(r.get(k)) for k in ("nbytes", "ms")),
                "inputs and outputs as positive integers and nbytes and ms as positive numbers")
    _check_rows(dev.get("streams_f16"), path, "device.streams_f16", _stream_f16_ok,
                f"{', '.join(F16_STREAM_KEYS)} as non-negative integers (at least one input, "
                f"one output and one f16 array) and numel and ms as positive numbers")
    if dev.get("streams_f16") and not dev.get("streams"):
        raise HardwareError(f"calibration raw file {path} device.streams_f16 needs the f32 "
                            f"k-stream rows device.streams to compare with, got none; {FIX}")
    issue = raw.get("host_issue")
    if issue is not None and (not isinstance(issue, dict)
                              or not all(_positive(v) for v in issue.values())):
        raise HardwareError(f"calibration raw file {path} host_issue must map each NCCL path's "
                            f"call (e.g. torch_allreduce_s, nccl4py_allreduce_s) to its host "
                            f"seconds, positive numbers, got {issue!r}; {FIX}")
    _check_rows(raw.get("p2p"), path, "p2p",
                lambda r: _positive(r.get("nbytes")) and _positive(r.get("sendrecv_ms")),
                "nbytes and sendrecv_ms as positive numbers")
    _check_rows(raw.get("fused"), path, "fused",
                lambda r: _positive(r.get("nbytes")) and _positive(r.get("ms")),
                "nbytes and ms as positive numbers")
    _check_rows(raw.get("copy_engines"), path, "copy_engines",
                lambda r: _count(r.get("peers"), 1) and r["peers"] == gpus - 1
                and _positive(r.get("nbytes")) and _positive(r.get("ms")),
                f"nbytes (bytes per peer) and ms as positive numbers and peers as the other "
                f"GPUs' count ({gpus - 1}), to fit copy_engine_bandwidth_Bps")
    _check_rows(raw.get("fused_blocks"), path, "fused_blocks",
                lambda r: _count(r.get("blocks"), 1) and _positive(r.get("nbytes"))
                and _positive(r.get("ms")),
                "blocks as a positive integer and nbytes and ms as positive numbers")
    _check_rows(raw.get("fused_unroll"), path, "fused_unroll",
                lambda r: _count(r.get("unroll"), 1) and r["unroll"] in UNROLLS
                and _positive(r.get("nbytes")) and _positive(r.get("ms")),
                f"unroll as one of {', '.join(map(str, UNROLLS))} and nbytes and ms as "
                f"positive numbers")
    return raw


# The largest number a raw file's measurement may be (bytes, milliseconds, bytes per second):
# 1e308 ms passed and fitted to a profile of absurd times (issue 40). "Positive numbers" in
# the messages below are numbers > 0 and at most this.
RAW_MAX = 1e15


def _positive(x) -> bool:
    return (isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x <= RAW_MAX
            and math.isfinite(x))


def _count(x, least: int = 0) -> bool:
    """An integer (not a bool) of at least `least`."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= least


def _check_collective_rows(rows: list, path: Path, where: str) -> None:
    """Each row must give nbytes and every kind's time as positive numbers."""
    for row in rows:
        if not isinstance(row, dict) or any(not _positive(row.get(f"{k}_ms"))
                                            for k in KINDS) or not _positive(row.get("nbytes")):
            times = ", ".join(f"{k}_ms" for k in KINDS)
            raise HardwareError(f"calibration raw file {path} {where} must give nbytes and "
                                f"{times} as positive numbers (at most {RAW_MAX:g}), got "
                                f"{row!r:.200}; {FIX}")


def _stream_f16_ok(row: dict) -> bool:
    """A device.streams_f16 row: non-negative array counts with at least one input, one
    output and one f16 array; positive numel and ms."""
    return all(_count(row.get(k)) for k in F16_STREAM_KEYS) \
        and all(_positive(row.get(k)) for k in ("numel", "ms")) \
        and row["f32_inputs"] + row["f16_inputs"] >= 1 \
        and row["f32_outputs"] + row["f16_outputs"] >= 1 \
        and row["f16_inputs"] + row["f16_outputs"] >= 1


def _check_rows(rows, path: Path, where: str, row_ok, what: str) -> None:
    """An optional section of rows (None: absent, as in raw files older than it): a list of
    mappings that `row_ok` accepts, else an error naming the section and what a row gives."""
    if rows is None:
        return
    if not isinstance(rows, list):
        raise HardwareError(f"calibration raw file {path} {where} must be a list of rows, got "
                            f"{rows!r}; {FIX}")
    for row in rows:
        if not isinstance(row, dict) or not row_ok(row):
            raise HardwareError(f"calibration raw file {path} {where} rows must give {what}, "
                                f"got {row!r}; {FIX}")


# ---------------------------------------------------------------- the rows the fits read


# A collective's time cannot fall as its buffer grows: a point slower than this factor times a
# larger size's time of the same kind is a disturbed measurement (calibration h200x2: a
# ReduceScatter of 1 MiB took 53 us between 30 us at 512 KiB and 32 us at 2 MiB). The fit
# minimises the worst error, so one such point would set it; it is left out and reported.
OUTLIER_FACTOR = 1.2


def collective_rows(raw: dict, dtype: str = "f32") -> list[dict]:
    """The raw file's collective rows of one dtype (f32: `collectives`, f16 and bf16:
    `collectives_by_dtype`; none where that dtype was not measured)."""
    if dtype == "f32":
        return raw.get("collectives", []) or []
    return (raw.get("collectives_by_dtype") or {}).get(dtype, [])


def nccl_table(raw: dict, dtype: str = "f32") -> Table:
    """The raw file's collective rows of `dtype` as a fit Table (seconds), outliers left
    out."""
    table = [(int(r["nbytes"]), {k: float(r[f"{k}_ms"]) * 1e-3 for k in KINDS})
             for r in sorted(collective_rows(raw, dtype), key=lambda r: r["nbytes"])]
    out = []
    for i, (n, row) in enumerate(table):
        kept = {k: t for k, t in row.items()
                if all(t <= OUTLIER_FACTOR * later[k] for _, later in table[i + 1:])}
        out.append((n, kept))
    return out


def nccl_outliers(raw: dict, dtype: str = "f32") -> list[tuple[int, str]]:
    """(nbytes, kind) of the measured points of `dtype` that `nccl_table` leaves out."""
    kept = dict(nccl_table(raw, dtype))
    return [(int(r["nbytes"]), k) for r in collective_rows(raw, dtype) for k in KINDS
            if k not in kept[int(r["nbytes"])]]


def p2p_rows(raw: dict) -> tuple[list[tuple[int, float]], str]:
    """The send/recv rows (nbytes, seconds) the fit uses and the path they were timed on:
    nccl4py's (the runtime's Sends) where every row has them, else torch.distributed's."""
    rows = raw.get("p2p", []) or []
    if rows and all("nccl4py_sendrecv_ms" in r for r in rows):
        return [(int(r["nbytes"]), float(r["nccl4py_sendrecv_ms"]) * 1e-3) for r in rows], \
            "nccl4py"
    return [(int(r["nbytes"]), float(r["sendrecv_ms"]) * 1e-3) for r in rows], \
        "torch.distributed" if rows else ""


def copy_engine_rows(raw: dict) -> list[tuple[int, int, float]]:
    """The copy-engine rows (nbytes per peer, peers, seconds) of a raw file (none where it
    has no `copy_engines` section)."""
    return [(int(r["nbytes"]), int(r["peers"]), float(r["ms"]) * 1e-3)
            for r in raw.get("copy_engines", []) or []]
