"""Execute a lowered Plan on this rank's GPU (pycuda on the primary context, NCCL through
nccl4py or torch.distributed), with inputs, poisoning, outputs and CUDA-event timing.

A pipeline's ranks are numbered stage-major (global rank = stage * P + local rank): a rank
allocates the buffers of its own stage, runs the steps of its stage (a Send on both of its
stages), and runs its collectives on its stage's communicator (Gpu.use_stages).

Every GPU library is imported inside the functions here; the worker process imports this
module only once it has a GPU.
"""

from __future__ import annotations

import statistics
from contextlib import nullcontext as _nullcontext
from dataclasses import dataclass

import numpy as np

from codegen.plan import (
    MAX_BLOCKS,
    PEER,
    ChunkedStep,
    CopyEngineStep,
    GemmStep,
    NcclStep,
    OverlapStep,
    Plan,
    SendStep,
    check_chunk_rows,
    check_overlap_rows,
)
from codegen.render import include_dir, render
from codegen.spec import THREADS
from runtime.compiler import compile_cubin
from workbench import interpreter
from workbench.errors import RuntimeFault

_ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2, "u32": 4, "i32": 4, "f64": 8}
# NaN bit patterns used to poison every buffer a run must write (f32, f16, bf16 quiet NaNs).
_POISON = {"f32": (32, 0x7FC00000), "f16": (16, 0x7E00), "bf16": (16, 0x7FC0),
           "f64": (32, 0x7FF80000)}  # f64: 0x7FF800007FF80000, a quiet NaN
_TORCH_REDUCE = {"add": "SUM", "max": "MAX", "min": "MIN", "mul": "PRODUCT"}
# Blocks per SM of a fused collective: __launch_bounds__(THREADS, 2) guarantees 2 fit, and every
# block of every rank must be resident at once (blocks spin on their peers' counterparts).
COLLECTIVE_BLOCKS_PER_SM = 2


def _collective_blocks_per_sm() -> int:
    # WB_COLLECTIVE_BLOCKS_PER_SM=1 halves the grid (a tuning experiment); more than 2 could
    # leave blocks unscheduled while their peers spin, so it is capped at the launch bound.
    import os

    return max(1, min(COLLECTIVE_BLOCKS_PER_SM,
                      int(os.environ.get("WB_COLLECTIVE_BLOCKS_PER_SM", COLLECTIVE_BLOCKS_PER_SM))))


def _overlap_blocks(full: int) -> int:
    # Blocks of an overlapped consumer kernel. It shares the SMs with the MatMul chunks it
    # overlaps: a quarter of the full grid (66 blocks on an H200, one per two SMs) was the
    # fastest of 16..264 blocks for the model-parallel layer on 2x H200 (GPU run 6,
    # studies/results/gpu/README.md). WB_OVERLAP_BLOCKS overrides it (the same on every rank:
    # blocks meet their peers by index).
    import os

    value = int(os.environ.get("WB_OVERLAP_BLOCKS", "0") or 0)
    return min(full, value) if value > 0 else max(1, full // 4)


def import_pycuda():
    """pycuda's driver module, or a RuntimeFault that says how to install it."""
    try:
        import pycuda.driver as drv
    except ImportError as e:
        raise RuntimeFault(
            f"pycuda must be importable for compile-and-measure, got {e}; install the gpu extra "
            "(pip install 'coconet-workbench[gpu]'; pycuda builds from source against "
            "/usr/local/cuda)") from None
    return drv


class Gpu:
    """This rank's device: the primary context shared by torch, NCCL and pycuda, and the
    rank's communication (runtime.comm): host exchange through mpi4py under mpirun
    (else torch.distributed), NCCL through nccl4py (else torch.distributed)."""

    def __init__(self, rank: int, P: int, timeout_s: float = 60.0):
        import torch
        import torch.distributed as dist

        from runtime import comm

        drv = import_pycuda()
        count = torch.cuda.device_count()
        if count < P:
            raise RuntimeFault(f"--gpus must not exceed the GPUs present, got --gpus {P} on a "
                               f"machine with {count}")
        self.rank, self.P = rank, P
        torch.cuda.set_device(rank)
        torch.empty(1, device="cuda")  # creates (and makes current) the primary context
        drv.init()
        self.device = drv.Device(rank)
        self.context = self.device.retain_primary_context()
        self.context.push()
        self.drv = drv
        self.torch = torch
        self.dist = dist
        self.comm = comm.connect(rank, P, torch=torch, dist=dist,
                                 device=torch.device("cuda", rank), timeout_s=timeout_s,
                                 view=self._tensor)
        self.sm_count = self.device.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
        self.name = self.device.name()
        self.functions: dict[str, object] = {}
        self.world = P
        self.stages = 1
        self.group = None  # this stage's communicator (None: the world's)
        self._stage_comms: dict[int, object] = {}

    def use_stages(self, stages: int) -> int:
        """Run collectives within this rank's stage from now on: the world splits into
        `stages` groups of P = world / stages consecutive ranks (stage-major numbering). Every
        rank must call it with the same number at the same point (it creates communicators
        the first time). Returns P."""
        if stages < 1 or self.world % stages:
            raise RuntimeFault(f"the {self.world} ranks must split evenly into the program's "
                               f"{stages} stages, got a remainder of {self.world % stages}; "
                               f"run on a multiple of {stages} GPUs")
        P = self.world // stages
        if stages not in self._stage_comms:
            members = [tuple(range(k * P, (k + 1) * P)) for k in range(stages)]
            mine = members[self.rank // P]
            if stages == 1:
                comm = None
            elif self.comm.nccl is not None:
                comm = self.comm.nccl.subgroup(self.comm.host, self.rank, mine)
            else:
                from runtime.baselines import stage_groups

                comm = stage_groups(self.dist, P)[self.rank // P]
            self._stage_comms[stages] = comm
        self.stages, self.group = stages, self._stage_comms[stages]
        return P

    @property
    def stage_size(self) -> int:
        """Ranks of this rank's stage (the world's size for a program of one group)."""
        return self.world // self.stages

    def all_gather(self, obj):
        """Every rank's `obj`, in rank order (small Python objects only)."""
        return self.comm.host.allgather(obj)

    def barrier(self) -> None:
        """Every rank's host reaches this point before any goes on (synchronize the GPU
        first where its work must be finished too)."""
        self.comm.host.barrier()

    def collective(self, op: str, reduce: str, src: int, dst: int, count: int, dtype: str,
                   root: int = 0, stream: int = 0) -> None:
        """Enqueue one NCCL collective on raw device addresses: op is all_reduce,
        reduce_scatter, all_gather or broadcast (codegen.plan.NcclStep); count is elements
        per rank (the send count of all_gather, the receive count of reduce_scatter); stream
        is a CUstream handle (0: the legacy default stream). Through nccl4py where it
        imports, else torch.distributed."""
        from runtime.comm import element_counts

        if self.comm.nccl is not None:
            nccl = self.group if self.group is not None else self.comm.nccl
            nccl.collective(op, reduce, src, dst, count, dtype, root, stream)
            return
        torch, dist = self.torch, self.dist
        n_src, n_dst = element_counts(op, count, self.stage_size)
        s, d = self._tensor(src, n_src, dtype), self._tensor(dst, n_dst, dtype)
        red = getattr(dist.ReduceOp, _TORCH_REDUCE[reduce]) if reduce else None
        ctx = (torch.cuda.stream(torch.cuda.ExternalStream(stream)) if stream
               else _nullcontext())
        group = {"group": self.group} if self.group is not None else {}
        with ctx:
            if op == "all_reduce":
                if src != dst:
                    d.copy_(s)
                dist.all_reduce(d, op=red, **group)
            elif op == "reduce_scatter":
                dist.reduce_scatter_tensor(d, s, op=red, **group)
            elif op == "all_gather":
                dist.all_gather_into_tensor(d, s, **group)
            else:
                if src != dst:
                    d.copy_(s)
                # torch names the root by its global rank
                first = (self.rank // self.stage_size) * self.stage_size
                dist.broadcast(d, src=first + root, **group)

    def p2p(self, op: str, ptr: int, count: int, dtype: str, peer: int, stream: int = 0) -> None:
        """Enqueue one NCCL point-to-point transfer with global rank `peer`: op is send or
        recv; `count` elements of `dtype` at a raw device address (nccl4py's world
        communicator where it imports, else torch.distributed)."""
        if op not in ("send", "recv"):
            raise RuntimeFault(f"a point-to-point op must be send or recv, got {op!r}")
        if self.comm.nccl is not None:
            self.comm.nccl.p2p(op, ptr, count, dtype, peer, stream)
            return
        torch, dist = self.torch, self.dist
        t = self._tensor(ptr, count, dtype)
        ctx = (torch.cuda.stream(torch.cuda.ExternalStream(stream)) if stream
               else _nullcontext())
        with ctx:
            # isend/irecv + wait: the wait makes the current stream wait for NCCL's stream
            # (no host block), so later work on this stream sees the data.
            work = (dist.isend if op == "send" else dist.irecv)(t, peer)
            work.wait()

    def _tensor(self, ptr: int, numel: int, dtype: str):
        """A torch view of `numel` elements at a raw device address (no copy)."""
        typestr = {"f32": "<f4", "f16": "<f2", "bf16": "<i2"}[dtype]
        t = self.torch.as_tensor(_CudaArray(ptr, numel, typestr),
                                 device=f"cuda:{self.rank}")
        return t.view(self.torch.bfloat16) if dtype == "bf16" else t

    def function(self, spec):
        """The compiled kernel of a spec, through the compile cache (keyed by its name)."""
        if spec.name not in self.functions:
            cubin = compile_cubin(spec.name, render(spec), include_dir())
            module = self.drv.module_from_file(str(cubin))
            self.functions[spec.name] = (module, module.get_function(spec.name))
        return self.functions[spec.name][1]

    def close(self) -> None:
        """End the rank's communication (MPI_Finalize under mpirun) and pop the context."""
        self.comm.close()
        self.context.pop()


def _rank_part(value: np.ndarray, t, rank: int, P: int) -> np.ndarray:
    """Rank `rank`'s part of a logical value, as a view (interpreter.to_ranks builds every
    rank's copy through np.take with a Python range: minutes at 2^28 elements)."""
    from workbench.types import LocalLayout, Sliced

    if isinstance(t.layout, LocalLayout):
        return value[rank]
    if isinstance(t.layout, Sliced):
        d = t.layout.dim
        n = value.shape[d] // P
        index = [slice(None)] * value.ndim
        index[d] = slice(rank * n, (rank + 1) * n)
        return value[tuple(index)]
    return value


class _CudaArray:
    """A raw device pointer seen by torch.as_tensor (CUDA array interface, no copy)."""

    def __init__(self, ptr: int, numel: int | tuple, typestr: str):
        shape = numel if isinstance(numel, tuple) else (numel,)
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (ptr, False), "version": 3, "strides": None}


def torch_view(ptr: int, shape: tuple, dtype: str, device: int):
    """A row-major torch tensor over `shape` elements of `dtype` at a raw device address."""
    import torch

    typestr = {"f32": "<f4", "f16": "<f2", "bf16": "<i2"}[dtype]
    t = torch.as_tensor(_CudaArray(ptr, tuple(shape), typestr), device=f"cuda:{device}")
    return t.view(torch.bfloat16) if dtype == "bf16" else t


class _Gemm:
    """A GemmStep bound to this rank's buffers: cuBLAS through torch.matmul(out=...), whole or
    on a block of rows (an overlap chunk)."""

    def __init__(self, run: PlanRun, step: GemmStep):
        m, k, n = (run._int(x) for x in (step.m, step.k, step.n))
        dev = run.gpu.rank
        self.a = torch_view(run._address(step.a, step.dtype), (m, k), step.dtype, dev)
        self.b = torch_view(run._address(step.b, step.dtype), (k, n), step.dtype, dev)
        self.c = torch_view(run._address(step.c, step.dtype), (m, n), step.dtype, dev)
        self.m = m

    def __call__(self, rows: slice = slice(None)) -> None:
        import torch

        torch.matmul(self.a[rows], self.b, out=self.c[rows])


@dataclass
class Timing:
    """Per-rank CUDA-event times of one measured thing, in ms."""

    times_ms: list

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)


class PlanRun:
    """A Plan bound to sizes on this rank: buffers allocated, peers mapped, kernels compiled."""

    def __init__(self, gpu: Gpu, plan: Plan, sizes: dict):
        self.gpu, self.plan = gpu, plan
        if plan.world != gpu.world:
            raise RuntimeFault(f"a plan for {len(plan.groups)} stage(s) of {plan.P} ranks must "
                               f"run on {plan.world} ranks, got {gpu.world}; lower it with "
                               f"P = {gpu.world // len(plan.groups)} (Gpu.use_stages)")
        self.P = plan.P
        self.stage, self.local = divmod(gpu.rank, plan.P)
        self.bound = interpreter.bind_sizes(plan.program, sizes)
        self.subs = dict(self.bound)
        from codegen.plan import RANK

        self.subs[RANK] = self.local
        drv = gpu.drv
        self.allocs, self.ptr, self.numel, self.nbytes, self.ipc = {}, {}, {}, {}, []
        self.pristine: dict[str, object] = {}  # clobbered input buffer -> its copy at upload
        self.buffers = [b for b in plan.buffers if b.group == self.stage]
        for b in self.buffers:
            n = self._int(b.numel)
            self.numel[b.name] = n
            self.nbytes[b.name] = max(16, n * _ITEMSIZE[b.dtype])
            self.allocs[b.name] = drv.mem_alloc(self.nbytes[b.name])
            self.ptr[b.name] = int(self.allocs[b.name])
        for b in self.buffers:
            if b.dtype == "u32":
                drv.memset_d32(self.ptr[b.name], 0, self.numel[b.name])
        drv.Context.synchronize()
        self.handles = self._exchange_handles()
        self.mapped: dict[tuple[str, int], int] = {}
        self.epoch = 0
        self.seqs: dict[int, list[int]] = {}
        self.steps = plan.steps_of(self.stage)
        self.launches = [self._prepare(s) for s in self.steps]

    def _int(self, expr) -> int:
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

    def _prepare(self, step):
        if isinstance(step, NcclStep):
            return ("nccl", step, self._address(step.src, step.dtype),
                    self._address(step.dst, step.dtype), self._int(step.count))
        if isinstance(step, SendStep):
            sending = self.stage == step.src_group
            peer = (step.dst_group if sending else step.src_group) * self.P + self.local
            loc = step.src if sending else step.dst
            return ("p2p", "send" if sending else "recv", self._address(loc, step.dtype),
                    self._int(step.count), step.dtype, peer)
        if isinstance(step, GemmStep):
            return ("gemm", _Gemm(self, step))
        if isinstance(step, OverlapStep):
            return ("overlap", self._prepare_overlap(step))
        if isinstance(step, CopyEngineStep):
            return ("copy", _CopyEngines(self, step))
        if isinstance(step, ChunkedStep):
            check_chunk_rows(step.stmt, self._int(step.rows), step.per, step.chunks)
            return ("chunked", step.chunks, [self._prepare(s) for s in step.steps])
        spec = step.spec
        fn = self.gpu.function(spec)
        sig, args, epoch_at, seq_at = "", [], None, None
        for p in spec.params:
            if p.kind == "buf":
                sig += "P"
                args.append(np.uintp(self.ptr[p.ref]))
            elif p.kind in ("peer", "flags"):
                sig += "P"  # rank p.index of this stage
                args.append(np.uintp(self.pointer(p.ref, self.stage * self.P + p.index)))
            elif p.kind == "remote":
                sig += "P"  # this local rank of stage p.index
                args.append(np.uintp(self.pointer(p.ref, p.index * self.P + self.local)))
            elif p.kind == "seq":
                sig += "I"
                seq_at = len(args)
                args.append(np.uint32(0))
            elif p.kind == "size":
                sig += "q"
                args.append(np.int64(self.bound[next(s for s in self.bound if s.name == p.ref)]))
            elif p.kind == "rank":
                sig += "i"
                args.append(np.int32(self.local))
            elif p.kind == "epoch":
                sig += "I"
                epoch_at = len(args)
                args.append(np.uint32(0))
            elif p.kind in ("chunk", "win_first", "win_count"):
                sig += "q"
                args.append(np.int64(0))  # set per launch (_Overlap, _CopyEngines)
            else:
                raise RuntimeFault(f"kernel parameter kind must be known, got {p.kind}")
        fn.prepare(sig)
        extent = self._int(step.extent)
        barrier = any(p.kind == "flags" for p in spec.params)
        if spec.kind == "collective" or spec.kind == "send" and barrier:
            grid = min(MAX_BLOCKS, self.gpu.sm_count * _collective_blocks_per_sm())
        elif spec.kind in ("finish", "wait", "barrier"):
            grid = 1  # one block sums every partial (a few thousand numbers) / spins on a flag
        else:
            grid = elementwise_grid(extent, spec.vec, self.gpu.sm_count)
            if spec.norms:
                # One partial per block, in a buffer of MAX_BLOCKS entries.
                grid = min(grid, MAX_BLOCKS)
        if seq_at is not None:
            # Where the `seq` of a fused Send (or its wait) goes, and how many runs of the step
            # were launched; kept beside the launch tuple, whose 6 fields others read
            # (calibrate_worker._with_grid), and keyed by its argument list, which they keep.
            self.seqs[id(args)] = [seq_at, 0]
        return ("kernel", step, fn, grid, args, epoch_at)

    def _prepare_overlap(self, step: OverlapStep) -> _Overlap:
        if isinstance(step.producer, GemmStep):
            producer = _Gemm(self, step.producer)
            check_overlap_rows(step, producer.m, self.P)
        else:
            check_chunk_rows(step.stmt, self._int(step.rows), step.per, step.chunks)
            producer = self._prepare(step.producer)
        consumer = self._prepare(step.consumer)
        if consumer[0] == "kernel" and isinstance(step.producer, GemmStep):
            consumer = (*consumer[:3], _overlap_blocks(consumer[3]), *consumer[4:])
        return _Overlap(self, step, producer, consumer)

    def _address(self, loc, dtype: str) -> int:
        """Device address of a value's first element on this rank."""
        return self.ptr[loc.buffer] + self._int(loc.offset) * _ITEMSIZE[dtype]

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
        """Enqueue one prepared step (see _prepare for the kinds)."""
        if item[0] == "nccl":
            self.nccl(item)
        elif item[0] == "p2p":
            self.gpu.p2p(*item[1:])
        elif item[0] == "gemm":
            item[1]()
        elif item[0] in ("overlap", "copy"):
            item[1].run()
        elif item[0] == "chunked":
            _, chunks, items = item
            for i in range(chunks):
                for sub in items:
                    self.launch_chunk(sub, i, chunks)
        else:
            self.launch(item)

    def launch_chunk(self, item, i: int, chunks: int, stream=None) -> None:
        """Enqueue chunk i of `chunks` of a prepared kernel or NCCL step, on pycuda `stream`
        (None: the default stream)."""
        if item[0] == "nccl":
            self.nccl(item, int(stream.handle) if stream is not None else 0, chunk=i,
                      chunks=chunks)
        else:
            self.launch(item, stream, chunk=i)

    def nccl(self, item, stream: int = 0, chunk: int | None = None, chunks: int = 1) -> None:
        """Enqueue a prepared NCCL step, or its part of chunk `chunk` of `chunks`."""
        _, step, src, dst, count = item
        if chunk is not None:
            src, dst, count = nccl_chunk(step.op, src, dst, count, step.dtype, chunk, chunks,
                                         self.P)
        self.gpu.collective(step.op, step.reduce, src, dst, count, step.dtype, root=step.root,
                            stream=stream)

    def launch(self, item, stream=None, chunk: int | None = None,
               window: tuple[int, int] | None = None) -> None:
        """Launch one prepared kernel (on `stream`; `chunk`: the launch's chunk parameter;
        `window`: the (first, count) elements of a windowed kernel's domain)."""
        _, step, fn, grid, args, epoch_at = item
        if window is not None:
            kinds = [p.kind for p in step.spec.params]
            args[kinds.index("win_first")] = np.int64(window[0])
            args[kinds.index("win_count")] = np.int64(window[1])
        if epoch_at is not None:
            # One epoch per collective launch, the same sequence on every rank of the stage.
            self.epoch += 1
            args[epoch_at] = np.uint32(self.epoch)
        seq = self.seqs.get(id(args))
        if seq is not None:
            # One sequence number per run of the step (chunk 0 starts a run), the same on the
            # sending and the receiving rank.
            if not chunk:
                seq[1] += 1
            args[seq[0]] = np.uint32(seq[1] & 0xFFFFFFFF)
        if chunk is not None:
            at = next(i for i, p in enumerate(step.spec.params) if p.kind == "chunk")
            args[at] = np.int64(chunk)
        fn.prepared_async_call((grid, 1, 1), (THREADS, 1, 1), stream, *args)

    def upload(self, inputs: dict) -> None:
        """Copy this rank's part of each logical input into its buffer."""
        drv = self.gpu.drv
        for v in self.plan.program.inputs:
            if not self.holds(v.name):
                continue  # another stage's input
            part = _rank_part(np.asarray(inputs[v.name],
                                         dtype=interpreter.numpy_dtype(v.type.dtype)),
                              v.type, self.local, self.P)
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
            bits, pattern = _POISON[b.dtype]
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
            ptr = self.ptr[loc.buffer] + self._int(loc.offset) * _ITEMSIZE[t.dtype.name]
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


def elementwise_grid(extent: int, vec: int, sm_count: int) -> int:
    """Blocks of an elementwise kernel over `extent` elements, `vec` per thread: enough for
    one pass, at most 16 per SM (the kernels are grid-stride loops)."""
    return max(1, min(-(-extent // (vec * THREADS)), sm_count * 16))


def step_label(step) -> str:
    """The statement(s) a plan step runs, as the cost model names top-level statements
    (comma-joined names of a fused or overlapped statement's outputs)."""
    names = getattr(step, "stmts", None)
    return ",".join(names) if names else str(step.stmt)


def nccl_chunk(op: str, src: int, dst: int, count: int, dtype: str, i: int, chunks: int,
               P: int) -> tuple[int, int, int]:
    """Source and destination addresses and count of chunk i of an NCCL op on `count`
    elements per rank (codegen.plan.NcclStep): the chunk's rows of every tensor, whose parts
    are P times longer on the side that holds every rank's part (the source of
    reduce_scatter, the destination of all_gather)."""
    part = count // chunks
    size = _ITEMSIZE[dtype]
    src_mul = P if op == "reduce_scatter" else 1
    dst_mul = P if op == "all_gather" else 1
    return src + i * part * src_mul * size, dst + i * part * dst_mul * size, part


class _Overlap:
    """An OverlapStep bound to this rank: producer chunks on one stream, consumer chunks on
    another; consumer chunk i waits for producer chunk i's event only. The producer is a
    MatMul (cuBLAS on rows) or an NCCL collective (its chunk's part).

    Both streams are blocking streams (pycuda's default flags), so work on the legacy default
    stream (every other step, and the timing events) orders against them both ways; the join
    at the start also keeps a run's MatMul from overwriting rows that the previous run's
    consumer may still be reading on a peer (its end barrier covers the rest)."""

    def __init__(self, run: PlanRun, step: OverlapStep, producer, consumer):
        import torch

        drv = run.gpu.drv
        self.run_, self.step, self.producer, self.consumer = run, step, producer, consumer
        self.producer_stream, self.consumer_stream = drv.Stream(), drv.Stream()
        self.torch_stream = torch.cuda.ExternalStream(int(self.producer_stream.handle))
        self.join = drv.Event(drv.event_flags.DISABLE_TIMING)
        self.done = [drv.Event(drv.event_flags.DISABLE_TIMING) for _ in range(step.chunks)]
        self.rows = producer.m // step.chunks if isinstance(producer, _Gemm) else 0

    def run(self) -> None:
        import torch

        C, r = self.step.chunks, self.rows
        run = self.run_
        self.join.record()  # on the legacy stream: after everything enqueued before
        self.producer_stream.wait_for_event(self.join)
        self.consumer_stream.wait_for_event(self.join)
        for i in range(C):
            if isinstance(self.producer, _Gemm):
                with torch.cuda.stream(self.torch_stream):
                    self.producer(slice(i * r, (i + 1) * r))
            else:
                run.launch_chunk(self.producer, i, C, self.producer_stream)
            self.done[i].record(self.producer_stream)
            self.consumer_stream.wait_for_event(self.done[i])
            run.launch_chunk(self.consumer, i, C, self.consumer_stream)


class _CopyEngines:
    """A CopyEngineStep bound to this rank: the start barrier on the legacy stream, then per
    piece the pulls on one stream, the kernel on its window on another once they are done,
    the pushes on a third once it is done; then the end barrier on the legacy stream.

    The three streams are blocking streams (pycuda's default flags): the end barrier on the
    legacy stream waits for all of them, and the next run's pulls wait for this run's end
    through the start barrier and the join event."""

    def __init__(self, run: PlanRun, step: CopyEngineStep):
        drv = run.gpu.drv
        self.run_, self.step = run, step
        self.start, self.end = run._prepare(step.start), run._prepare(step.end)
        self.kernel = run._prepare(step.kernel)
        n, C = run._int(step.kernel.extent), step.chunks
        if n % C:
            raise RuntimeFault(f"statement {','.join(step.stmts)}: copy engines move pieces of "
                               f"1/{C} of each rank's slice of {n} elements, which must divide "
                               f"evenly; pick chunks dividing {n} (s.copy_engines(..., "
                               "chunks=...))")
        self.piece = n // C
        spec = step.kernel.spec
        grid = elementwise_grid(self.piece, spec.vec, run.gpu.sm_count)
        self.kernel = (*self.kernel[:3], grid, *self.kernel[4:])
        self.pulls, self.pushes = [], []
        base = run.stage * run.P
        for c in step.copies:
            size = _ITEMSIZE[c.dtype]
            piece_bytes = self.piece * size
            for k in range(run.P):
                if k == run.local:
                    continue
                subs = {PEER: k}
                src_rank, dst_rank = (base + k, run.gpu.rank) if c.pull else \
                    (run.gpu.rank, base + k)
                src = run.pointer(c.src, src_rank) + run._int(
                    _subs(c.src_offset, subs)) * size
                dst = run.pointer(c.dst, dst_rank) + run._int(
                    _subs(c.dst_offset, subs)) * size
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


def _subs(expr, subs: dict):
    import sympy

    return sympy.sympify(expr).subs(subs)
