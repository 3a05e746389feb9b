"""Execute a lowered Plan on this rank's GPU (pycuda on the primary context, NCCL through
nccl4py or torch.distributed), with inputs, poisoning, outputs and CUDA-event timing.

A pipeline's ranks are numbered stage-major (global rank = stage * P + local rank): a rank
allocates the buffers of its own stage, runs the steps of its stage (a Send on both of its
stages), and runs its collectives on its stage's communicator (Gpu.use_stages).

Every GPU library is imported inside the functions here; the worker process imports this
module only once it has a GPU.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from codegen.plan import (  # noqa: F401  (collective_grid: the runtime's name for it too)
    GRID_RULES,
    MAX_BLOCKS,
    RANK,
    ChunkedStep,
    CopyEngineStep,
    GemmStep,
    KernelStep,
    NcclStep,
    OverlapStep,
    PipelineStep,
    Plan,
    ReduceStep,
    SendStep,
    check_sizes,
    collective_grid,
)
from codegen.spec import ROWS_CACHE, ROWS_MAX_THREADS, THREADS
from workbench import interpreter
from workbench.errors import RuntimeFault
from workbench.runtime.chunked import (
    CopyEnginesRun,
    OverlapRun,
    by_root_pieces,
    elementwise_grid,
    exchange_pieces,
    nccl_chunk,
    topk_grid,
)
from workbench.runtime.gpu import ITEMSIZE, POISON, Gemm, Gpu, Reduction, rank_part
from workbench.runtime.launches import (
    ChunkedCall,
    KernelLaunch,
    LibraryCall,
    NcclCall,
    P2pCall,
    PartsCall,
)
from workbench.runtime.pipeline_run import PipelineRun, node_part

# Blocks per SM of a row kernel's grid when its register count is unknown: 512-thread blocks
# fit at most 4 per SM (2048 threads).
ROW_BLOCKS_PER_SM = 4


def resident_row_blocks(num_regs: int | None, threads: int = THREADS) -> int:
    """Blocks of `threads` threads that fit on one SM by registers (65536 a SM, given out per
    warp in units of 256) and threads (2048), 1-4: a row kernel's grid is that many a SM, so
    every block is resident and grid-strides over rows. A larger grid leaves blocks waiting
    for a first wave to finish all its rows, then runs them on SMs left a block or two each
    (with 3 resident of 4 a SM, the last quarter of the blocks ran alone)."""
    if not num_regs:
        return ROW_BLOCKS_PER_SM
    per_warp = -(-num_regs * 32 // 256) * 256
    by_regs = (65536 // per_warp) // (threads // 32)
    return max(1, min(ROW_BLOCKS_PER_SM, 2048 // threads, by_regs))


def rows_threads(cols: int, cache: int, most: int = ROWS_MAX_THREADS) -> int:
    """Threads of a block of a "rows" row kernel (one row a block, design note 91): the fewest
    whole warps, a power of two from 32 to `most`, that hold a row of `cols` elements at
    `cache` elements a thread (ROWS_CACHE when nothing is cached: then threads loop)."""
    per = cache or ROWS_CACHE
    threads = 32
    while threads < most and threads * per < cols:
        threads *= 2
    return threads


def rows_grid(rows: int, threads: int, peers: bool, sm_count: int, min_blocks: int = 2) -> int:
    """The grid of a "rows" row kernel: a block a row; a fused collective with peers (P >= 2)
    meets them at barriers or spins on their data, so every block must be resident: at most
    the threads a SM its launch bound keeps (`min_blocks` x ROWS_MAX_THREADS: 2048 at 32
    registers), within the flags' MAX_BLOCKS."""
    if not peers:
        return max(1, rows)
    per_sm = max(1, min_blocks * ROWS_MAX_THREADS // threads)
    return max(1, min(rows, sm_count * per_sm, MAX_BLOCKS))


@dataclass
class Timing:
    """Per-rank CUDA-event times of one measured thing, in ms."""

    times_ms: list

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)


class PlanRun:
    """A Plan bound to sizes on this rank: buffers allocated, peers mapped, kernels compiled."""

    def __init__(self, gpu: Gpu, plan: Plan, sizes: dict, blocks_per_sm: int | None = None):
        # blocks_per_sm: a fused collective's grid per SM (1 or 2), over the plan's
        # options (CodegenOptions.collective_blocks_per_sm) when given
        if plan.refusal:  # a step priced and simulated only (RingFusedStep): no runner
            raise RuntimeFault(plan.refusal)
        self.gpu, self.plan = gpu, plan
        self.blocks_per_sm = (plan.options.collective_blocks_per_sm if blocks_per_sm is None
                              else max(1, min(2, blocks_per_sm)))  # 2: the launch bound
        world = plan.per_node * plan.nodes if plan.per_node else plan.world
        if world != gpu.world:
            raise RuntimeFault(f"a plan for {len(plan.groups)} stage(s) of {plan.P} ranks must "
                               f"run on {world} ranks, got {gpu.world}; lower it with "
                               f"P = {gpu.world // len(plan.groups)} (Gpu.use_stages)")
        self.P = plan.P
        self.stage, self.local = divmod(gpu.rank, plan.P)
        # A node's view (a hierarchical split): P is the node's ranks, peers are this node's
        # (global rank node * P + index), every node runs stage 0's buffers and steps.
        self.first = gpu.rank - self.local if plan.per_node else 0
        if plan.per_node:
            self.stage = 0
        self.bound = interpreter.bind_sizes(plan.program, sizes)
        # sizes the plan's chunks cannot take: refused before anything is allocated (the
        # CLI refuses them before any rank starts, from the same conditions)
        check_sizes(plan, self.bound)
        self.subs = dict(self.bound)

        self.subs[RANK] = self.local
        drv = gpu.drv
        self.allocs, self.ptr, self.numel, self.nbytes, self.ipc = {}, {}, {}, {}, []
        self.pristine: dict[str, object] = {}  # clobbered input buffer -> its copy at upload
        self.buffers = [b for b in plan.buffers if b.group == self.stage]
        for b in self.buffers:
            n = self.int_of(b.numel)
            self.numel[b.name] = n
            self.nbytes[b.name] = max(16, n * ITEMSIZE[b.dtype])
            self.allocs[b.name] = drv.mem_alloc(self.nbytes[b.name])
            self.ptr[b.name] = int(self.allocs[b.name])
        for b in self.buffers:
            if b.dtype == "u32":
                drv.memset_d32(self.ptr[b.name], 0, self.numel[b.name])
        drv.Context.synchronize()
        self.handles = self._exchange_handles()
        self.mapped: dict[tuple[str, int], int] = {}
        self.epoch = 0
        self.steps = plan.steps_of(self.stage)
        self.launches = [self.prepare(s) for s in self.steps]

    def int_of(self, expr) -> int:
        """A size expression's value with this run's sizes and local rank bound."""
        import sympy

        value = sympy.sympify(expr).subs(self.subs)
        if not value.is_Integer:
            raise RuntimeFault(f"buffer size {expr} must be an integer, got {value}")
        return int(value)

    def _exchange_handles(self) -> list[dict]:
        """Every rank's CUDA IPC handles of its peer buffers, by global rank (a collective:
        every rank of the world calls it)."""
        drv = self.gpu.drv
        mine = {b.name: bytes(drv.mem_get_ipc_handle(self.ptr[b.name]))
                for b in self.buffers if b.peer}
        return self.gpu.all_gather(mine)

    def pointer(self, name: str, rank: int) -> int:
        """The address of buffer `name` of global rank `rank` in this process (this rank's
        own allocation, or the other rank's mapped through CUDA IPC once)."""
        if rank == self.gpu.rank:
            return self.ptr[name]
        key = (name, rank)
        if key not in self.mapped:
            handle = self.handles[rank].get(name)
            if handle is None:
                raise RuntimeFault(f"rank {rank} must export buffer '{name}' (a peer buffer of "
                                   f"its stage), got no CUDA IPC handle for it; every rank "
                                   "must lower the same program with the same P")
            drv = self.gpu.drv
            h = drv.IPCMemoryHandle(bytearray(handle), drv.ipc_mem_flags.LAZY_ENABLE_PEER_ACCESS)
            self.ipc.append(h)
            self.mapped[key] = int(h)
        return self.mapped[key]

    def prepare(self, step):
        """A plan step bound to this rank (workbench.runtime.launches), by its class's entry
        in PREPARERS."""
        preparer = PREPARERS.get(type(step))
        if preparer is None:
            raise RuntimeFault(f"the runtime must know how to run every plan step, got "
                               f"{type(step).__name__}, which has no entry in "
                               "executor.PREPARERS; add one")
        return preparer(self, step)

    def address(self, loc, dtype: str) -> int:
        """Device address of a value's first element on this rank."""
        return self.ptr[loc.buffer] + self.int_of(loc.offset) * ITEMSIZE[dtype]

    # -- running

    def clobbered_inputs(self) -> list[str]:
        """This rank's buffers that hold an input and that the program also writes: an
        AllReduce reduced in place into its dead input, an Update's target."""
        inputs = {v.name for v in self.plan.program.inputs}
        held = {b.name for b in self.buffers if b.holds_input}
        return sorted({loc.buffer for name, loc in self.plan.locs.items()
                       if name not in inputs and loc.buffer in held})

    def restore_inputs(self) -> None:
        """Enqueue copies that put back every clobbered input as uploaded (device to device,
        on the default stream; a timed run synchronizes after them, before its start event).

        Every timed run must see the same inputs. Without this, an AllReduce reduced in place
        over P ranks multiplies the gradients by P each run: f16 gradients overflow after
        ~16 runs, fp32 squares after ~64, and the update kernels then divide Inf and NaN on
        the IEEE slow paths (GPU run 18: Adam's w1 1.65 ms on 2x H200 against 1.07 ms with the
        same kernel first after the AllReduce; runs 12-16 had timed this)."""
        for name, copy in self.pristine.items():
            self.gpu.drv.memcpy_dtod_async(self.ptr[name], copy, self.nbytes[name])

    def _start_idle(self) -> None:
        """Restore the inputs and wait: the GPU is idle when a timed run starts, as before
        restores existed (a copy still running would hide the host's issue of the first
        steps; GPU run 19)."""
        self.restore_inputs()
        self.gpu.drv.Context.synchronize()

    def _warm_up(self, runs: int) -> None:
        for _ in range(runs):
            self.restore_inputs()
            self.run()
        self.gpu.drv.Context.synchronize()

    def run(self) -> None:
        """Enqueue one execution of the program (asynchronous, on the default stream)."""
        for item in self.launches:
            self._enqueue(item)

    def _enqueue(self, item) -> None:
        """Enqueue one prepared launch, by its class's entry in RUNNERS."""
        RUNNERS[type(item)](self, item)

    def launch_chunk(self, item, i: int, chunks: int, stream=None) -> None:
        """Enqueue chunk i of `chunks` of a prepared kernel or NCCL call, on pycuda `stream`
        (None: the default stream)."""
        if isinstance(item, NcclCall):
            self.nccl(item, int(stream.handle) if stream is not None else 0, chunk=i,
                      chunks=chunks)
        else:
            self.launch(item, stream, chunk=i)

    def nccl(self, item: NcclCall, stream: int = 0, chunk: int | None = None,
             chunks: int = 1) -> None:
        """Enqueue a prepared NCCL call, or its part of chunk `chunk` of `chunks`."""
        step, src, dst, count = item.step, item.src, item.dst, item.count
        if chunk is not None and step.exchange:  # a rotated exchange's step (an MoE overlap)
            size = ITEMSIZE[step.dtype]
            pieces = [(kind, peer, src + so * size, dst + do * size, n) for kind, peer, so, do, n
                      in exchange_pieces(step.exchange, chunk, chunks, self.P, self.local,
                                         count)]
            self.gpu.exchange(pieces, step.dtype, stream)
            return
        if chunk is not None and step.by_root:
            for op, s, d, n, root in by_root_pieces(step.op, src, dst, count, step.dtype, chunk,
                                                    chunks, self.P, self.local):
                self.gpu.collective(op, step.reduce or "", s, d, n, step.dtype, root=root,
                                    stream=stream)
            return
        if chunk is not None:
            src, dst, count = nccl_chunk(step.op, src, dst, count, step.dtype, chunk, chunks,
                                         self.P)
        # the rail's communicator for an AllReduce across nodes (Gpu.use_nodes)
        across = {"comm": step.comm} if step.comm != "group" else {}
        self.gpu.collective(step.op, step.reduce, src, dst, count, step.dtype, root=step.root,
                            stream=stream, **across)

    def launch(self, item: KernelLaunch, stream=None, chunk: int | None = None,
               window: tuple[int, int] | None = None) -> None:
        """Launch one prepared kernel (on `stream`; `chunk`: the launch's chunk parameter;
        `window`: the (first, count) elements of a windowed kernel's domain)."""
        args, params = item.args, item.step.spec.params
        if window is not None:
            kinds = [p.kind for p in params]
            args[kinds.index("win_first")] = np.int64(window[0])
            args[kinds.index("win_count")] = np.int64(window[1])
        if item.epoch_at is not None:
            # One epoch per collective launch, the same sequence on every rank of the stage.
            self.epoch += 1
            args[item.epoch_at] = np.uint32(self.epoch)
        if item.seq_at is not None:
            # One sequence number per run of the step (chunk 0 starts a run), the same on the
            # sending and the receiving rank.
            if not chunk:
                item.runs[0] += 1
            args[item.seq_at] = np.uint32(item.runs[0] & 0xFFFFFFFF)
        if chunk is not None:
            at = next(i for i, p in enumerate(params) if p.kind == "chunk")
            args[at] = np.int64(chunk)
        item.fn.prepared_async_call((item.grid, 1, 1), (item.threads, 1, 1), stream, *args)

    def upload(self, inputs: dict) -> None:
        """Copy this rank's part of each logical input into its buffer."""
        drv = self.gpu.drv
        for v in self.plan.program.inputs:
            if not self.holds(v.name):
                continue  # another stage's input
            value = np.asarray(inputs[v.name], dtype=interpreter.numpy_dtype(v.type.dtype))
            part = (node_part(value, v.type, self.gpu.rank, self.P, self.plan.slice_chunks)
                    if self.plan.per_node else rank_part(value, v.type, self.local, self.P))
            drv.memcpy_htod(self.ptr[self.plan.locs[v.name].buffer],
                            np.ascontiguousarray(part))
        for name in self.clobbered_inputs():  # what restore_inputs puts back before each run
            if name not in self.pristine:
                self.pristine[name] = drv.mem_alloc(self.nbytes[name])
            drv.memcpy_dtod(self.pristine[name], self.ptr[name], self.nbytes[name])
        drv.Context.synchronize()

    def poison(self) -> None:
        """Fill every buffer the run must write (all but inputs and flags) with NaN."""
        drv = self.gpu.drv
        for b in self.buffers:
            if b.holds_input or b.dtype == "u32":
                continue
            bits, pattern = POISON[b.dtype]
            fill = drv.memset_d32 if bits == 32 else drv.memset_d16
            fill(self.ptr[b.name], pattern, self.numel[b.name])
        drv.Context.synchronize()

    def holds(self, name: str) -> bool:
        """Whether this rank holds value `name` (it lives in a buffer of this rank's stage)."""
        loc = self.plan.locs.get(name)
        return loc is not None and loc.buffer in self.ptr

    def download(self, names) -> dict:
        """This rank's array of each named value (its local shape)."""
        drv = self.gpu.drv
        out = {}
        types = {v.name: v.type for s in self.plan.program.leaves() for v in s.outs}
        types.update({v.name: v.type for v in self.plan.program.inputs})
        for name in names:
            if not self.holds(name):
                raise RuntimeFault(f"value '{name}' must live on this rank's stage "
                                   f"{self.plan.groups[self.stage]} to be downloaded, got it on "
                                   "another stage; download what PlanRun.holds")
            loc = self.plan.locs[name]
            t = types[name]
            shape = tuple(interpreter.concrete(d, self.bound) for d in t.local_shape())
            arr = np.empty(shape, dtype=interpreter.numpy_dtype(t.dtype))
            ptr = self.ptr[loc.buffer] + self.int_of(loc.offset) * ITEMSIZE[t.dtype.name]
            drv.memcpy_dtoh(arr, ptr)
            out[name] = arr
        return out

    def time(self, warmup: int, reps: int) -> Timing:
        """CUDA-event time of each of `reps` runs after `warmup` runs, in ms; each run on the
        inputs as uploaded (`restore_inputs`, outside the timed region)."""
        drv = self.gpu.drv
        self._warm_up(warmup)
        times = []
        start, end = drv.Event(), drv.Event()
        for _ in range(reps):
            self._start_idle()
            start.record()
            self.run()
            end.record()
            end.synchronize()
            times.append(start.time_till(end))
        return Timing(times)

    def time_steps(self, warmup: int, reps: int) -> list[tuple[str, list[float]]]:
        """(step label, CUDA-event ms of each of `reps` runs) per step of this rank, in order:
        a run with an event on the default stream between consecutive steps. A step's time is
        what it adds in the sequence (host gaps included, as in a whole run); the events cost
        a little, so the whole run stays timed by `time`, without them."""
        drv = self.gpu.drv
        self._warm_up(warmup)
        events = [drv.Event() for _ in range(len(self.launches) + 1)]
        times: list[list[float]] = [[] for _ in self.launches]
        for _ in range(reps):
            self._start_idle()
            events[0].record()
            for item, after in zip(self.launches, events[1:]):
                self._enqueue(item)
                after.record()
            events[-1].synchronize()
            for i, t in enumerate(times):
                t.append(events[i].time_till(events[i + 1]))
        return [(step_label(step), t) for step, t in zip(self.steps, times)]

    def free(self) -> None:
        self.gpu.drv.Context.synchronize()
        for h in self.ipc:
            h.close()
        for a in [*self.allocs.values(), *self.pristine.values()]:
            a.free()
        self.pristine = {}
        self.launches = []


# -- preparing plan steps and running prepared launches: one entry per class


def _prepare_nccl(run: PlanRun, step: NcclStep) -> NcclCall:
    return NcclCall(step, run.address(step.src, step.dtype), run.address(step.dst, step.dtype),
                    run.int_of(step.count))


def _prepare_send(run: PlanRun, step: SendStep) -> P2pCall:
    sending = run.stage == step.src_group
    peer = (step.dst_group if sending else step.src_group) * run.P + run.local
    loc = step.src if sending else step.dst
    return P2pCall("send" if sending else "recv", run.address(loc, step.dtype),
                   run.int_of(step.count), step.dtype, peer)


def _prepare_gemm(run: PlanRun, step: GemmStep) -> LibraryCall:
    return LibraryCall(Gemm(run, step))


def _prepare_reduce(run: PlanRun, step: ReduceStep) -> LibraryCall:
    return LibraryCall(Reduction(run, step))  # a library call, enqueued like a GEMM


def _prepare_overlap(run: PlanRun, step: OverlapStep) -> PartsCall:
    if isinstance(step.producer, GemmStep):
        producer = Gemm(run, step.producer)
    else:
        producer = run.prepare(step.producer)
    if isinstance(step.consumer, GemmStep):  # AllGather -> MatMul (chunked by root)
        return PartsCall(OverlapRun(run, step, producer, Gemm(run, step.consumer)))
    consumer = run.prepare(step.consumer)
    if isinstance(consumer, KernelLaunch):  # beside a GEMM: on the grid the plan says
        consumer = dataclasses.replace(consumer, grid=step.consumer_grid(consumer.grid))
    return PartsCall(OverlapRun(run, step, producer, consumer))


def _prepare_copy_engines(run: PlanRun, step: CopyEngineStep) -> PartsCall:
    return PartsCall(CopyEnginesRun(run, step))


def _prepare_chunked(run: PlanRun, step: ChunkedStep) -> ChunkedCall:
    return ChunkedCall(step.chunks, tuple(run.prepare(s) for s in step.steps))


def _prepare_pipeline(run: PlanRun, step: PipelineStep) -> PartsCall:
    return PartsCall(PipelineRun(run, step))


def _prepare_kernel(run: PlanRun, step: KernelStep) -> KernelLaunch:
    """A generated kernel bound to this rank: compiled (codegen renders its source, the
    plan's `source`), its argument list in parameter order, its grid."""
    spec = step.spec
    fn = run.gpu.function(spec.name, run.plan.source(spec))
    sig, args, epoch_at, seq_at = "", [], None, None
    for p in spec.params:
        if p.kind == "buf":
            sig += "P"
            args.append(np.uintp(run.ptr[p.ref]))
        elif p.kind in ("peer", "flags"):
            sig += "P"  # rank p.index of this stage (of this node, in a node's view)
            args.append(np.uintp(run.pointer(p.ref, run.first + run.stage * run.P + p.index)))
        elif p.kind == "remote":
            sig += "P"  # this local rank of stage p.index
            args.append(np.uintp(run.pointer(p.ref, p.index * run.P + run.local)))
        elif p.kind == "seq":
            sig += "I"
            seq_at = len(args)
            args.append(np.uint32(0))
        elif p.kind == "size":
            sig += "q"
            args.append(np.int64(run.bound[next(s for s in run.bound if s.name == p.ref)]))
        elif p.kind == "rank":
            sig += "i"
            args.append(np.int32(run.local))
        elif p.kind == "epoch":
            sig += "I"
            epoch_at = len(args)
            args.append(np.uint32(0))
        elif p.kind in ("chunk", "win_first", "win_count"):
            sig += "q"
            args.append(np.int64(0))  # set per launch (OverlapRun, CopyEnginesRun)
        else:
            raise RuntimeFault(f"kernel parameter kind must be known, got {p.kind}")
    fn.prepare(sig)
    extent = run.int_of(step.extent)
    rule = step.grid_rule  # lowering's decision (codegen.plan.GRID_RULES)
    if rule == "rows":
        threads = rows_threads(run.int_of(step.cols), spec.row.cache)
        grid = rows_grid(extent, threads, spec.kind == "collective" and spec.P > 1,
                         run.gpu.sm_count, spec.row.min_blocks)
        return KernelLaunch(step, fn, grid, args, epoch_at, seq_at, threads=threads)
    if rule == "collective":
        grid = collective_grid(spec, run.blocks_per_sm, run.gpu.sm_count,
                               run.plan.options.collective_grid)
    elif rule == "warp-rows":  # a warp per row (codegen/cuda/templates/topk.cu.j2)
        grid = topk_grid(extent // max(1, run.int_of(step.cols)), run.gpu.sm_count)
    elif rule == "one":
        grid = 1  # one block sums every partial (a few thousand numbers) / spins on a flag
    elif rule == "row-blocks":
        # A row kernel: a block per row (its extent), grid-stride past the blocks that its
        # registers let stay resident (design note 44)
        per_sm = resident_row_blocks(getattr(fn, "num_regs", None))
        grid = max(1, min(extent, run.gpu.sm_count * per_sm))
    elif rule == "elementwise":
        grid = elementwise_grid(extent, spec.vec, run.gpu.sm_count)
        if spec.norms:
            # One partial per block, in a buffer of MAX_BLOCKS entries.
            grid = min(grid, MAX_BLOCKS)
    else:
        raise RuntimeFault(f"a kernel step's grid rule must be one of {', '.join(GRID_RULES)}, "
                           f"got {rule!r} ({spec.name}); lower the program again (codegen "
                           "fills it)")
    return KernelLaunch(step, fn, grid, args, epoch_at, seq_at)


PREPARERS: dict[type, Callable] = {
    NcclStep: _prepare_nccl,
    SendStep: _prepare_send,
    GemmStep: _prepare_gemm,
    ReduceStep: _prepare_reduce,
    OverlapStep: _prepare_overlap,
    CopyEngineStep: _prepare_copy_engines,
    ChunkedStep: _prepare_chunked,
    PipelineStep: _prepare_pipeline,
    KernelStep: _prepare_kernel,
}
"""How each plan step class is bound to this rank (PlanRun.prepare): a new step kind adds one
entry here and one in RUNNERS for what it prepares."""


def _run_chunked(run: PlanRun, item: ChunkedCall) -> None:
    for i in range(item.chunks):
        for sub in item.items:
            run.launch_chunk(sub, i, item.chunks)


RUNNERS: dict[type, Callable] = {
    NcclCall: lambda run, item: run.nccl(item),
    P2pCall: lambda run, item: run.gpu.p2p(item.op, item.address, item.count, item.dtype,
                                           item.peer),
    LibraryCall: lambda run, item: item.call(),
    PartsCall: lambda run, item: item.runner.run(),
    ChunkedCall: _run_chunked,
    KernelLaunch: lambda run, item: run.launch(item),
}
"""How each prepared launch is enqueued on this rank (PlanRun.run)."""


def step_label(step) -> str:
    """The statement(s) a plan step runs, as the cost model names top-level statements
    (comma-joined names of a fused or overlapped statement's outputs)."""
    names = getattr(step, "stmts", None)
    return ",".join(names) if names else str(step.stmt)

