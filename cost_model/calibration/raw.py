"""Reading a raw calibration file: what `workbench calibrate` measures, checked, as rows.

The raw file is JSON written by the GPU half (workbench/runtime/calibrate.py,
workbench/runtime/calibrate_worker.py,
which sweeps the sizes and shapes named here). Every section but `device` (and `collectives`
on more than one GPU) is optional: files written before a section existed still read, and a
missing section leaves its profile fields as the base preset has them.
"""

from __future__ import annotations

import json
from pathlib import Path

from cost_model.calibration.nccl import KINDS, Table
from cost_model.hardware import NCCL_DTYPES
from workbench.errors import HardwareError, WorkbenchError
from workbench.files import read_bounded
from workbench.options import UNROLLS
from workbench.schemas import check, integer, number, rows

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
    """Read and check a raw calibration file (JSON, as written by `workbench calibrate`)
    against `raw_schema(gpus)`: every error names the file, the field (row and key) and what
    it must be, never the file's content."""
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
    found = raw.get("gpus") if isinstance(raw, dict) else None
    if isinstance(found, int) and not isinstance(found, bool) and found != gpus:
        raise HardwareError(f"calibration raw file's gpus must equal --gpus, got {found} in "
                            f"{path} with --gpus {gpus}; pass --gpus {found} or measure again "
                            f"with --gpus {gpus}")
    check(raw, raw_schema(gpus), f"calibration raw file {path}", FIX, HardwareError)
    return raw


# The largest number a raw file's measurement may be (bytes, milliseconds, bytes per second):
# 1e308 ms passed and fitted to a profile of absurd times (issue 40).
RAW_MAX = 1e15

POSITIVE = number(f"a positive number (at most {RAW_MAX:g})", exclusiveMinimum=0,
                  maximum=RAW_MAX)
COUNT = integer("a positive integer", minimum=1)


def _row(description: str, **fields) -> dict:
    """A row of measurements: a mapping that must give each of `fields` (name -> schema)."""
    return {"type": "object", "description": description, "required": list(fields),
            "properties": fields}


def _measured(key: str) -> dict:
    """A device section that must hold `key` (copy.Bps, gemm.f16, ...)."""
    return {"type": "object", "description": f"a mapping with {key}", "required": [key]}


def raw_schema(gpus: int) -> dict:
    """The JSON Schema of a raw calibration file measured on `gpus` GPUs: every section but
    `device` (and `collectives` on more than one GPU) is optional (files written before a
    section existed still read); each row's fields are what the fits read."""
    collective_row = _row("a collective row (nbytes and each kind's time in ms)",
                          nbytes=POSITIVE, **{f"{k}_ms": POSITIVE for k in KINDS})
    collective_rows = rows("a non-empty list of collective rows", collective_row, minItems=1)
    at_least_one = [{"anyOf": [{"properties": {k: COUNT}, "required": [k]} for k in keys],
                     "description": f"a row with at least one of {' or '.join(keys)} >= 1"}
                    for keys in (("f32_inputs", "f16_inputs"), ("f32_outputs", "f16_outputs"),
                                 ("f16_inputs", "f16_outputs"))]
    f16_row = _row("a mixed stream row", numel=POSITIVE, ms=POSITIVE,
                   **{k: integer("an integer >= 0", minimum=0) for k in F16_STREAM_KEYS})
    device = {
        "type": "object",
        "description": "the device measurements (copy.Bps, triad.Bps, "
                       "launch.eager_s_per_kernel, gemm.f16)",
        "required": ["copy", "triad", "launch", "gemm"],
        "properties": {
            "copy": _measured("Bps"), "triad": _measured("Bps"),
            "launch": _measured("eager_s_per_kernel"), "gemm": _measured("f16"),
            "streams": rows("a list of k-stream rows", _row(
                "a k-stream row", inputs=COUNT, outputs=COUNT, nbytes=POSITIVE, ms=POSITIVE)),
            # the counts' sums are checked once each count is itself valid (its own message)
            "streams_f16": rows("a list of mixed stream rows",
                                f16_row | {"if": f16_row, "then": {"allOf": at_least_one}}),
        },
        # the mixed rows are fitted against the f32 k-stream rows
        "if": {"properties": {"streams_f16": {"minItems": 1}}, "required": ["streams_f16"]},
        "then": {"required": ["streams"], "properties": {"streams": {
            "minItems": 1, "description": "the f32 k-stream rows that device.streams_f16 is "
                                          "fitted against"}}},
    }
    return {
        "type": "object", "description": "a JSON object of measurements",
        "required": ["gpus", "device", *(["collectives"] if gpus > 1 else [])],
        "properties": {
            "gpus": {"const": gpus, "description": f"the GPU count, --gpus ({gpus})"},
            "device": device,
            # on one GPU there is no collective to time (synthetic_raw writes an empty list)
            "collectives": collective_rows if gpus > 1 else rows("a list of collective rows",
                                                                collective_row),
            "collectives_by_dtype": {
                "type": "object", "additionalProperties": False,
                "description": f"a mapping of a dtype ({', '.join(NCCL_DTYPES)}) to collective "
                               f"rows",
                "properties": {d: collective_rows for d in NCCL_DTYPES}},
            "host_issue": {"type": "object", "additionalProperties": POSITIVE,
                           "description": "a mapping of each NCCL path's call (e.g. "
                                          "torch_allreduce_s) to its host seconds"},
            "p2p": rows("a list of send/recv rows", _row(
                "a send/recv row", nbytes=POSITIVE, sendrecv_ms=POSITIVE)
                | {"properties": {"nbytes": POSITIVE, "sendrecv_ms": POSITIVE,
                                  "nccl4py_sendrecv_ms": POSITIVE}}),
            "fused": rows("a list of fused kernel rows", _row(
                "a fused kernel row", nbytes=POSITIVE, ms=POSITIVE)),
            "copy_engines": rows("a list of copy-engine rows", _row(
                "a copy-engine row (nbytes per peer, peers, ms)", nbytes=POSITIVE, ms=POSITIVE,
                peers={"const": gpus - 1, "description": f"the other GPUs' count ({gpus - 1}), "
                                                         "to fit copy_engine_bandwidth_Bps"})),
            "fused_blocks": rows("a list of block sweep rows", _row(
                "a block sweep row", blocks=COUNT, nbytes=POSITIVE, ms=POSITIVE)),
            "fused_unroll": rows("a list of unroll sweep rows", _row(
                "an unroll sweep row", nbytes=POSITIVE, ms=POSITIVE,
                unroll={"enum": list(UNROLLS),
                        "description": f"one of {', '.join(map(str, UNROLLS))}"})),
        },
    }


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
