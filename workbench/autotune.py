"""The autotuner: enumerate legal transform sequences of a program, breadth first.

From each program it proposes the moves that CoCoNet's schedules are made of (split every
AllReduce; reorder the computations that read an AllGather onto slices; keep optimizer state
sliced; fuse ReduceScatter/computation/AllGather windows, elementwise runs and computation +
Send; overlap a producer with the collective that consumes it, for several chunk counts),
keeps the legal ones, and deduplicates the resulting programs by their printed IR. Each distinct
program is a Candidate: its transforms replay from JSON (`save` / `load_candidates` / `replay`).

The search is bounded by depth and by the number of candidates; the record says when a bound
cut it short.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path

import sympy

from workbench import ir
from workbench.errors import ProgramFileError, WorkbenchError
from workbench.files import read_bounded, write_atomic
from workbench.placement import Placement
from workbench.transforms import (
    AllReduceAlgorithm,
    AsSlice,
    Fuse,
    HierarchicalSplit,
    Overlap,
    PipelineHierarchy,
    Reorder,
    Split,
    Transform,
    transform_from_json,
)
from workbench.transforms.fusion import gathers_last, overlap_form
from workbench.transforms.slicing import REORDERABLE
from workbench.types import ReplicatedLayout
from workbench.verify import fused_kind_of, verify

OVERLAP_CHUNKS = (2, 4, 8)
# Chunk counts of a pipelined hierarchy the search proposes, where each piece of a rank's
# node slice keeps at least PIPELINE_MIN_CHUNK elements: smaller pieces pay each leg's fixed
# cost (NCCL's per-call latency, a fused kernel's barriers) for too few bytes. Which count
# is best depends on the size and the cluster: `simulate --autotune` prices each.
PIPELINE_CHUNKS = (2, 4, 8, 16)
PIPELINE_MIN_CHUNK = 2**16


@dataclass(frozen=True)
class Candidate:
    """One program the autotuner reached, and how."""

    name: str
    transforms: tuple[Transform, ...]
    program: ir.Program

    @property
    def ir_digest(self) -> str:
        return hashlib.sha256(str(self.program).encode()).hexdigest()[:16]

    def to_json(self) -> dict:
        return {"name": self.name, "transforms": [t.to_json() for t in self.transforms],
                "ir_sha256_16": self.ir_digest}


@dataclass(frozen=True)
class SearchResult:
    """The candidates (the unscheduled program first) and whether a bound cut the search."""

    candidates: tuple[Candidate, ...]
    truncated: bool
    max_depth: int
    max_candidates: int


# ---------------------------------------------------------------- moves


def _plain_stmts(program):
    return [(i, s) for i, s in enumerate(program.stmts) if not isinstance(s.op, ir.REGION_OPS)]


def _reorder_moves(program) -> list[Transform]:
    moves = []
    for i, ag in _plain_stmts(program):
        if not isinstance(ag.op, ir.AllGather):
            continue
        closure, reached = [], {ag.out.name}
        for _, s in _plain_after(program, i):
            if not isinstance(s.op, REORDERABLE):
                continue
            if set(s.op.operands()) & reached:
                closure.append(s.out.name)
                reached.add(s.out.name)
        # Norms of Replicated tensors that the moved computation reads go onto slices too.
        for _, s in _plain_after(program, i):
            if (isinstance(s.op, (ir.Norm, ir.ReduceTensor)) and s.out.name not in closure
                    and isinstance(program.value(s.op.x).type.layout, ReplicatedLayout)
                    and any(s.out.name in program.stmt_defining(c).op.operands()
                            for c in closure)):
                closure.append(s.out.name)
        order = {s.out.name: k for k, s in _plain_after(program, i)}
        # Only the whole closure: a partial reorder gathers values that the rest re-slices.
        if closure:
            moves.append(Reorder(tuple(sorted(closure, key=order.get)), ag.out.name))
    return moves


def _plain_after(program, i):
    return [(k, s) for k, s in _plain_stmts(program) if k > i]


def _as_slice_moves(program) -> list[Transform]:
    """Inputs whose in-place updates are gathered only to be returned: keep them sliced."""
    gathered_outputs = set()
    for out in program.outputs:
        try:
            stmt = program.stmt_defining(out.name)
        except KeyError:
            continue
        if not isinstance(stmt.op, ir.REGION_OPS) and isinstance(stmt.op, ir.AllGather):
            src = program.stmt_defining(stmt.op.x)
            if not isinstance(src.op, ir.REGION_OPS) and isinstance(src.op, ir.Update):
                gathered_outputs.add(src.op.target)
    names = tuple(v.name for v in program.inputs if v.name in gathered_outputs)
    # Which state may stay sliced is the user's call (weights the next forward pass reads must
    # be gathered; optimizer moments need not), so every non-empty subset is a move; state
    # tensors per program are few (Adam: w, m, v), and past 4 only the whole set is tried.
    if len(names) > 4:
        return [AsSlice(names)]
    return [AsSlice(tuple(n for k, n in enumerate(names) if mask >> k & 1))
            for mask in range(1, 1 << len(names))]


def _as_fused(window):
    """A window as Fuse orders it: with a per-row reduction (AllReduce + residual + RMSNorm,
    whose reorder leaves a gather between the residual and the norm) the gathers that nothing
    later reads move to the kernel's end (transforms.fusion.gathers_last), so the whole window
    is one fused collective. Other windows stay as they are: the optimizer studies' candidate
    lists do not change (tests/golden/schedules.txt)."""
    if any(isinstance(s.op, ir.ReduceAxis) for s in window):
        return gathers_last(window)
    return window


_ROOTED = ("reduce", "broadcast", "reducebroadcast")


def _fuse_moves(program) -> list[Transform]:
    """Maximal windows of consecutive plain statements that form a fused kernel, and for a
    rooted fusion (Reduce/Broadcast at a root) also each shorter rooted window in it."""
    plain = _plain_stmts(program)
    windows = []
    for a in range(len(plain)):
        window = []
        for k in range(a, len(plain)):
            if k > a and plain[k][0] != plain[k - 1][0] + 1:
                break  # a region sits in between
            window.append(plain[k][1])
            if len(window) >= 2 and fused_kind_of(_as_fused(window)) is not None:
                # Longest windows are the interesting ones; shorter ones come from other starts.
                nxt = plain[k + 1][1] if k + 1 < len(plain) else None
                if nxt is None or fused_kind_of(_as_fused(window + [nxt])) is None:
                    windows.append(tuple(s.outs[0].name for s in window))
    # Drop windows that are the tail of a longer one (fusing less of the same run).
    maximal = [w for w in windows
               if not any(len(o) > len(w) and o[-len(w):] == w for o in windows)]
    # A rooted fusion (Reduce and/or Broadcast with the root's computation) is a different
    # kernel for each part of its window: the root alone pulls every rank's input (reduce),
    # stores into every rank (broadcast), or both; which is fastest depends on P and size
    # (design note 48), so every legal rooted sub-window is proposed, not only the longest.
    by_name = {s.outs[0].name: s for _, s in plain}
    for w in list(maximal):
        if fused_kind_of([by_name[n] for n in w]) not in _ROOTED:
            continue
        for a in range(len(w)):
            for b in range(a + 2, len(w) + 1):
                sub = w[a:b]
                if sub not in maximal and fused_kind_of([by_name[n] for n in sub]) in _ROOTED:
                    maximal.append(sub)
    # A whole AllReduce fused with its row computation is one kernel; the computation alone
    # (one row kernel after NCCL's AllReduce) is another, and stays proposed.
    for w in list(maximal):
        if isinstance(by_name[w[0]].op, ir.AllReduce) and len(w) > 2 and w[1:] not in maximal \
                and fused_kind_of([by_name[n] for n in w[1:]]) is not None:
            maximal.append(w[1:])
    return [Fuse(tuple(n for n in w if not isinstance(program.stmt_defining(n).op, ir.Slice)))
            for w in maximal]


def _overlap_moves(program) -> list[Transform]:
    moves = []
    for prod, cons in zip(program.stmts, program.stmts[1:]):
        if isinstance(prod.op, ir.Overlapped) or isinstance(cons.op, ir.Overlapped):
            continue
        if not set(cons.op.operands()) & {v.name for v in prod.outs}:
            continue
        if overlap_form(prod, cons) is None:
            continue  # a pair no backend pipelines (Overlap refuses it)
        # Worth pipelining: a MatMul feeding a collective (model parallel), or transfers that
        # cross a stage boundary (pipeline parallel). A ReduceScatter overlapped with its own
        # AllGather is just an AllReduce, which the fused kernels already pipeline.
        leaves = [*prod.leaves(), *cons.leaves()]
        if not any(isinstance(s.op, (ir.MatMul, ir.Send)) for s in leaves):
            continue
        moves += [Overlap(prod.outs[0].name, cons.outs[0].name, c) for c in OVERLAP_CHUNKS]
    return moves


def _algorithm_moves(program) -> list[Transform]:
    """Every other algorithm of a fused whole AllReduce + row computation (two-shot as fused;
    pipelined, one-shot and Lamport; transforms.ALLREDUCE_ALGORITHMS): which is fastest
    depends on P, T, H, the dtype and the GPU."""
    return [AllReduceAlgorithm(s.outs[0].name, a) for s in program.stmts
            if isinstance(s.op, ir.Fused) and s.op.kind == "allreduce" and s.op.engine == "sm"
            and s.op.algorithm == "two-shot" and isinstance(s.op.body[0].op, ir.AllReduce)
            for a in ("pipelined", "one-shot", "lamport")]


def candidate_moves(program: ir.Program, placement: Placement | None = None
                    ) -> list[Transform]:
    """Every transform worth trying on `program` (legality is checked by the caller); on a
    `placement` of several nodes also the hierarchical split of every AllReduce into nodes of
    its GPUs."""
    allreduces = [s for _, s in _plain_stmts(program)
                  if isinstance(s.op, ir.AllReduce) and s.op.sub is None]
    splits = [Split(s.out.name) for s in allreduces]
    if placement is not None and placement.nodes > 1:
        # only where the AllReduce's group spans nodes: a group inside one node (a mesh's
        # tensor-parallel axis) has no node level to split at
        g = placement.gpus_per_node
        splits += [HierarchicalSplit(s.out.name, g) for s in allreduces
                   if (n := placement.group_size(program.value(s.op.x).type.group)) is None
                   or n > g]
    return (splits + _reorder_moves(program) + _as_slice_moves(program) + _fuse_moves(program)
            + _overlap_moves(program) + _algorithm_moves(program)
            + _pipeline_moves(program, placement))


def pipeline_chunk_counts(program: ir.Program, rs: ir.Stmt,
                          placement: Placement | None) -> tuple[int, ...]:
    """The chunk counts worth proposing for a pipelined hierarchy whose node ReduceScatter is
    `rs`, chosen by size: those of PIPELINE_CHUNKS that divide a rank's node slice and leave
    pieces of at least PIPELINE_MIN_CHUNK elements (4 where the placement binds no size)."""
    extent = sympy.sympify(program.value(rs.op.x).type.shape[rs.op.dim]) / rs.op.sub.per_node
    if placement is not None:
        extent = extent.subs({sympy.Symbol(k, integer=True, positive=True): v
                              for k, v in placement.sizes})
    if not extent.is_Integer:
        return (4,)
    n = int(extent)
    return tuple(c for c in PIPELINE_CHUNKS if n % c == 0 and n // c >= PIPELINE_MIN_CHUNK)


def _pipeline_moves(program, placement: Placement | None) -> list[Transform]:
    """Pipelined hierarchies of every AllReduce across nodes whose node ReduceScatter comes
    right before it and whose node gather (fused with the update or plain) right after, at
    the chunk counts chosen for the size (the search only proposes what applies)."""
    if placement is None or placement.nodes == 1:
        return []
    moves = []
    stmts = program.stmts
    for i in range(1, len(stmts) - 1):
        ar, rs = stmts[i], stmts[i - 1]
        if (isinstance(ar.op, ir.AllReduce) and ar.op.sub is not None
                and ar.op.sub.axis == "inter" and isinstance(rs.op, ir.ReduceScatter)
                and rs.op.sub is not None):
            moves += [PipelineHierarchy(ar.out.name, c)
                      for c in pipeline_chunk_counts(program, rs, placement)]
    return moves


# ---------------------------------------------------------------- search


def _candidate_name(transforms) -> str:
    if not transforms:
        return "unscheduled"
    chunked = (Overlap, PipelineHierarchy)
    return "+".join(t.name + (f"{t.chunks}" if isinstance(t, chunked) else "")
                    + (f"-{t.algorithm}" if isinstance(t, AllReduceAlgorithm) else "")
                    for t in transforms)


def search(program: ir.Program, max_depth: int = 8, max_candidates: int = 200,
           placement: Placement | None = None) -> SearchResult:
    """Breadth-first search over legal transform sequences, deduplicated by printed IR.

    Given a `placement` (a cluster's nodes), only schedules that cluster can run are proposed
    (`verify(program, placement)`: no fused collective kernel across NVLink domains), and the
    hierarchical split is a move where the placement has several nodes."""
    seen = {str(program): Candidate("unscheduled", (), program)}
    queue = deque([(program, ())])
    truncated = False
    while queue:
        current, trace = queue.popleft()
        if len(trace) >= max_depth:
            truncated = truncated or bool(candidate_moves(current, placement))
            continue
        for move in candidate_moves(current, placement):
            try:
                nxt = move.apply(current)
                if placement is not None:
                    verify(nxt, placement)  # runnable on the cluster, or not proposed
            except WorkbenchError:
                continue  # illegal here (or not on this cluster); check() gives the reason
            key = str(nxt)
            if key in seen:
                continue
            if len(seen) >= max_candidates:
                truncated = True
                queue.clear()
                break
            seen[key] = Candidate(_candidate_name(trace + (move,)), trace + (move,), nxt)
            queue.append((nxt, trace + (move,)))
    # Equal names (the same kinds of transform with other arguments) are told apart by a
    # digest of their transforms, never by their order in the search, which depends on the
    # cluster: a label names the same schedule on every cluster it appears on.
    counts = Counter(c.name for c in seen.values())
    out = [c if counts[c.name] == 1 else
           Candidate(f"{c.name}#{transforms_digest(c.transforms)}", c.transforms, c.program)
           for c in seen.values()]
    return SearchResult(tuple(out), truncated, max_depth, max_candidates)


def transforms_digest(transforms) -> str:
    """6 hex digits of the sha256 of the transforms' replayable JSON: what tells apart
    candidates whose transforms are of the same kinds."""
    text = json.dumps([t.to_json() for t in transforms], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def label_named(result: SearchResult, schedules: dict) -> dict[str, str]:
    """candidate name -> the named schedule that produces the same program, where one does."""
    by_ir = {}
    for name, s in schedules.items():
        try:
            by_ir[str(s.apply())] = name
        except WorkbenchError:
            continue  # an illegal named schedule labels nothing; the candidates stand
    return {c.name: by_ir[str(c.program)] for c in result.candidates if str(c.program) in by_ir}


# ---------------------------------------------------------------- JSON records


def save(result: SearchResult, program: ir.Program, path: Path) -> None:
    """Write the candidates as JSON: enough to replay each one on the same program."""
    record = {
        "program": program.name,
        "program_ir_sha256_16": hashlib.sha256(str(program).encode()).hexdigest()[:16],
        "truncated": result.truncated,
        "max_depth": result.max_depth,
        "max_candidates": result.max_candidates,
        "candidates": [c.to_json() for c in result.candidates],
    }
    write_atomic(path, json.dumps(record, indent=1) + "\n")


def load_candidates(path: Path) -> dict:
    """Read a candidates file written by `save`; errors name the file and the field."""
    path = Path(path)
    fix = "write one with `workbench schedules PROGRAM --autotune --json FILE`"
    if not path.exists():
        raise ProgramFileError(f"candidates file must exist, got no file at {path}; {fix}")
    try:  # a regular file of at most 64 MiB (a FIFO blocked, a 1 GB file was parsed whole)
        record = json.loads(read_bounded(path, "candidates file", fix, follow=True))
    except WorkbenchError as e:
        raise ProgramFileError(str(e)) from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ProgramFileError(f"candidates file {path} must be JSON, got "
                               f"{type(e).__name__}: {e}"[:300]) from None
    problem = _candidates_problem(record)
    if problem:
        raise ProgramFileError(f"candidates file {path} must be a JSON record with a "
                               f"'candidates' list of {{name, transforms}}, got {problem}; write "
                               "it with `workbench schedules PROGRAM --autotune --json FILE`")
    return record


def _candidates_problem(record) -> str:
    """What is wrong with a candidates record's shape, or '' (the values are checked on replay,
    transform by transform)."""
    if not isinstance(record, dict):
        return f"a {type(record).__name__}"
    cands = record.get("candidates")
    if not isinstance(cands, list) or not cands:
        return f"candidates = {cands!r:.60}"
    for k, c in enumerate(cands):
        if not (isinstance(c, dict) and isinstance(c.get("name"), str)
                and isinstance(c.get("transforms"), list)
                and all(isinstance(d, dict) for d in c["transforms"])):
            return f"candidate {k} = {c!r:.60}"
    return ""


def replay(program: ir.Program, candidate: dict) -> ir.Program:
    """Apply a saved candidate's transforms to `program` (each checked and verified)."""
    for data in candidate["transforms"]:
        program = transform_from_json(data).apply(program)
    return program
