"""Lowering axis reductions (ReduceAxis) to row kernels: a plain ReduceAxis, a fused compute
region holding one (RMSNorm, LayerNorm, softmax as one kernel), or a fused collective holding
one (AllReduce + residual + RMSNorm: reduce-scatter of rows by peer loads, the computation on
this rank's rows, several all-gathers by peer stores).

A row kernel gives each block whole rows of the reduced (last) axis, grid-stride over this
rank's rows. Its statements run in passes over the row's columns: a statement runs in the
first pass after every reduction it reads has finished (the block combines the threads'
accumulators between passes, wb_rows.cuh). A value computed in one pass and read in a later
one stays in registers (the row cache, ROW_CACHE per thread), so peer loads and HBM reads
happen once per element; inputs in memory are simply read again (the row is in L2).
"""

from __future__ import annotations

import re
from dataclasses import replace

import sympy

from codegen.kernel_builder import KernelBuilder
from codegen.lower_elementwise import phases_after, slice_loc
from codegen.plan import MAX_BLOCKS, KernelStep, fault
from codegen.planner import REDUCE_NAMES, Planner, c_ident, c_type_of, numel_of, result_loc
from codegen.spec import (
    ROWS_CACHE,
    THREADS,
    Load,
    Param,
    RowAllReduce,
    RowPass,
    RowPlan,
    RowReduction,
    Store,
    mangle,
)
from workbench import ir
from workbench.options import CodegenOptions
from workbench.types import Sliced

# Elements per thread of a cached row: 512 threads x 32 = rows of up to 16384 elements (the
# largest hidden size of the studies), in registers when the loops over them unroll.
# Row groups per owner rank of a pipelined AllReduce at most (rows.cu.j2): each group's rows
# are computed as soon as they have landed, so more groups overlap more of the computation
# with the communication, at a flag handshake per group and moving block.
PIPELINE_GROUPS = 16
ROW_CACHE = 32

# __launch_bounds__(512, ROW_MIN_BLOCKS) for row kernels: two blocks per SM resident. With one
# (98 registers, GPU run 24) a block's row waits on its loads, then on its reduction's
# barriers, then writes, with nothing else on the SM; the fused collective's row kernel,
# bounded at 2 already, computed the same residual + RMSNorm at P = 1 in 0.148 / 0.250 /
# 0.472 ms against 0.196 / 0.356 / 0.668 (f16, T = 8192, H = 4096 / 8192 / 16384; run 24).
ROW_MIN_BLOCKS = CodegenOptions.row_min_blocks  # the default of the options
# A fused collective's blocks spin on their peers' counterparts: every block of the grid
# (CodegenOptions.collective_blocks_per_sm = 2 per SM) must be resident (design note 42).
COLLECTIVE_MIN_BLOCKS = 2

_COLLECTIVE_KINDS = ("allreduce", "reducescatter", "allgather")

# Two shapes of the row loop, off by default: measured together (8 and True) they were slower
# at T = 8192 on one H100 (design note 80), so they stay as knobs for the next measurement
# (benchmarks/gpu/rows_bandwidth.py sets them per variant); off, the kernels are as before.
# ROW_LOADS_IN_FLIGHT: 16-byte loads a thread of a row kernel issues before it uses the first
# of them, per pass of the vector path: the row cache's column steps taken D at a time, every
# load of the D steps first (load_depth). 0: one step at a time, its loads inside its bounds
# check (a step's stores then stand between its loads and the next step's).
ROW_LOADS_IN_FLIGHT = 0
# ROW_GROUPS: a block takes several rows at once, each by as few threads as hold it at
# ROW_CACHE elements a thread (wb::RowGroup: 128 threads for rows of 4096, 256 for 8192, the
# whole block for 16384). False: the whole block takes each row.
ROW_GROUPS = False
# ROW_CACHE_SHARED: the row cache in shared memory instead of registers (RowPlan.cache_in),
# where every cached value's longest row (ROW_CACHE x 512 elements) fits ROW_SHARED_BYTES: one
# f16 or bf16 value, 32 KB a block. Without the cache's registers the launch bound can keep
# ROW_SHARED_MIN_BLOCKS blocks a SM without spills (nvcc 13: 36-40 registers, no local memory,
# at bound 3; at bound 4 the one-rank kernels fit 32 registers but P >= 2 and the Lamport
# kernel's single-element path spill), and a fused collective's grid is that many a SM. Off:
# measured on one H100 (design note 86) it did not beat the register cache at 8192 x 4096 and
# lost up to 12 % at T = 128, so occupancy was not what held the row kernels back.
ROW_CACHE_SHARED = False
# Static shared memory a block may declare is 48 KB; the block reductions keep a little.
ROW_SHARED_BYTES = 40 * 1024
# Bound 3 measured faster than 4 in 23 of the 27 rows timed with both (note 86).
ROW_SHARED_MIN_BLOCKS = 3
_C_BYTES = {"__half": 2, "__nv_bfloat16": 2, "float": 4, "int": 4}
# The "rows" form (CodegenOptions.row_grid, design note 91), Inductor's persistent-reduction
# shape: one row a block and as many threads as hold the row at ROWS_CACHE elements each (the
# runtime picks them per launch, up to ROWS_MAX_THREADS), so a thread keeps 16 elements, not
# 32, and __launch_bounds__(1024, ROWS_MIN_BLOCKS) caps it at 32 registers: 2048 threads a SM.
ROWS_MIN_BLOCKS = 2


def load_depth(p: RowPass, steps: int, in_flight: int) -> int:
    """Column steps of pass `p` whose loads a thread issues together: the most, halving from
    `steps` (the row cache's steps, a power of two), whose loads (a peer-reduced or Lamport
    load counts one per peer) stay within `in_flight`; 1 when there is nothing to hoist
    (in_flight 0, or a pass without loads)."""
    per_step = sum(len(ld.peers) if ld.mode in ("reduce", "lamport") else 1 for ld in p.loads)
    if in_flight <= 0 or per_step == 0:
        return 1
    depth = steps
    while depth > 1 and depth * per_step > in_flight:
        depth //= 2
    return depth


def shared_cache_bytes(plan: RowPlan) -> int | None:
    """Shared memory a block of `plan` needs for its row cache there: the longest row
    (plan.cache elements a thread) of every cached value; None when a type has no known size."""
    types = [t for p in plan.passes for t in p.cached_types]
    if any(t not in _C_BYTES for t in types):
        return None
    return sum(_C_BYTES[t] for t in types) * plan.cache * THREADS


def with_shared_cache(plan: RowPlan, collective: bool, on: bool) -> RowPlan:
    """The plan with its row cache in shared memory (ROW_CACHE_SHARED) when `on`, something is
    cached and it fits ROW_SHARED_BYTES; the launch bound then keeps ROW_SHARED_MIN_BLOCKS
    blocks a SM, and a fused collective launches that many a SM. Else the plan unchanged."""
    size = shared_cache_bytes(plan) if on and plan.cache else None
    if size is None or size > ROW_SHARED_BYTES:
        return plan
    blocks = max(plan.min_blocks, ROW_SHARED_MIN_BLOCKS)
    return replace(plan, cache_in="shared", min_blocks=blocks,
                   grid_per_sm=blocks if collective else 0)


def rows_form(plan: RowPlan, min_blocks: int = ROWS_MIN_BLOCKS) -> RowPlan:
    """The plan in the "rows" form (one row a block, threads by the row's length): ROWS_CACHE
    elements a thread of each cached value, in registers, under __launch_bounds__(
    ROWS_MAX_THREADS, min_blocks): 2 (32 registers, 2048 threads a SM) or 1 (64 registers,
    no spills, 1024 threads a SM: the options' row_min_blocks = 1). The other shapes' knobs
    (row groups, loads first, the shared cache) do not apply to it."""
    return replace(plan, cache=ROWS_CACHE if plan.cache else 0,
                   min_blocks=max(1, min(min_blocks, ROWS_MIN_BLOCKS)), grid="rows")


def row_min_blocks(opts: CodegenOptions, collective: bool) -> int:
    """__launch_bounds__'s minimum blocks per SM of a row kernel: the options' row_min_blocks
    (ROW_MIN_BLOCKS by default; 1-4 is a tuning experiment, `harness.py replay-rmsnorm` times
    them side by side through WB_ROW_MIN_BLOCKS). The kernel's name mangles it, so the compile
    cache keeps the variants apart. A fused collective never goes below COLLECTIVE_MIN_BLOCKS."""
    value = opts.row_min_blocks
    return max(value, COLLECTIVE_MIN_BLOCKS) if collective else value


def has_axis_reduction(stmt: ir.Stmt) -> bool:
    """Whether a statement (or a region's body) holds an axis reduction: a row kernel."""
    return any(isinstance(leaf.op, ir.ReduceAxis) for leaf in stmt.leaves())


def row_passes(leaves: list[ir.Stmt]) -> list[int]:
    """The pass of each leaf: after every reduction it reads (a gather with its source)."""
    return phases_after(leaves, ir.ReduceAxis)


def row_kernel_step(pl: Planner, stmt: ir.Stmt, first: int, opts: CodegenOptions,
                    chunks: int = 1) -> KernelStep:
    """A statement holding axis reductions as one row kernel (see the module docstring); with
    `chunks`, a fused collective launched once per chunk of rows (an overlapped consumer:
    chunk i's rows reduce-scattered, normalized and gathered as the MatMul finishes them)."""
    op = stmt.op
    what = f"statement {stmt.name} ({op})"
    leaves = list(stmt.leaves())
    collective = isinstance(op, ir.Fused) and op.kind in _COLLECTIVE_KINDS
    if isinstance(op, ir.Fused):
        if op.kind not in ("compute", *_COLLECTIVE_KINDS):
            raise fault(f"{what}: an axis reduction must be fused into a compute region or a "
                        f"fused collective, got a fused {op.kind}; fuse it without the Send")
        if op.engine != "sm":
            raise fault(f"{what}: a fused collective with an axis reduction must move its "
                        "bytes on the SMs, got copy engines; drop copy_engines for it")
    head_ar = collective and isinstance(leaves[0].op, ir.AllReduce)
    if collective and opts.collective_mode != "pull" and not head_ar:
        raise fault(f"{what}: a fused collective with an axis reduction must reduce-scatter by "
                    f"peer loads (--collective-mode pull), got {opts.collective_mode}")
    red = next(leaf for leaf in leaves if isinstance(leaf.op, ir.ReduceAxis))
    domain = red.op.input_type(pl.types, what)
    if red.op.axis != domain.rank - 1:
        raise fault(f"{what}: an axis reduction on GPUs must reduce the last axis (rows are "
                    f"contiguous), got axis {red.op.axis} of {domain}; transpose the data")
    if collective and not head_ar and not (isinstance(domain.layout, Sliced)
                                           and domain.layout.dim == 0):
        raise fault(f"{what}: a fused collective must compute on dim-0 slices (rows), got "
                    f"{domain.layout}")
    local = [pl.sub(d) for d in domain.local_shape()]
    rows, cols = numel_of(local[:-1]) / chunks, local[-1]
    kb = KernelBuilder(pl, domain, what, chunks)
    passes = row_passes(leaves)
    reductions: dict[str, RowReduction] = {}
    allreduce = None
    per_pass: list[dict] = [dict(assigns=[], reductions=[], stores=[])
                            for _ in range(max(passes) + 1)]
    for k, (leaf, p) in enumerate(zip(leaves, passes)):
        index = first + k
        n_assigns, n_stores = len(kb.assigns), len(kb.stores)
        lop = leaf.op
        if isinstance(lop, ir.ReduceAxis):
            per_pass[p]["reductions"].append(_reduction(kb, leaf, index, domain))
            reductions[leaf.out.name] = per_pass[p]["reductions"][-1]
        elif isinstance(lop, ir.ReduceScatter):
            _reduce_scatter(kb, leaf, index)
        elif isinstance(lop, ir.AllReduce) and head_ar and k == 0:
            allreduce = _allreduce(kb, leaf, index, op.algorithm, rows, cols,
                                   opts.pipeline_compute_share)
        elif isinstance(lop, ir.AllGather):
            if lop.x in reductions:
                raise fault(f"{what}: a fused AllGather must gather a value of the rows, got "
                            f"the per-row reduction '{lop.x}'; gather it in its own statement")
            dst, self_stored = kb.gathered(leaf, index)
            peers = kb.peer_params(dst.buffer, const=False)
            kb.stores.append(Store(kb.regs[lop.x], c_type_of(leaf.out.type), "",
                                   kb._c(dst.offset + kb.slice_base), peers, self_stored))
        elif isinstance(lop, ir.ELEMENTWISE_OPS):
            kb.compute(leaf, index)
        elif isinstance(lop, ir.Slice):
            pl.locs[leaf.out.name] = slice_loc(pl, leaf, what)
        else:
            raise fault(f"{what}: a row kernel may hold ReduceScatter, Compute, Update, "
                        f"ReduceAxis, Slice and AllGather (or start with a whole AllReduce), "
                        f"got {lop}")
        per_pass[p]["assigns"] += kb.assigns[n_assigns:]
        per_pass[p]["stores"] += kb.stores[n_stores:]
    if allreduce is not None and allreduce.algorithm == "pipelined":
        _check_pipelined(what, opts, chunks)
    _row_broadcasts(kb, cols)
    cached = _cached(leaves, passes, reductions, kb.regs)
    # Every assigned register holds values rounded to its C type (rows.cu.j2's round_to), so
    # the cache may keep them in that type exactly.
    ctypes = {a.var: a.c_type for part in per_pass for a in part["assigns"]}
    row_passes_ = []
    for p, part in enumerate(per_pass):
        texts = [a.expr for a in part["assigns"]] + [r.expr for r in part["reductions"]]
        loads = tuple(ld for ld in kb.loads.values()
                      if any(re.search(rf"\b{re.escape(ld.var)}\[", t) for t in texts))
        row_passes_.append(RowPass(
            loads, tuple(part["assigns"]), tuple(part["reductions"]), tuple(part["stores"]),
            tuple(v for v, (made, read) in cached.items() if made < p <= read),
            tuple(v for v, (made, _) in cached.items() if made == p),
            tuple(ctypes.get(v, "float") for v, (made, _) in cached.items() if made == p)))
    extra, flags_name, counter = [], "", ""
    if collective:
        base = c_ident(stmt.name.split(',')[0])
        if not (allreduce and allreduce.algorithm == "lamport"):  # Lamport: no barrier
            flags_name = f"flags_{base}"
            pl.add_buffer(flags_name, "u32", 2 * MAX_BLOCKS * pl.P, peer=True)
            extra = [Param(f"flags{k}", f"uint32_t* flags{k}", "flags", flags_name, k)
                     for k in range(pl.P)]
        # The launch count in device memory (wb_launch.cuh), not an `epoch` argument: a CUDA
        # graph replays the captured launch with its arguments frozen.
        pl.add_buffer(f"launches_{base}", "u32", 2)
        counter = "launches"
        extra.append(Param(counter, f"uint32_t* {counter}", "buf", f"launches_{base}"))
    plan = RowPlan(kb._c(rows), kb._c(cols), tuple(row_passes_), ROW_CACHE if cached else 0,
                   row_min_blocks(opts, collective), opts.row_prefetch)
    comment = (f"Fused{op.kind.capitalize()} as a row kernel: " if isinstance(op, ir.Fused)
               else "row kernel: ") + "; ".join(f"{s.name} = {s.op}" for s in leaves)
    spec = kb.spec("collective" if collective else "rows", "rows.cu.j2", pl.P, extra, comment,
                   kb.vec_types())
    if opts.row_grid == "rows":
        plan = rows_form(plan, opts.row_min_blocks)
    else:
        if plan.cache:
            plan = replace(plan, groups=ROW_GROUPS, passes=tuple(
                replace(p, depth=load_depth(p, plan.cache // spec.vec, ROW_LOADS_IN_FLIGHT))
                for p in plan.passes))
        plan = with_shared_cache(plan, collective, ROW_CACHE_SHARED)
    spec = mangle(replace(_with_row(spec, plan), allreduce=allreduce, counter=counter))
    return KernelStep(spec, tuple(s.name for s in leaves), flags_name, pl.sub(rows), cols)


def _with_row(spec, plan: RowPlan):
    # The streaming fields hold the union of the passes; the template renders `row`, with
    # `vec` elements per 16-byte vector of the narrowest element type.
    return replace(spec, row=plan, unroll=1)


def _row_broadcasts(kb: KernelBuilder, cols) -> None:
    """Operands broadcast along the rows (RMSNorm's weight, [H] against [T, H]) read at the
    column: mode "rowvec", ptr + offset + c, instead of a gather whose index is e % cols (a
    64-bit division per element)."""
    by_var = {f"a_{c_ident(n)}": n for n in kb.pl.types}
    for var, ld in list(kb.loads.items()):
        if ld.mode != "gather" or var not in by_var:
            continue
        shape = [kb.pl.sub(d) for d in kb.pl.types[by_var[var]].local_shape()]
        if shape and ir.proven_equal(shape[-1], cols) and all(d == 1 for d in shape[:-1]):
            kb.loads[var] = replace(ld, mode="rowvec", index="")


def _reduction(kb: KernelBuilder, leaf: ir.Stmt, index: int, domain) -> RowReduction:
    """A ReduceAxis leaf: its per-element value in f32, its block-uniform result register."""
    pl, out, op = kb.pl, leaf.out, leaf.op
    what = f"statement {out.name} ({op})"
    t_in = op.input_type(pl.types, what)
    if not ir.proven_equal(pl.sub(numel_of(t_in.local_shape())), kb.domain_numel):
        raise fault(f"{what}: every reduction of a row kernel must reduce the kernel's rows "
                    f"({kb.domain_numel} elements per rank), got {t_in}")
    if op.axis != t_in.rank - 1:
        raise fault(f"{what}: an axis reduction on GPUs must reduce the last axis, got "
                    f"axis {op.axis} of {t_in}")
    text = kb.expr(op.expr, pl.types)
    var = f"r_{c_ident(out.name)}"
    kb.regs[out.name] = var
    ptr, offset = "", "0LL"
    loc = result_loc(pl, leaf, index, what)
    if loc is not None:
        pl.locs[out.name] = loc
        ptr, offset = kb.buf_param(loc.buffer, const=False), kb._c(loc.offset)
    return RowReduction(var, op.op, c_type_of(out.type), text, ptr, offset)


def _reduce_scatter(kb: KernelBuilder, leaf: ir.Stmt, index: int) -> None:
    """This rank's rows of a ReduceScatter over rows, by peer loads in rank order."""
    pl, lop = kb.pl, leaf.op
    if lop.dim != 0:
        raise fault(f"{kb.what}: ReduceScatter must scatter dim 0 (rows), got {lop.dim}")
    src = pl.locs[lop.x]
    off = kb._c(src.offset + kb.slice_base)
    srcs = tuple(f"{p} + ({off})" for p in kb.peer_params(src.buffer, const=True))
    kb.reduced(leaf, index, Load(f"a_{c_ident(leaf.out.name)}", c_type_of(pl.types[lop.x]),
                                 "reduce", "", off, peers=srcs, reduce=REDUCE_NAMES[lop.op]))


def _allreduce(kb: KernelBuilder, leaf: ir.Stmt, index: int, algorithm: str, rows,
               cols, compute_share: int) -> RowAllReduce:
    """The whole AllReduce at the head of a row kernel, every row reduced on every rank (the
    algorithms: workbench.transforms.ALLREDUCE_ALGORITHMS); its value in registers."""
    pl, lop = kb.pl, leaf.op
    if lop.sub is not None:
        raise fault(f"{kb.what}: a fused whole AllReduce must reduce over its whole group, got "
                    f"the node-level part {lop.sub}; fuse the parts of a hierarchical split "
                    "instead")
    src = pl.locs[lop.x]
    ctype = c_type_of(pl.types[lop.x])
    off = kb._c(src.offset)
    n = kb._c(rows * cols)
    var = f"a_{c_ident(leaf.out.name)}"
    name = c_ident(leaf.out.name)
    if algorithm == "one-shot":
        # every row of every rank's input, by peer loads, combined in rank order
        peers = kb.peer_params(src.buffer, const=True)
        kb.reduced(leaf, index, Load(var, ctype, "reduce", "", off,
                                     peers=tuple(f"{p} + ({off})" for p in peers),
                                     reduce=REDUCE_NAMES[lop.op]))
        return RowAllReduce(algorithm, ctype, n, off)
    if lop.op != ir.ReduceOp.Sum:
        raise fault(f"{kb.what}: a {algorithm} fused AllReduce must sum, got {lop.op}; use "
                    "one-shot (s.allreduce_algorithm(region, \"one-shot\"))")
    if algorithm in ("two-shot", "pipelined"):
        src_peers = kb.peer_params(src.buffer, const=True)
        buf = f"ar_{name}"
        pl.add_buffer(buf, pl.types[lop.x].dtype.name, rows * cols, peer=True)
        dst_peers = kb.peer_params(buf, const=False)
        # Read through a plain pointer: peers store the summed rows into it during this launch
        # (before the barrier), so no __restrict__ / read-only-cache path.
        local = f"p_{buf}_local"
        kb.params[local] = Param(local, f"const {ctype}* {local}", "buf", buf)
        kb.reduced(leaf, index, Load(var, ctype, "contig", local, "0LL"))
        ready, ready_local = (), ""
        if algorithm == "pipelined":
            ready, ready_local = _group_flags(kb, name)
        return RowAllReduce(algorithm, ctype, n, off, src_peers, "", dst_peers, local, ready,
                            ready_local, PIPELINE_GROUPS if ready else 0,
                            compute_share if ready else 0)
    # Lamport: 3 rotating receive buffers of P parts of n elements, zeroed (poisoned) at
    # allocation as u32 buffers are (and never NaN-poisoned by the checks: not an output)
    buf = f"lamport_{name}"
    nbytes = 3 * pl.P * rows * cols * pl.types[lop.x].dtype.nbytes
    pl.add_buffer(buf, "u32", sympy.floor((nbytes + 3) / 4), peer=True)
    dst_peers = []
    for k in range(pl.P):
        p = f"p_{buf}_peer{k}"
        kb.params[p] = Param(p, f"{ctype}* {p}", "peer", buf, k)
        dst_peers.append(p)
    local = f"p_{buf}_local"
    kb.params[local] = Param(local, f"{ctype}* {local}", "buf", buf)
    src_local = kb.buf_param(src.buffer, const=True)
    parts = tuple(f"{local} + (epoch % 3u) * {pl.P}LL * ({n}) + {k}LL * ({n})"
                  for k in range(pl.P))
    kb.reduced(leaf, index, Load(var, ctype, "lamport", "", "0LL", peers=parts))
    return RowAllReduce(algorithm, ctype, n, off, (), src_local, tuple(dst_peers), local)


def _check_pipelined(what: str, opts: CodegenOptions, chunks: int) -> None:
    """A pipelined AllReduce splits a resident grid into moving and computing blocks that
    wait for each other's flags: refused where the grid is not resident or too small."""
    if opts.row_grid == "rows":
        raise fault(f"{what}: a pipelined fused AllReduce must run on a resident grid, got "
                    "row_grid 'rows' (a block a row); unset WB_ROW_GRID or use 'two-shot'")
    if opts.collective_grid == 1:
        raise fault(f"{what}: a pipelined fused AllReduce must have at least 2 blocks (one "
                    "moving, one computing), got collective_grid 1; unset it or use "
                    "'two-shot'")
    if chunks != 1:
        raise fault(f"{what}: a pipelined fused AllReduce must run as one launch, got "
                    f"{chunks} chunks; use 'two-shot' for an overlapped consumer")


def _group_flags(kb: KernelBuilder, name: str) -> tuple[tuple[str, ...], str]:
    """The pipelined AllReduce's arrival flags (rows.cu.j2): on every rank, an entry per owner
    rank, row group of the owner's rows (PIPELINE_GROUPS at most) and moving block, which that
    block of the owner sets to the launch's epoch once its summed rows of the group have been
    stored into every rank. Returns the peer pointers (set) and the local one (spun on)."""
    pl = kb.pl
    flags = f"ready_{name}"
    pl.add_buffer(flags, "u32", pl.P * PIPELINE_GROUPS * MAX_BLOCKS, peer=True)
    peers = []
    for k in range(pl.P):
        p = f"p_{flags}_peer{k}"
        kb.params[p] = Param(p, f"uint32_t* {p}", "peer", flags, k)
        peers.append(p)
    # Spun on while peers set it: a plain pointer, no read-only-cache path.
    local = f"p_{flags}_local"
    kb.params[local] = Param(local, f"const uint32_t* {local}", "buf", flags)
    return tuple(peers), local


def _cached(leaves, passes, reductions, regs) -> dict[str, tuple[int, int]]:
    """Registers of row values read in a later pass than the one computing them:
    register -> (pass computing it, last pass reading it)."""
    made: dict[str, int] = {}
    cached: dict[str, tuple[int, int]] = {}
    for leaf, p in zip(leaves, passes):
        for n in leaf.op.operands():
            if n in made and made[n] < p and n not in reductions:
                var = regs[n]
                cached[var] = (made[n], max(p, cached.get(var, (0, 0))[1]))
        if not isinstance(leaf.op, ir.AllGather):
            for v in leaf.outs:
                made[v.name] = p
    return cached
