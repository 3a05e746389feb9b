"""What lowering produces: a Plan of device buffers (BufferSpec), where each value lives (Loc), and
the steps that compute it (generated kernels, NCCL and cuBLAS calls, overlaps, copy-engine
pieces, Sends), in the order the runtime runs them; plus the index symbols of kernels, the
lowering error (`fault`) and the runtime's checks that bound sizes split into a step's chunks.

The storage rules and the pipeline numbering are in codegen/lower.py's docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import sympy

from codegen.spec import KernelSpec
from workbench import ir
from workbench.errors import RuntimeFault
from workbench.options import CodegenOptions

RANK = sympy.Symbol("rank", integer=True, nonnegative=True)


ELEM = sympy.Symbol("e", integer=True, nonnegative=True)


# Chunk index of an overlapped consumer kernel (a kernel parameter, one launch per chunk).
CHUNK = sympy.Symbol("chunk", integer=True, nonnegative=True)


# The other rank of a copy-engine copy (PeerCopy offsets).
PEER = sympy.Symbol("peer", integer=True, nonnegative=True)


# Bytes of an element of each buffer dtype (the values' dtypes, f64 partial sums, u32 flags):
# what the runtime allocates and the cost model counts.
ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "u32": 4, "i32": 4, "f64": 8}


@dataclass(frozen=True)
class BufferSpec:
    """A device buffer on every rank of group `group`: `numel` elements of `dtype` (sympy,
    sizes unbound); `peer` buffers are mapped into other ranks (CUDA IPC): the ranks of the
    same group for fused collectives, the same local rank of the next or previous stage for a
    fused Send."""

    name: str
    dtype: str
    numel: sympy.Expr
    peer: bool = False
    holds_input: str = ""
    group: int = 0  # the stage whose ranks hold it (pipelines)


@dataclass(frozen=True)
class Loc:
    """Where a value lives on a rank: `numel` elements at `offset` of `buffer`. `whole_offset`
    is set when the value is this rank's slice of a whole tensor held in the same buffer."""

    buffer: str
    offset: sympy.Expr
    numel: sympy.Expr
    whole_offset: sympy.Expr | None = None


@dataclass(frozen=True)
class KernelStep:
    """Launch one generated kernel; `flags` names its barrier-flag buffer (collectives).

    `grid_rule` (GRID_RULES) says how its launch grid is sized, decided by lowering from
    its spec (`grid_rule_of`) and read by the runtime at launch with the GPU's SM count.
    `flops` and `dropouts` (dropout masks drawn: elements x masks) are what one launch
    computes on one rank, sizes unbound, and `flops_dtype` the dtype they run at: lowering
    counts them once from the statements the kernel computes (codegen.work.kernel_math), so
    the cost model prices the step from its fields alone (its spec holds the expressions as
    C text only). A kernel launched per chunk counts one chunk's."""

    spec: KernelSpec
    stmts: tuple[str, ...]
    flags: str = ""
    extent: sympy.Expr = sympy.Integer(0)  # elements per rank (sizes unbound); rows: rows
    cols: sympy.Expr = sympy.Integer(0)  # a row kernel's row length (row_cols_fault)
    flops: sympy.Expr = sympy.Integer(0)
    dropouts: sympy.Expr = sympy.Integer(0)
    flops_dtype: str = "f32"
    # how the runtime sizes its launch grid (GRID_RULES; lowering fills it: grid_rule_of)
    grid_rule: str = ""


@dataclass(frozen=True)
class NcclStep:
    """One NCCL collective on buffers: count is elements per rank (send count for all_gather,
    receive count for reduce_scatter)."""

    op: str
    reduce: str
    src: Loc
    dst: Loc
    count: sympy.Expr
    dtype: str
    stmt: str
    root: int = 0
    # Which communicator: "group", the plan's ranks (a node's, in a node view: Plan.per_node);
    # "inter", the ranks of this local rank on every node (a hierarchical split's AllReduce
    # across nodes: ncclCommSplit with color = local rank).
    comm: str = "group"
    # Chunked in an overlap by root (sequence parallelism's AllGather -> MatMul and MatMul ->
    # ReduceScatter): chunk i of C (C a multiple of P) is the rows of root i // (C/P)'s part,
    # gathered by one ncclBroadcast from that root or reduced by one ncclReduce onto it, so
    # every chunk is contiguous rows of the whole tensor (row chunks of a plain AllGather
    # would interleave the ranks' parts).
    by_root: bool = False
    # An all_to_all chunked in an overlap as a rotated exchange (an MoE's dispatch -> GEMM or
    # GEMM -> combine; workbench.runtime.chunked.exchange_pieces): rank r takes the row chunks
    # of its receiving (dispatch) or sending (combine) side in the order (i + r C / P) mod C,
    # and step i is NCCL send/recv pieces of those rows, so every step loads every link.
    exchange: str = ""  # "", or the side whose chunk order is rotated: "recv" or "send"

    @property
    def collective(self) -> ir.Collective:
        """What `op` (NCCL's function) means, from the one name table (ir.COLLECTIVES): its
        IR class, the cost model's kind and the buffer convention."""
        return ir.collective_named(self.op)


@dataclass(frozen=True)
class GemmStep:
    """c = a @ b on this rank's local blocks, row-major: a is m x k, b is k x n, c is m x n
    (cuBLAS through a maintained library; the runtime picks it). All sizes unbound.

    `epilogue` (ir.LIBRARY_EPILOGUES, "" for none): c = f(a @ b + bias) computed by the GEMM
    library (cuBLASLt's epilogues), with `bias` n elements added to every row."""

    a: Loc
    b: Loc
    c: Loc
    m: sympy.Expr
    k: sympy.Expr
    n: sympy.Expr
    dtype: str
    stmt: str
    epilogue: str = ""
    bias: Loc | None = None


@dataclass(frozen=True)
class ReduceStep:
    """out[0] = the `reduce` (add, max, min, mul) of this rank's `count` elements at x,
    accumulated in f64 and rounded once to f32, as the interpreter's ReduceTensor: a maintained
    library's reduction (the runtime picks it), not a generated kernel."""

    x: Loc
    out: Loc
    count: sympy.Expr
    reduce: str
    dtype: str
    stmt: str


@dataclass(frozen=True)
class SendStep:
    """An unfused Send through NCCL point-to-point: rank r of stage `src_group` sends `count`
    elements at `src` to rank r of stage `dst_group`, which receives them at `dst`."""

    src: Loc
    dst: Loc
    count: sympy.Expr
    dtype: str
    stmt: str
    src_group: int
    dst_group: int


@dataclass(frozen=True)
class OverlapStep:
    """CoCoNet's overlap: the producer and the consumer run as `chunks` pieces along the rows
    of the producer's output, on two streams: consumer chunk i waits for producer chunk i
    only, so chunk i's communication runs beside chunk i+1's computation.

    The producer is a GemmStep (a MatMul, chunked by rows), an NcclStep (one NCCL call per
    chunk of count / chunks; by root, see NcclStep.by_root) or an elementwise KernelStep whose
    spec takes a `chunk` parameter. The consumer is a fused collective or fused Send
    KernelStep (launched once per chunk), an NcclStep, or a GemmStep (the rows of chunk i
    once the producer has gathered them: sequence parallelism's AllGather -> MatMul)."""

    chunks: int
    producer: GemmStep | NcclStep | KernelStep
    consumer: KernelStep | NcclStep | GemmStep
    stmt: str
    rows: sympy.Expr = sympy.Integer(0)  # NCCL producer: rows of the chunked tensor
    per: int = 1  # ... which must divide into this many equal parts (chunk_rows_fault)
    # A generated consumer beside a GEMM time-shares the SMs with it and runs on part of its
    # grid (`consumer_grid`): lowering decides it, the runtime launches it so and the cost
    # model and the simulator price it so. `consumer_blocks`: the blocks chosen
    # (CodegenOptions.overlap_blocks), 0 for OVERLAP_GRID_SHARE of the full grid.
    shares_sms: bool = False
    consumer_blocks: int = 0

    def consumer_grid(self, full: int) -> int:
        """Blocks of the consumer kernel whose full grid is `full` blocks."""
        return overlap_grid(full, self.consumer_blocks) if self.shares_sms else full


# An overlapped consumer beside a GEMM runs on a quarter of its full grid by default (66
# blocks on an H200, one per two SMs): the fastest of 16..264 blocks for the model-parallel
# layer on 2x H200 (GPU run 6, records/gpu/README.md).
OVERLAP_GRID_SHARE = 4


def overlap_grid(full: int, chosen: int = 0) -> int:
    """Blocks of an overlapped consumer kernel whose full grid is `full`: `chosen`
    (CodegenOptions.overlap_blocks, the same on every rank: blocks meet their peers by index)
    capped by the full grid, or by default 1/OVERLAP_GRID_SHARE of it. The one formula of
    that grid: the runtime launches it, the cost model and the simulator price it."""
    return min(full, chosen) if chosen > 0 else max(1, full // OVERLAP_GRID_SHARE)


@dataclass(frozen=True)
class PipelineStep:
    """A pipelined hierarchy (codegen.lower_pipeline): `legs` (node reduce_scatter, the
    all_reduce across nodes on the "inter" communicator, the fused update + node gather or an
    NCCL all_gather) run `chunks` times each on three streams, leg k of chunk c after leg k-1
    of chunk c (a CUDA event) and after leg k of chunk c-1 (its stream). `rows`: elements of a
    rank's node slice (sizes unbound), which the chunks must divide."""

    chunks: int
    legs: tuple
    stmt: str
    rows: sympy.Expr = sympy.Integer(0)


@dataclass(frozen=True)
class PeerCopy:
    """Copy-engine copies between this rank and every other rank k of its stage, of `numel`
    elements of `dtype`, cut into the pieces of a CopyEngineStep. A pull copies rank k's
    `src` region into this rank's `dst` region; a push copies this rank's `src` region into
    rank k's `dst` region. Offsets are element offsets, expressions of RANK (this rank) and
    PEER (rank k), with sizes unbound."""

    src: str
    src_offset: sympy.Expr
    dst: str
    dst_offset: sympy.Expr
    numel: sympy.Expr
    dtype: str
    pull: bool


@dataclass(frozen=True)
class CopyEngineStep:
    """A fused collective whose bytes copy engines move (ir.Fused.engine == "copy"): a
    barrier kernel (every rank's inputs are complete), then piece by piece on three streams
    the pulls of piece i, the kernel on window i of this rank's slice once they are done, the
    pushes of its results once it is done; then a barrier kernel after every push (every
    peer's pushes into this rank have landed). The SMs move no data over NVLink."""

    start: KernelStep
    kernel: KernelStep
    end: KernelStep
    copies: tuple[PeerCopy, ...]
    chunks: int
    stmts: tuple[str, ...]


@dataclass(frozen=True)
class ChunkedStep:
    """`steps` run chunk by chunk on one stream: chunk 0 of each step in order, then chunk 1,
    and so on. Kernel steps take the chunk as their `chunk` parameter; an NcclStep runs on its
    count / chunks part of chunk i. A pipeline's stages overlap this way: stage 0 sends chunk
    i+1 while stage 1 gathers chunk i (each waits only for its own chunk's flag)."""

    chunks: int
    steps: tuple
    stmt: str
    rows: sympy.Expr = sympy.Integer(0)  # rows of the chunked tensor (sizes unbound) ...
    per: int = 1  # ... which must divide into this many equal parts (chunk_rows_fault)


@dataclass(frozen=True)
class RingFusedStep:
    """CoCoNet's fused collective across nodes (codegen.forms' "ring" form): NCCL's ring over
    the group carries the bytes that `kernel` (the region as the peers form generates it: the
    buffers it reduce-scatters and gathers, its computation) would move by peer accesses, and
    the computation runs on each chunk of the rank's slice as the ring delivers it. Priced
    and simulated, never run: no backend drives NCCL's network steps with computation between
    them. `refused` says so; `lower` raises it unless asked for what is priced only, and the
    runtime refuses a plan holding one with it (Plan.refusal)."""

    kernel: KernelStep
    stmt: str
    refused: str


@dataclass(frozen=True)
class Origin:
    """The top-level statement a plan step lowers, as readers name it (provenance only):
    `stmt` its name, `kernel` what the timeline calls its kernels ("w1 = FusedAllreduce[..]"),
    `stream` what it calls the statement on its GPU's stream ("w1 = Fused"); `parts`: an
    overlap's producer and consumer statements, a pipelined hierarchy's legs, in order."""

    stmt: str
    kernel: str
    stream: str
    parts: tuple[Origin, ...] = ()


@dataclass(frozen=True)
class Plan:
    """A program lowered for groups of P ranks: buffers, value locations, and steps in order.

    `groups` names the stages in order (one name for a program of one group); step k runs on
    the ranks of the groups in `step_groups[k]` (a Send on both of its stages)."""

    program: ir.Program
    P: int
    buffers: tuple[BufferSpec, ...]
    locs: dict = field(hash=False, compare=False)
    steps: tuple = ()
    groups: tuple[str, ...] = ("world",)
    step_groups: tuple[tuple[int, ...], ...] = ()
    # 0: the plan's P ranks are the group. g > 0: a node's view of a program with node-level
    # collectives (design note 36): P = g, kernels' `rank` is the local rank, peers are the
    # node's g GPUs, collectives run over the node's ranks except NcclSteps with comm "inter";
    # the group has `nodes` such nodes.
    per_node: int = 0
    nodes: int = 1
    # >1: a pipelined hierarchy holds every per-rank slice chunk by chunk (codegen.
    # lower_pipeline): the runtime scatters inputs and checks outputs in that layout.
    slice_chunks: int = 1
    # How it was generated and is to be launched (grids of fused collectives and overlaps).
    options: CodegenOptions = CodegenOptions()
    # The top-level statement each step lowers (parallel to `steps`): provenance, which names
    # steps in reports and the simulator's timeline, never read to decide what runs.
    origins: tuple[Origin, ...] = ()

    @property
    def world(self) -> int:
        """Ranks of the whole program: P per stage."""
        return self.P * len(self.groups)

    def statements(self) -> tuple[tuple[Origin, tuple, tuple[tuple[int, ...], ...]], ...]:
        """(origin, its steps, each step's stages) of each top-level statement, in order: a
        statement's steps are consecutive (lowering emits them together), a run of one
        origin."""
        origins = self.origins or (Origin("", "", ""),) * len(self.steps)
        groups = self.step_groups or ((0,),) * len(self.steps)
        out: list = []
        for step, origin, gs in zip(self.steps, origins, groups):
            if out and out[-1][0] == origin:
                out[-1] = (origin, (*out[-1][1], step), (*out[-1][2], gs))
            else:
                out.append((origin, (step,), (gs,)))
        return tuple(out)

    @property
    def refusal(self) -> str:
        """Why the GPU backend cannot run this plan (a step priced and simulated only:
        RingFusedStep), or "" when it can."""
        return next((s.refused for s in self.steps if isinstance(s, RingFusedStep)), "")

    def steps_of(self, group: int) -> tuple:
        """The steps that the ranks of stage `group` run, in order."""
        groups = self.step_groups or ((0,),) * len(self.steps)
        return tuple(s for s, g in zip(self.steps, groups) if group in g)

    def source(self, spec: KernelSpec) -> str:
        """The CUDA source of one of the plan's kernels, rendered by codegen (the runtime
        compiles and launches it, and never renders)."""
        from codegen.render import render  # the templates load on first use

        return render(spec)

    def kernels(self) -> tuple[KernelSpec, ...]:
        """The generated kernels the runtime compiles, each step's in order."""
        flat = []
        for s in self.steps:
            if isinstance(s, OverlapStep):
                flat += [s.producer, s.consumer]  # a chunked elementwise producer is one too
            elif isinstance(s, CopyEngineStep):
                flat += [s.start, s.kernel]
            elif isinstance(s, ChunkedStep):
                flat += s.steps
            elif isinstance(s, PipelineStep):
                flat += s.legs
            else:
                flat.append(s)
        return tuple(s.spec for s in flat if isinstance(s, KernelStep))


GRID_RULES = ("rows", "collective", "one", "row-blocks", "warp-rows", "elementwise")
"""How a kernel step's launch grid is sized (workbench.runtime.executor): rows, a block a row
(`rows_grid`: resident where blocks meet peers); collective, blocks per SM of a fused
collective (`collective_grid`: the options' blocks per SM or the row plan's, within
MAX_BLOCKS and the options' cap); one, a single block (a norm's finish, a flag wait, a
barrier); row-blocks, a row kernel's resident blocks per SM by its registers; warp-rows, a
warp per row (a top-k: workbench.runtime.chunked.topk_grid); elementwise,
enough blocks for the extent (at most MAX_BLOCKS with norms' partials)."""


def collective_grid(spec: KernelSpec | None, blocks_per_sm: int, sm_count: int,
                    cap: int = 0) -> int:
    """A fused collective's grid: `blocks_per_sm` a SM (the options'), or the row plan's
    grid_per_sm where its launch bound keeps that many resident (the shared row cache, design
    note 86); every block must be resident, since blocks meet their peers at barriers. `cap`
    (the options' collective_grid; 0: none): at most that many blocks, the kernel striding
    over the rest (a few SMs for a kernel that runs beside backward, design note 94). The one
    formula of that grid: the runtime launches it (GRID_RULES' "collective"), the cost model
    prices an overlapped consumer's share of it; `spec` None: a kernel without a row plan."""
    row = spec.row if spec is not None else None
    per_sm = row.grid_per_sm if row is not None and row.grid_per_sm else blocks_per_sm
    grid = min(MAX_BLOCKS, sm_count * per_sm)
    return min(grid, cap) if cap > 0 else grid


def grid_rule_of(spec: KernelSpec) -> str:
    """The GRID_RULES entry of a kernel of this spec: lowering's one decision of it."""
    if spec.row is not None and spec.row.grid == "rows":
        return "rows"
    if spec.kind == "collective" or (spec.kind == "send"
                                     and any(p.kind == "flags" for p in spec.params)):
        return "collective"
    if spec.kind in ("finish", "wait", "barrier"):
        return "one"
    if spec.kind == "rows":
        return "row-blocks"
    if spec.kind == "topk":
        return "warp-rows"
    return "elementwise"


def map_kernels(step, fn, chunks: int = 1):
    """`step` with every KernelStep inside it replaced by `fn(kernel_step, chunks)`: `chunks`
    is the number of chunks of the composite step holding it (an overlap's, a chunked step's,
    a pipelined hierarchy's), 1 at the top level, in copy engines and in a ring-fused step."""
    if isinstance(step, KernelStep):
        return fn(step, chunks)
    if isinstance(step, OverlapStep):
        return replace(step, producer=map_kernels(step.producer, fn, step.chunks),
                       consumer=map_kernels(step.consumer, fn, step.chunks))
    if isinstance(step, ChunkedStep):
        return replace(step, steps=tuple(map_kernels(s, fn, step.chunks) for s in step.steps))
    if isinstance(step, PipelineStep):
        return replace(step, legs=tuple(map_kernels(s, fn, step.chunks) for s in step.legs))
    if isinstance(step, CopyEngineStep):
        return replace(step, start=fn(step.start, 1), kernel=fn(step.kernel, 1),
                       end=fn(step.end, 1))
    if isinstance(step, RingFusedStep):
        return replace(step, kernel=fn(step.kernel, 1))
    return step


# Max blocks of a fused collective: its flag buffer holds [2][MAX_BLOCKS][P] u32.
MAX_BLOCKS = 1024


def fault(what: str) -> RuntimeFault:
    """The error for what the GPU backend cannot generate (`what` says what and why)."""
    return RuntimeFault(what)


def check_sizes(plan: Plan, bound: dict) -> None:
    """Raise the first of `size_faults` (the runtime's refusal, before it allocates)."""
    faults = size_faults(plan, bound)
    if faults:
        raise fault(faults[0])


def size_faults(plan: Plan, bound: dict) -> list[str]:
    """Every way sizes `bound` (interpreter.bind_sizes) leave a chunked step of `plan`
    undivided, one message each: an overlap's or a chunked step's rows into its chunks (times
    P when each chunk is split again over the ranks), a pipelined hierarchy's node slice into
    its chunks, a rank's slice into copy-engine pieces, a rotated exchange's rows into P
    blocks and its chunks, a row kernel's row beyond its register cache. The one statement of
    these conditions: `workbench check`, `compile` and `compile-and-measure` refuse such sizes
    before any rank starts, and the runtime before it allocates (check_sizes)."""

    def values(expr) -> set[int]:
        # counts are per rank and equal on every rank; an expression of the rank is checked
        # at each of the P ranks
        e = sympy.sympify(expr).subs(bound)
        ranks = range(plan.P) if RANK in e.free_symbols else (0,)
        return {int(e.subs(RANK, r)) for r in ranks}

    return [f for step in plan.steps for f in _step_faults(step, values, plan.P) if f]


def _step_faults(step, values, P: int, chunks: int = 1):
    """The messages (or None) of `step` and the steps inside it (size_faults)."""
    if isinstance(step, KernelStep):
        if step.spec.row is not None:
            yield from (row_cols_fault(step, c) for c in values(step.cols))
    elif isinstance(step, NcclStep):
        if step.exchange and chunks > 1:
            yield from (exchange_fault(step, c, P, chunks) for c in values(step.count))
    elif isinstance(step, OverlapStep):
        if isinstance(step.producer, GemmStep):
            yield from (overlap_rows_fault(step, m, P) for m in values(step.producer.m))
        else:
            yield from (chunk_rows_fault(step.stmt, r, step.per, step.chunks)
                        for r in values(step.rows))
        for inner in (step.producer, step.consumer):
            yield from _step_faults(inner, values, P, step.chunks)
    elif isinstance(step, ChunkedStep):
        yield from (chunk_rows_fault(step.stmt, r, step.per, step.chunks)
                    for r in values(step.rows))
        for inner in step.steps:
            yield from _step_faults(inner, values, P, step.chunks)
    elif isinstance(step, PipelineStep):
        yield from (chunk_rows_fault(step.stmt, r, step.chunks, step.chunks,
                                     rows_are="a rank's node slice of {} elements",
                                     action="pipeline its legs in")
                    for r in values(step.rows))
        for inner in step.legs:
            yield from _step_faults(inner, values, P, step.chunks)
    elif isinstance(step, CopyEngineStep):
        yield from (chunk_rows_fault(", ".join(step.stmts), n, step.chunks, step.chunks,
                                     rows_are="a rank's slice of {} elements",
                                     action="move by copy engines in")
                    for n in values(step.kernel.extent))
        for inner in (step.start, step.kernel, step.end):
            yield from _step_faults(inner, values, P)


def overlap_rows_fault(step: OverlapStep, rows: int, P: int) -> str | None:
    """Why `rows` (the MatMul's output rows, sizes bound) do not split into the step's
    chunks, and each chunk evenly over the P ranks when a fused collective consumes it; None
    when they do."""
    per = step.chunks * (P if isinstance(step.consumer, KernelStep) else 1)
    return chunk_rows_fault(step.stmt, rows, per, step.chunks,
                             rows_are="the MatMul's {} output rows", action="overlap in")


def row_cols_fault(step: KernelStep, cols: int) -> str | None:
    """Why a row kernel's rows (`cols` elements, sizes bound) do not fit its row cache
    (values kept between its passes live in registers, `cache` per thread); None if they do."""
    row = step.spec.row
    if row is not None and row.cache and cols > row.max_threads * row.cache:
        most = row.max_threads * row.cache
        return (f"statement {', '.join(step.stmts)}: a row kernel's rows must have at most "
                f"{most} elements (its threads keep {row.cache} each in "
                f"registers between passes), got {cols}; reduce over a shorter axis, or do "
                "not fuse the statements that read the row after its reduction")
    return None


def exchange_fault(step: NcclStep, count: int, P: int, chunks: int) -> str | None:
    """Why a rotated exchange of `count` elements per rank does not split into P blocks and
    `chunks` chunks (workbench.runtime.chunked.exchange_pieces); None when it does."""
    if count % P or count % chunks:
        return (f"statement {step.stmt}: a rotated exchange of {count} elements per rank must "
                f"split into {P} blocks and {chunks} chunks evenly, got a remainder; pick "
                f"chunks dividing the rows (s.overlap(..., chunks=...)) or sizes that divide")
    return None


def chunk_rows_fault(stmt: str, rows: int, per: int, chunks: int,
                     rows_are: str = "the {} rows", action: str = "run in") -> str | None:
    """Why `rows` (sizes bound) do not split into `per` equal parts (`chunks` per tensor,
    times P when each chunk is split again over the ranks of a stage); None when they do."""
    if rows % per:
        return (f"statement {stmt}: {rows_are.format(rows)} must be a multiple of "
                f"{'chunks x ranks = ' if per != chunks else 'chunks = '}{per} to "
                f"{action} {chunks} chunks; pick sizes that divide, or a chunk count that "
                f"divides them")
    return None

