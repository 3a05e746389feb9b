"""Kernel specifications: what a template needs, as frozen dataclasses of plain strings and
ints (sympy already lowered to C text), and the deterministic kernel name mangle.

A KernelSpec says, for one generated kernel, which pointers it takes, how each operand is read
(a contiguous vector, a gathered broadcast, a scalar, or a reduction over the peers' copies),
which statements it computes (C expressions over f32 registers) and where each result is
stored (locally, or into every peer's buffer for a fused AllGather).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields, replace

# Threads per block of every generated kernel; fused collectives also bound registers with
# __launch_bounds__(THREADS, 2) so that 2 blocks per SM are co-resident (see runtime grid).
THREADS = 512


@dataclass(frozen=True, slots=True)
class Param:
    """One kernel parameter. kind: buf (a local buffer), peer (rank `index`'s copy of a
    peer-mapped buffer), size (a size symbol), rank, flags (rank `index`'s flag array),
    epoch (launch counter of fused collectives)."""

    name: str
    c_decl: str
    kind: str
    ref: str = ""
    index: int = 0


@dataclass(frozen=True, slots=True)
class Load:
    """How the kernel reads one operand into the f32 register `var`.

    mode: contig (ptr + offset + i, vectorizable), gather (ptr + index(i), for broadcasts),
    scalar (ptr[offset], once per thread), rowvec (ptr + offset + c: an operand broadcast
    along the rows of a row kernel, read at column c), reduce (sum over rank k's contribution at
    peers[k] + i, in rank order: the reduce-scatter of a fused collective; `peers` holds the P
    C address expressions, offsets included), hoisted (`expr`, a C expression of scalars
    only, computed once per thread before the loop instead of once per element).
    """

    var: str
    c_type: str
    mode: str
    ptr: str
    offset: str = "0LL"
    index: str = ""
    peers: tuple[str, ...] = ()
    reduce: str = "add"
    expr: str = ""


@dataclass(frozen=True, slots=True)
class Assign:
    """`var = round_to<c_type>(expr)`: one statement's value in f32 registers. In `expr`,
    tensor registers appear as `NAME[j]` (j = vector lane) and scalars as plain names."""

    var: str
    c_type: str
    expr: str


@dataclass(frozen=True, slots=True)
class Store:
    """Store register `var` as c_type at ptr + offset + i; with `peers`, into every rank's
    copy (a fused AllGather), skipping this rank's own copy when `skip_self` (it is already
    stored there by the statement that computed it)."""

    var: str
    c_type: str
    ptr: str = ""
    offset: str = "0LL"
    peers: tuple[str, ...] = ()
    skip_self: bool = False
    # An AllToAll by peer stores (design note 79): element e of block s goes to rank s's copy
    # `peers[s]` at rank * block + e - s * block; `block` is the C text of the block's
    # elements ("" for every other store).
    block: str = ""

    def __repr__(self) -> str:
        # Without a block a store prints as before the field existed (kernel names unchanged).
        base = (f"Store(var={self.var!r}, c_type={self.c_type!r}, ptr={self.ptr!r}, "
                f"offset={self.offset!r}, peers={self.peers!r}, skip_self={self.skip_self!r}")
        return base + (")" if not self.block else f", block={self.block!r})")


@dataclass(frozen=True, slots=True)
class Push:
    """Phase one of a push-mode fused collective: for every other rank q, copy this rank's
    elements q*extent + i of `src` into q's staging buffer `peers[q]` at rank*extent + i (peer
    stores only; the owner then reduces from its local staging buffer)."""

    c_type: str
    src: str
    peers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ComputedPush:
    """Phase one of a FusedReduceScatter with computation before it (design note 78): for
    every rank q, this one included, this rank computes its contribution to q's slice from its
    own memory (`loads` at ptr + offset + q * n + i, then `assigns`), stores the values the
    program needs in memory back locally (`stores`, same index), and stores register `var` as
    c_type into q's staging buffer `peers[q]` at rank * n + i (peer stores of the computed
    value, in its own dtype: a bf16 cast crosses the links as bf16)."""

    c_type: str
    var: str
    peers: tuple[str, ...]
    loads: tuple[Load, ...]
    assigns: tuple[Assign, ...]
    stores: tuple[Store, ...]


@dataclass(frozen=True, slots=True)
class NormAcc:
    """A sum of squares (the first half of an L2 norm) that a kernel accumulates in f64.

    In a streaming kernel: every thread sums `var[j]^2` over the elements it computes, the
    block's total goes to `partials[0][blockIdx.x]`, and block 0 zeroes entries gridDim.x ..
    count-1 (so the finishing kernel always sums exactly `count` entries). In a finishing kernel
    (kind "finish"): `partials` holds one pointer per contributing rank, summed in rank order,
    and `out[0] = sqrt(total)` as f32.
    """

    var: str
    partials: tuple[str, ...]
    count: int
    out: str = ""
    # What is accumulated: "norm" (sum of squares, then sqrt), or a ReduceTensor's "sum",
    # "prod", "max" or "min" of the values (finished without sqrt).
    op: str = "norm"

    def __repr__(self) -> str:
        # A norm prints as before the field existed, so kernels with norms keep their names.
        base = (f"NormAcc(var={self.var!r}, partials={self.partials!r}, count={self.count!r}, "
                f"out={self.out!r}")
        return base + (")" if self.op == "norm" else f", op={self.op!r})")


@dataclass(frozen=True, slots=True)
class RowReduction:
    """An axis reduction in a row kernel: each thread combines `expr` (C text over the pass's
    registers, f32) of its columns into an f64 accumulator, the block combines those
    (wb_rows.cuh), and `var[0]` holds the row's result rounded to `c_type`, the same in every
    thread; stored at ptr[offset + row] when the program needs it in memory."""

    var: str
    kind: str  # "sum", "max", "min", "mean" or "norm" (ir.AXIS_REDUCTIONS)
    c_type: str
    expr: str
    ptr: str = ""
    offset: str = "0LL"


# Fields of the row records added after kernels were named by their specs: left out of the
# repr (so of KernelSpec.key and the kernel's name) at their defaults, so that kernels that do
# not use them keep their names and compiled cubins.
_ROW_KNOBS = {"depth": 1, "groups": False, "cache_in": "registers", "grid_per_sm": 0,
              "grid": "resident", "ready_peers": (), "ready_local": "", "compute_share": 0}
# The most threads a block of a row kernel in the "rows" form has (its __launch_bounds__): the
# runtime launches as many as hold the row at `cache` elements a thread (design note 91).
ROWS_MAX_THREADS = 1024
# Elements a thread of a "rows" row kernel keeps of each cached value (codegen.lower_rows.
# rows_form): 1024 threads x 16 hold rows of up to 16384 elements, as the resident form's 512 x
# 32 do, in half the registers a thread.
ROWS_CACHE = 16


def _row_repr(obj) -> str:
    shown = [f"{f.name}={getattr(obj, f.name)!r}" for f in fields(obj)
             if not (f.name in _ROW_KNOBS and getattr(obj, f.name) == _ROW_KNOBS[f.name])]
    return f"{type(obj).__qualname__}({', '.join(shown)})"


@dataclass(frozen=True, slots=True, repr=False)
class RowPass:
    """One sweep of a row kernel over the columns of a row: the statements that need no
    reduction finished later than the previous sweep. `cached_in` registers are restored from
    the row cache (computed in an earlier sweep), `cached_out` saved into it (read later)."""

    loads: tuple[Load, ...]
    assigns: tuple[Assign, ...]
    reductions: tuple[RowReduction, ...]
    stores: tuple[Store, ...]
    cached_in: tuple[str, ...] = ()
    cached_out: tuple[str, ...] = ()
    # The C element type of each cached_out register (its values are rounded to it): 16-bit
    # types are kept two per 32-bit register (wb::RowCache).
    cached_types: tuple[str, ...] = ()
    # Column steps of the row cache whose loads a thread issues together before computing
    # any of them, on the 16-byte vector path (codegen.lower_rows.load_depth; 1: one step at
    # a time, its loads inside its bounds check).
    depth: int = 1

    __repr__ = _row_repr


@dataclass(frozen=True, slots=True, repr=False)
class RowPlan:
    """A row kernel (codegen.lower_rows): blocks take whole rows of `cols` elements (grid-
    stride over the `rows` of this rank), and run the passes in order on each row. `cache`:
    elements per thread of each cached register row (0: nothing is cached, any row length)."""

    rows: str
    cols: str
    passes: tuple[RowPass, ...]
    cache: int = 0
    # __launch_bounds__'s minimum blocks per SM (codegen.lower_rows.row_min_blocks): 2 caps the
    # registers at 64 so that two 512-thread blocks are resident, one reading while the other
    # reduces or writes (design note 44).
    min_blocks: int = 1
    # Each block asks L2 for its next row's inputs while it computes this one (prefetch; a
    # variant timed by `harness.py replay-rmsnorm`, codegen.lower_rows.row_prefetch).
    prefetch: bool = False
    # Row groups (wb::RowGroup): a block takes several rows at once, each by as few threads
    # as hold it in the row cache (codegen.lower_rows.ROW_GROUPS); off: the whole block.
    groups: bool = False
    # Where the row cache lives: "registers" (wb::RowCache, K a thread) or "shared" (each
    # cached value's row in shared memory at its columns, codegen.lower_rows.ROW_CACHE_SHARED:
    # no registers, so the launch bound keeps 3-4 blocks a SM resident without spills).
    cache_in: str = "registers"
    # A fused collective's grid per SM when its launch bound keeps more blocks resident than
    # the options' collective_blocks_per_sm (every block must be resident: they meet their
    # peers at barriers); 0: the options' (workbench.runtime.executor).
    grid_per_sm: int = 0
    # The kernel's shape (CodegenOptions.row_grid, design note 91): "resident" (THREADS-thread
    # blocks, as many as stay resident, grid-stride over rows) or "rows" (one row a block,
    # grid = rows, threads by the row's length up to ROWS_MAX_THREADS, chosen at launch).
    grid: str = "resident"

    __repr__ = _row_repr

    @property
    def max_threads(self) -> int:
        """Threads a block of this kernel has at most (its __launch_bounds__)."""
        return ROWS_MAX_THREADS if self.grid == "rows" else THREADS


@dataclass(frozen=True, slots=True, repr=False)
class RowAllReduce:
    """The whole AllReduce at the head of a row kernel (a FusedAllreduce `AllReduce C+`,
    codegen.lower_rows; the algorithms: workbench.transforms.ALLREDUCE_ALGORITHMS). Pointer
    fields are kernel parameter names; `n` is the C expression of the elements per rank.

    two-shot: phase one reduces this rank's rows from `src_peers` (+ `src_offset`) and stores
              the sums into `dst_peers`; a barrier; the passes read `local` (the summed rows).
    one-shot: the passes reduce every row from `src_peers` (a "reduce" Load); no extra phase.
    pipelined: two-shot's phase one on the moving blocks, row group by row group, each
              group's arrival flagged into every rank (`ready_peers`: P x `groups` x blocks
              entries); the computing blocks (one in `compute_share` of the grid) spin on
              `ready_local` before each group's rows.
    lamport:  phase one stores `src_local` (encoded, wb_lamport.cuh) into this rank's part of
              every peer's receive buffer (`dst_peers`); the passes spin on `local`'s parts
              (a "lamport" Load); the end re-poisons the receive buffer of two launches ahead.
    """

    algorithm: str
    c_type: str
    n: str
    src_offset: str = "0LL"
    src_peers: tuple[str, ...] = ()
    src_local: str = ""
    dst_peers: tuple[str, ...] = ()
    local: str = ""
    ready_peers: tuple[str, ...] = ()
    ready_local: str = ""
    groups: int = 0  # (0 == False: _ROW_KNOBS leaves these out of names at their defaults)
    compute_share: int = 0  # pipelined: one block in this many computes

    __repr__ = _row_repr


@dataclass(frozen=True, slots=True)
class IndexPlan:
    """An index kernel (codegen.lower_index, design decision 106); pointer fields are kernel
    parameter names, the others C text of this rank's sizes.

    gather: out[t * cols + c] = src[(id - lo) * cols + c] for id = ids[t] when lo <= id <
            lo + held, else 0: a grid-stride loop over rows x cols elements (`lo`: the first
            table row this rank holds, `held`: how many; vocab-parallel: rank * V/P, V/P).
    topk:   a warp per row of `cols` elements: each lane keeps its best k (value, index) in
            registers, then k warp-wide argmax rounds; lane 0 stores the k values or int32
            indices (`part`) at out[row * k].
    """

    op: str  # "gather" or "topk"
    src: str
    src_offset: str
    src_type: str
    dst: str
    dst_offset: str
    dst_type: str
    rows: str
    cols: str
    ids: str = ""
    ids_offset: str = "0LL"
    lo: str = "0LL"
    held: str = ""
    k: int = 0
    part: str = ""


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """Everything a template renders; `name` is the mangle of all other fields."""

    # "elementwise", "collective", "finish" (the cross-rank end of norms), "rows", "gather",
    # "topk" (index kernels)
    kind: str
    template: str
    P: int
    vec: int
    extent: str  # C expression: elements per rank this kernel loops over
    params: tuple[Param, ...]
    loads: tuple[Load, ...]
    assigns: tuple[Assign, ...]
    stores: tuple[Store, ...]
    scalars: tuple[Load, ...] = ()
    needs_dropout: bool = False
    unroll: int = 1  # vectors per thread per loop iteration
    # push mode (Push), or computation before the reduce-scatter (ComputedPush): phase one
    pushes: tuple[Push | ComputedPush, ...] = ()
    elem_bytes: tuple[int, ...] = ()  # element sizes of vector operands (alignment check)
    norms: tuple[NormAcc, ...] = ()  # sums of squares accumulated (or finished) here
    # Launched on one window of its domain at a time (`win_first`, `win_count` parameters):
    # the pieces of a fused collective whose bytes copy engines move.
    window: bool = False
    # A row kernel (axis reductions): its passes over each row; None for streaming kernels.
    row: RowPlan | None = None
    # "stream": vector loads and stores carry the evict-first hint (codegen.tuning; "" none).
    cache_hint: str = ""
    # A row kernel that starts with a whole AllReduce (codegen.lower_rows): its algorithm and
    # pointers; None otherwise.
    allreduce: RowAllReduce | None = None
    # A collective row kernel counts its launches in device memory (this buffer parameter)
    # instead of taking an `epoch` argument, so that a captured CUDA graph replays it
    # correctly (wb_launch.cuh); "" otherwise.
    counter: str = ""
    # A gather or top-k kernel: what it reads and writes (IndexPlan); None otherwise.
    index: IndexPlan | None = None
    comment: str = ""
    name: str = ""

    def key(self) -> str:
        """A canonical text of every field but the name and the comment."""
        # An empty `norms`, a false `window`, no `row`, no `cache_hint`, no `allreduce` and no
        # `counter` are left out, so that kernels without them keep their names.
        parts = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                 if f.name not in ("name", "comment")
                 and not (f.name in ("norms", "window", "row", "cache_hint", "allreduce",
                                     "counter", "index")
                          and not getattr(self, f.name))]
        return ";".join(parts)


def mangle(spec: KernelSpec) -> KernelSpec:
    """The spec with its deterministic name, `wb_<kind>_p<P>_v<vec>_<hash>`; the name is also
    the compile-cache key, so equal specs share one compiled kernel."""
    digest = hashlib.sha256(spec.key().encode()).hexdigest()[:16]
    return replace(spec, name=f"wb_{spec.kind}_p{spec.P}_v{spec.vec}_{digest}")
