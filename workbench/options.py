"""How the GPU backend generates and launches a schedule: every codegen knob as one frozen
record (`CodegenOptions`).

Lowering (`codegen.lower.lower`) takes it, the plan carries it (`Plan.options`), the runtime
launches by it, the cost model reads the knobs it prices, and every measured result records it
with the git commit (`workbench.provenance`). It lives in the core so that all of them can read
the one description. The environment is read once, at the edge (the CLI, wbtorch), by
`CodegenOptions.from_env`; nothing below reads it.

Defaults are what the measured runs chose (design notes 11, 42, 44, 55): with them, every
kernel renders as before (the golden CUDA is byte-identical).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from workbench.errors import WorkbenchError

COLLECTIVE_MODES = ("pull", "push")
UNROLLS = (1, 2, 4)
VEC_BYTES = (16, 32)
CACHE_HINTS = ("default", "stream")
ROW_MIN_BLOCKS = (1, 2, 3, 4)
COLLECTIVE_BLOCKS_PER_SM = (1, 2)
ROW_GRIDS = ("resident", "rows")
PIPELINE_COMPUTE_SHARES = (2, 3, 4, 8)

# The knobs an environment variable sets (benchmark scripts time variants this way), by field.
ENVIRONMENT = {
    "row_prefetch": "WB_ROW_PREFETCH",
    "row_min_blocks": "WB_ROW_MIN_BLOCKS",
    "overlap_blocks": "WB_OVERLAP_BLOCKS",
    "collective_blocks_per_sm": "WB_COLLECTIVE_BLOCKS_PER_SM",
    "row_grid": "WB_ROW_GRID",
    "collective_grid": "WB_COLLECTIVE_GRID",
    "pipeline_compute_share": "WB_PIPELINE_COMPUTE_SHARE",
}

# What each knob changes, and whether the cost model prices it (cost_model.ops.fused): a knob
# with no modelled effect says so here and in every result's metadata, rather than pretending.
PRICED = {
    "collective_mode": "priced: push reduce-scatters at the peer store bandwidth (pull at the "
                       "load one) into staging buffers written and read back in HBM; not "
                       "modelled: its phase barrier and register pressure (mixed-precision "
                       "Adam measured push 20 % slower, GPU run 3)",
    "unroll": "priced where the profile has a calibrated unroll curve "
              "(fused_unroll_bandwidth: the fused AllReduce's peer bandwidth at unroll 2 and "
              "4 against 1, design note 95), else no effect; row kernels are generated at 1; "
              "not modelled: register pressure of a kernel with computation (mixed-precision "
              "Adam measured unroll 2 6 % slower, pure AllReduce 0.1-0.7 %, GPU run 2)",
    "vec_bytes": "not priced: bytes per vector access (design note 55: 0-2 % measured)",
    "cache": "not priced: evict-first hint (design note 55: 0-2 % measured)",
    "row_prefetch": "not priced: L2 prefetch of a row kernel's next row",
    "row_min_blocks": "not priced: __launch_bounds__ of row kernels (occupancy)",
    "row_grid": "not priced: a row kernel's grid and block shape (one row a block, threads "
                "by the row's length; design note 91)",
    "collective_blocks_per_sm": "priced where the profile has a calibrated block curve "
                                "(fused_block_bandwidth), else no effect",
    "overlap_blocks": "priced where the profile has a calibrated block curve "
                      "(fused_block_bandwidth): the overlapped consumer's peer bandwidth on "
                      "its grid (codegen.plan.overlap_grid), else no effect",
    "collective_grid": "priced where the profile has a calibrated block curve "
                       "(fused_block_bandwidth), else no effect; simulate-step also runs a "
                       "capped kernel on its blocks' SMs, its computation at their HBM "
                       "rate (design note 99)",
}


PRICED["pipeline_compute_share"] = (
    "priced: a pipelined AllReduce's peer accesses on the moving blocks' share of the SMs "
    "(through a calibrated block curve), its HBM work at the roofline of the computing "
    "blocks' share (cost_model.ops.fused._pipelined_cost)")

# Each knob's values and the fix a refusal names.
CHOICES = {
    "collective_mode": (COLLECTIVE_MODES, "pull is the default (peer loads)"),
    "unroll": (UNROLLS, "1 is the default"),
    "vec_bytes": (VEC_BYTES, "16 is the default"),
    "cache": (CACHE_HINTS, "'default' is plain loads and stores"),
    "row_prefetch": ((False, True), "unset it for no prefetch"),
    "row_min_blocks": (ROW_MIN_BLOCKS, "unset it for the default 2"),
    "row_grid": (ROW_GRIDS, "'resident' is the default (grid-stride over rows)"),
    "collective_blocks_per_sm": (COLLECTIVE_BLOCKS_PER_SM, "more than 2 could leave blocks "
                                 "unscheduled while their peers spin; 2 is the default"),
    "pipeline_compute_share": (PIPELINE_COMPUTE_SHARES, "2 is the default (half the grid "
                               "computes)"),
}
MEANING = {
    "vec_bytes": "bytes per operand a thread moves per vector",
    "cache": "the cache hint of a fused collective's accesses",
    "row_min_blocks": "minimum blocks per SM of a row kernel",
    "row_prefetch": "prefetch each block's next row into L2",
    "row_grid": "a row kernel's shape: resident blocks grid-striding over rows, or one row "
                "a block",
    "collective_blocks_per_sm": "a fused collective's grid per SM",
    "overlap_blocks": "blocks of an overlapped consumer; 0: a quarter of the full grid",
    "collective_grid": "a fused collective's grid in blocks at most; 0: blocks per SM x SMs",
    "pipeline_compute_share": "one block in this many of a pipelined AllReduce computes",
}


def _check(name: str, value, where: str) -> None:
    """Raise unless `value` is one `name` takes; `where` names what set it."""
    what = f" ({MEANING[name]})" if name in MEANING else ""
    if name in ("overlap_blocks", "collective_grid"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise WorkbenchError(f"{where} must be a whole number >= 0{what}, got {value!r}; "
                                 "unset it for the default 0")
        return
    choices, fix = CHOICES[name]
    # bool is an int: keep True out of the integer knobs and 1 out of row_prefetch
    if value not in choices or isinstance(value, bool) != (name == "row_prefetch"):
        shown = "0 or 1" if name == "row_prefetch" else f"one of {choices}"
        raise WorkbenchError(f"{where} must be {shown}{what}, got {value!r}; {fix}")


@dataclass(frozen=True)
class CodegenOptions:
    """Every knob of how a schedule is generated and launched on GPUs.

    collective_mode: how a fused collective reduce-scatters. pull: each rank loads its slice
        from every peer's buffer over NVLink; push: each rank stores every peer's slice into
        that peer's staging buffer, then reduces locally (all NVLink traffic is stores).
    unroll: vectors per thread per loop iteration of a fused collective (1, 2, 4).
    vec_bytes, cache: speed-only knobs of fused collective kernels (codegen.tuning, note 55):
        bytes of the widest operand a thread moves per vector, and the streaming hint.
    row_prefetch: row kernels prefetch each block's next row into L2 (note 44).
    row_min_blocks: __launch_bounds__'s minimum blocks per SM of a row kernel (a fused
        collective's never goes below 2, note 42).
    collective_blocks_per_sm: a fused collective's grid per SM (the launch bound keeps 2).
    row_grid: a row kernel's shape (design note 91). resident: 512-thread blocks, as many as
        stay resident, grid-stride over rows, 32 cached elements a thread. rows: Inductor's
        persistent-reduction shape: one row a block (grid = rows; a fused collective at
        P >= 2 keeps a resident grid, its blocks meet their peers), threads by the row's
        length (16 cached elements a thread, 64-1024 threads), 32 registers a thread.
    overlap_blocks: blocks of an overlapped consumer kernel; 0 is a quarter of the full grid
        (the fastest of the measured sweep, note 11).
    collective_grid: a fused collective's grid in blocks at most (0: collective_blocks_per_sm
        x SMs): a kernel that runs beside other work (wbtorch's optimizer in backward) on a
        few SMs leaves the rest to it, as NCCL's few channels do (design note 94).
    pipeline_compute_share: one block in this many of a pipelined fused AllReduce's grid
        computes the rows, the rest move them (design note 108). A half measured fastest of
        2, 4 and 8 at P = 2 on 2 x H200, T = H = 8192 f16: 0.517, 0.612, 0.954 ms.
    """

    collective_mode: str = "pull"
    unroll: int = 1
    vec_bytes: int = 16
    cache: str = "default"
    row_prefetch: bool = False
    row_min_blocks: int = 2
    collective_blocks_per_sm: int = 2
    overlap_blocks: int = 0
    row_grid: str = "resident"
    collective_grid: int = 0
    pipeline_compute_share: int = 2

    def __post_init__(self):
        for f in dataclasses.fields(self):
            _check(f.name, getattr(self, f.name), f"codegen option {f.name}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **fields) -> CodegenOptions:
        """The options `fields` give, with the environment's WB_* knobs (ENVIRONMENT) read over
        the defaults; called once at the edge (CLI, wbtorch), never deep inside."""
        import os

        env = os.environ if environ is None else environ
        values: dict = {}
        for name, var in ENVIRONMENT.items():
            raw = env.get(var, "").strip()
            if raw:
                values[name] = _parse(name, raw, var)
        return cls(**{**values, **fields})

    def with_settings(self, items) -> CodegenOptions:
        """These options with `NAME=VALUE` items set (the CLI's --codegen)."""
        values = {}
        names = [f.name for f in dataclasses.fields(self)]
        for item in items:
            name, eq, raw = item.partition("=")
            name = name.strip().replace("-", "_")
            if not eq or name not in names:
                raise WorkbenchError(f"--codegen must be NAME=VALUE with NAME one of "
                                     f"{', '.join(names)}, got {item!r}; e.g. --codegen "
                                     "collective_mode=push")
            values[name] = _parse(name, raw.strip(), f"--codegen {name}")
        return dataclasses.replace(self, **values)

    def as_dict(self) -> dict:
        """The knobs by name (JSON-ready)."""
        return dataclasses.asdict(self)

    def metadata(self) -> dict:
        """What a result records: every knob, and what the cost model makes of each (PRICED)."""
        return {"options": self.as_dict(), "priced": dict(PRICED)}

    def changed(self) -> dict:
        """The knobs that differ from the defaults."""
        default = CodegenOptions()
        return {k: v for k, v in self.as_dict().items() if getattr(default, k) != v}


def _parse(name: str, raw: str, where: str):
    """A knob's value from text (an environment variable or a --codegen item), checked."""
    kind = type(getattr(CodegenOptions(), name))
    value: object = raw
    if kind is bool:
        value = {"0": False, "1": True, "false": False, "true": True}.get(raw.lower(), raw)
    elif kind is int and raw.isdigit():
        value = int(raw)
    _check(name, value, where)
    return value
