"""The steps that run in pieces: an overlap (producer and consumer chunk by chunk on two
streams) and a fused collective whose bytes copy engines move (peer copies, a kernel per
piece, barriers); with the grid sizes of their kernels and the chunking of NCCL calls.
"""

from __future__ import annotations

import dataclasses

from codegen.plan import (
    PEER,
    CopyEngineStep,
    OverlapStep,
)
from codegen.spec import THREADS
from workbench import ir
from workbench.errors import RuntimeFault
from workbench.runtime.gpu import ITEMSIZE, Gemm
from workbench.runtime.launches import RunView


def elementwise_grid(extent: int, vec: int, sm_count: int) -> int:
    """Blocks of an elementwise kernel over `extent` elements, `vec` per thread: enough for
    one pass, at most 16 per SM (the kernels are grid-stride loops)."""
    return max(1, min(-(-extent // (vec * THREADS)), sm_count * 16))


def topk_grid(rows: int, sm_count: int) -> int:
    """Blocks of a top-k kernel: a warp per row (THREADS / 32 rows a block) for one pass, at
    most 16 per SM (the kernel is a grid-stride loop over rows)."""
    return max(1, min(-(-rows // (THREADS // 32)), sm_count * 16))


def nccl_chunk(op: str, src: int, dst: int, count: int, dtype: str, i: int, chunks: int,
               P: int) -> tuple[int, int, int]:
    """Source and destination addresses and count of chunk i of an NCCL op on `count`
    elements per rank (codegen.plan.NcclStep): the chunk's rows of every tensor, whose parts
    are P times longer on the side that holds every rank's part (the source of
    reduce_scatter, the destination of all_gather)."""
    part = count // chunks
    size = ITEMSIZE[dtype]
    src_mul, dst_mul = ir.collective_named(op).counts(1, P)
    return src + i * part * src_mul * size, dst + i * part * dst_mul * size, part


def by_root_pieces(op: str, src: int, dst: int, count: int, dtype: str, i: int, chunks: int,
                   P: int, rank: int) -> list[tuple[str, int, int, int, int]]:
    """Chunk i of `chunks` of an NCCL all_gather or reduce_scatter chunked by root
    (codegen.plan.NcclStep.by_root), as (op, src, dst, count, root) calls: the chunk is rows
    [i/chunks, (i+1)/chunks) of the whole tensor (P * count elements); each root's part that
    it covers is one ncclBroadcast from that root (all_gather) or one ncclReduce onto it
    (reduce_scatter), so every chunk lands in whole-tensor row order."""
    size = ITEMSIZE[dtype]
    whole = count * P
    first, last = i * whole // chunks, (i + 1) * whole // chunks
    pieces = []
    for root in range(P):
        a, b = max(first, root * count), min(last, (root + 1) * count)
        if a >= b:
            continue
        inner = a - root * count  # offset inside the root's part
        if op == "all_gather":
            pieces.append(("broadcast", src + inner * size, dst + a * size, b - a, root))
        else:
            here = src + a * size
            pieces.append(("reduce", here, dst + inner * size if rank == root else here,
                           b - a, root))
    return pieces


def exchange_order(rank: int, chunks: int, P: int) -> list[int]:
    """The row chunks of a rotated exchange (codegen.plan.NcclStep.exchange) in the order
    `rank` takes them: it starts at the chunk holding its own block's first row, (i + rank C /
    P) mod C, so at every step the ranks work on different sources' (or destinations') rows
    and every link carries a piece."""
    start = rank * chunks // P
    return [(start + i) % chunks for i in range(chunks)]


def exchange_pieces(side: str, i: int, chunks: int, P: int, rank: int,
                    count: int) -> list[tuple[str, int, int, int, int]]:
    """Step i of a rotated exchange of an all_to_all on `count` elements per rank (blocks of
    count / P: rank r's block s is rank s's block r), as this rank's pieces (kind, peer,
    src_offset, dst_offset, elements), offsets in elements: "send" to a peer (dst_offset
    unused), "recv" from one (src_offset unused), or "copy" of this rank's own block.

    side "recv" (dispatch -> GEMM): each rank q receives its chunk exchange_order(q)[i] of the
    destination rows at step i, from the sources whose blocks the chunk covers; side "send"
    (GEMM -> combine): each rank q sends its chunk exchange_order(q)[i] of the source rows to
    the destinations whose blocks it covers. Between a pair of ranks a step holds at most one
    send and its one matching recv, so NCCL's grouped send/recv match in any order."""
    if count % P or count % chunks:
        raise RuntimeFault(f"a rotated exchange of {count} elements per rank must split into "
                           f"{P} blocks and {chunks} chunks evenly, got a remainder; pick "
                           f"chunks dividing the rows (s.overlap(..., chunks=...))")
    block, size = count // P, count // chunks

    def cut(q: int, t: int) -> tuple[int, int] | None:
        """Rank q's chunk of step i, cut to block t: [a, b) in q's own rows."""
        j = exchange_order(q, chunks, P)[i]
        a, b = max(j * size, t * block), min((j + 1) * size, (t + 1) * block)
        return (a, b) if a < b else None

    pieces = []
    for peer in range(P):
        mine, theirs = cut(rank, peer), cut(peer, rank)
        if side == "recv":  # I receive my chunk's rows of block `peer`; I send `peer` its rows
            send = theirs and (peer * block + theirs[0] - rank * block, theirs[0], theirs)
            recv = mine and (rank * block + mine[0] - peer * block, mine[0], mine)
        else:  # I send my chunk's rows of block `peer`; `peer` sends me its chunk's of mine
            send = mine and (mine[0], rank * block + mine[0] - peer * block, mine)
            recv = theirs and (theirs[0], peer * block + theirs[0] - rank * block, theirs)
        if peer == rank:
            if send:  # my own block: a device copy, no NCCL
                pieces.append(("copy", rank, send[0], send[1], send[2][1] - send[2][0]))
            continue
        if send:
            pieces.append(("send", peer, send[0], send[1], send[2][1] - send[2][0]))
        if recv:
            pieces.append(("recv", peer, recv[0], recv[1], recv[2][1] - recv[2][0]))
    return pieces


def overlap_order(step: OverlapStep, rank: int, P: int) -> list[int]:
    """The row chunk of each step of an overlap on `rank`: in order, unless one side is a
    rotated exchange (an MoE's AllToAll beside a GEMM, NcclStep.exchange), whose steps take
    the rank's chunks in its own order (exchange_order) and the GEMM with them."""
    if any(getattr(x, "exchange", "") for x in (step.producer, step.consumer)):
        return exchange_order(rank, step.chunks, P)
    return list(range(step.chunks))


class OverlapRun:
    """An OverlapStep bound to this rank: producer chunks on one stream, consumer chunks on
    another; consumer chunk i waits for producer chunk i's event only. The producer is a
    MatMul (cuBLAS on rows) or an NCCL collective (its chunk's part).

    Both streams are blocking streams (pycuda's default flags), so work on the legacy default
    stream (every other step, and the timing events) orders against them both ways; the join
    at the start also keeps a run's MatMul from overwriting rows that the previous run's
    consumer may still be reading on a peer (its end barrier covers the rest)."""

    def __init__(self, run: RunView, step: OverlapStep, producer, consumer):
        import torch

        drv = run.gpu.drv
        self.run_, self.step, self.producer, self.consumer = run, step, producer, consumer
        self.producer_stream, self.consumer_stream = drv.Stream(), drv.Stream()
        self.torch_stream = torch.cuda.ExternalStream(int(self.producer_stream.handle))
        self.join = drv.Event(drv.event_flags.DISABLE_TIMING)
        self.done = [drv.Event(drv.event_flags.DISABLE_TIMING) for _ in range(step.chunks)]
        gemm = producer if isinstance(producer, Gemm) else consumer
        self.rows = gemm.m // step.chunks if isinstance(gemm, Gemm) else 0
        if isinstance(consumer, Gemm):  # AllGather -> MatMul: the GEMM on its own stream
            self.consumer_torch = torch.cuda.ExternalStream(int(self.consumer_stream.handle))
        self.order = overlap_order(step, run.local, run.P)

    def run(self) -> None:
        import torch

        C, r = self.step.chunks, self.rows
        run = self.run_
        self.join.record()  # on the legacy stream: after everything enqueued before
        self.producer_stream.wait_for_event(self.join)
        self.consumer_stream.wait_for_event(self.join)
        for i in range(C):
            j = self.order[i]  # the rows of step i (i itself unless the exchange rotates)
            if isinstance(self.producer, Gemm):
                with torch.cuda.stream(self.torch_stream):
                    self.producer(slice(j * r, (j + 1) * r))
            else:
                run.launch_chunk(self.producer, i, C, self.producer_stream)
            self.done[i].record(self.producer_stream)
            self.consumer_stream.wait_for_event(self.done[i])
            if isinstance(self.consumer, Gemm):
                with torch.cuda.stream(self.consumer_torch):
                    self.consumer(slice(j * r, (j + 1) * r))
            else:
                run.launch_chunk(self.consumer, i, C, self.consumer_stream)


class CopyEnginesRun:
    """A CopyEngineStep bound to this rank: the start barrier on the legacy stream, then per
    piece the pulls on one stream, the kernel on its window on another once they are done,
    the pushes on a third once it is done; then the end barrier on the legacy stream.

    The three streams are blocking streams (pycuda's default flags): the end barrier on the
    legacy stream waits for all of them, and the next run's pulls wait for this run's end
    through the start barrier and the join event."""

    def __init__(self, run: RunView, step: CopyEngineStep):
        drv = run.gpu.drv
        self.run_, self.step = run, step
        self.start, self.end = run.prepare(step.start), run.prepare(step.end)
        self.kernel = run.prepare(step.kernel)
        n, C = run.int_of(step.kernel.extent), step.chunks
        self.piece = n // C
        spec = step.kernel.spec
        grid = elementwise_grid(self.piece, spec.vec, run.gpu.sm_count)
        self.kernel = dataclasses.replace(self.kernel, grid=grid)
        self.pulls, self.pushes = [], []
        base = run.stage * run.P
        for c in step.copies:
            size = ITEMSIZE[c.dtype]
            piece_bytes = self.piece * size
            for k in range(run.P):
                if k == run.local:
                    continue
                subs = {PEER: k}
                src_rank, dst_rank = (base + k, run.gpu.rank) if c.pull else \
                    (run.gpu.rank, base + k)
                src = run.pointer(c.src, src_rank) + run.int_of(
                    substitute(c.src_offset, subs)) * size
                dst = run.pointer(c.dst, dst_rank) + run.int_of(
                    substitute(c.dst_offset, subs)) * size
                (self.pulls if c.pull else self.pushes).append((src, dst, piece_bytes))
        self.streams = [drv.Stream() for _ in range(3)]
        flags = drv.event_flags.DISABLE_TIMING
        self.join = drv.Event(flags)
        self.pulled = [drv.Event(flags) for _ in range(C)]
        self.computed = [drv.Event(flags) for _ in range(C)]

    def run(self) -> None:
        drv = self.run_.gpu.drv
        pull_s, kernel_s, push_s = self.streams
        self.run_.launch(self.start)
        self.join.record()  # on the legacy stream, after the start barrier
        for st in self.streams:
            st.wait_for_event(self.join)
        for i in range(self.step.chunks):
            at = i * self.piece
            for src, dst, nbytes in self.pulls:
                drv.memcpy_dtod_async(dst + i * nbytes, src + i * nbytes, nbytes, pull_s)
            self.pulled[i].record(pull_s)
            kernel_s.wait_for_event(self.pulled[i])
            self.run_.launch(self.kernel, kernel_s, window=(at, self.piece))
            self.computed[i].record(kernel_s)
            push_s.wait_for_event(self.computed[i])
            for src, dst, nbytes in self.pushes:
                drv.memcpy_dtod_async(dst + i * nbytes, src + i * nbytes, nbytes, push_s)
        self.run_.launch(self.end)  # legacy stream: after all three streams' work


def substitute(expr, subs: dict):
    import sympy

    return sympy.sympify(expr).subs(subs)

