"""One rank's GPU: the device and its primary context (shared by pycuda, NCCL and torch), the
NCCL communicator and host exchange, collectives and send/recv on device pointers, and
compiled kernel functions; plus the device-array views pycuda and torch take of a pointer.
"""

from __future__ import annotations

from contextlib import nullcontext as _nullcontext

import numpy as np

from codegen.plan import ELEMENT_BYTES, GemmStep, ReduceStep
from codegen.render import include_dir
from workbench.errors import RuntimeFault
from workbench.runtime import comm, launcher
from workbench.runtime.baselines import stage_groups
from workbench.runtime.comm import element_counts
from workbench.runtime.compiler import compile_cubin
from workbench.runtime.launches import RunView
from workbench.types import LocalLayout, Sliced

ITEMSIZE = ELEMENT_BYTES  # (codegen.plan: one table of a buffer's element bytes)



# NaN bit patterns used to poison every buffer a run must write (f32, f16, bf16 quiet NaNs).
# int32 has no NaN: its pattern reads 2143289344, an id or index no program here reaches, so
# an int output a kernel failed to write (TopK's indices, an id computed) still mismatches.
POISON = {"f32": (32, 0x7FC00000), "f16": (16, 0x7E00), "bf16": (16, 0x7FC0),
          "f64": (32, 0x7FF80000),  # f64: 0x7FF800007FF80000, a quiet NaN
          "i32": (32, 0x7FC00000)}
# The __cuda_array_interface__ type of each buffer dtype that torch views (bf16 as int16, then
# viewed as torch.bfloat16: the interface has no bfloat16).
TYPESTR = {"f32": "<f4", "f16": "<f2", "bf16": "<i2", "i32": "<i4"}


TORCH_REDUCE = {"add": "SUM", "max": "MAX", "min": "MIN", "mul": "PRODUCT"}


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


class PushedContext:
    """A device's primary context (the one torch made), retained through pycuda and pushed on
    the calling thread until `pop()`.

    pycuda keeps a per-thread stack of the contexts it pushed, and its C++ teardown aborts the
    process (SIGABRT, "PyCUDA ERROR: The context stack was not empty upon module cleanup")
    when one was never popped: GPU run 22 lost the exit status of every torch-bridge process
    that way, after its work was done. So every push of the runtime goes through here: `pop()`
    is idempotent and must run on the pushing thread (pycuda's stack is that thread's), and
    an `atexit` hook pops whatever is still pushed when the interpreter exits normally
    (atexit handlers run before that teardown, as pycuda.autoprimaryctx relies on). A worker
    that leaves by os._exit skips both the hook and the teardown."""

    def __init__(self, context, thread: int | None = None):
        import threading

        self.context = context
        self.thread = threading.get_ident() if thread is None else thread
        context.push()
        self.pushed = True
        _PUSHED.append(self)
        _hook_exit()

    def pop(self) -> None:
        """Pop the context pushed at construction (again: nothing)."""
        import threading

        if not self.pushed:
            return
        if threading.get_ident() != self.thread:
            raise RuntimeFault(f"a pushed CUDA context must be popped on the thread that "
                               f"pushed it ({self.thread}), got thread "
                               f"{threading.get_ident()}; close the GPU object on that thread")
        self.pushed = False
        if self in _PUSHED:
            _PUSHED.remove(self)
        self.context.pop()


_PUSHED: list[PushedContext] = []  # pushed and not yet popped, oldest first
_EXIT_HOOKED: list[bool] = []


def _hook_exit() -> None:
    if not _EXIT_HOOKED:
        import atexit

        atexit.register(pop_pushed_contexts)
        _EXIT_HOOKED.append(True)


def pop_pushed_contexts() -> int:
    """Pop every context still pushed, newest first (the atexit hook; also for tests).
    A pop that fails is reported on stderr and the others still run: this is exit time.
    Returns how many were popped."""
    import sys

    popped = 0
    for ctx in reversed(list(_PUSHED)):
        try:
            ctx.pop()
            popped += 1
        except Exception as e:  # at exit: report it and go on with the others
            if ctx in _PUSHED:
                _PUSHED.remove(ctx)
            print(f"workbench: popping a CUDA context at exit failed: {type(e).__name__}: {e}",
                  file=sys.stderr, flush=True)
    return popped


def push_primary_context(drv, index: int) -> PushedContext:
    """Device `index`'s primary context (torch's), retained by pycuda and pushed on this
    thread; `.pop()` it when done (or leave it to the exit hook)."""
    return PushedContext(drv.Device(index).retain_primary_context())


class Gpu:
    """This rank's device: the primary context shared by torch, NCCL and pycuda, and the
    rank's communication (workbench.runtime.comm): host exchange through mpi4py under mpirun
    (else torch.distributed), NCCL through nccl4py (else torch.distributed)."""

    def __init__(self, rank: int, P: int, timeout_s: float = 60.0):
        import torch
        import torch.distributed as dist


        drv = import_pycuda()
        launcher.require_gpus(P, torch.cuda.device_count())
        self.rank, self.P = rank, P
        torch.cuda.set_device(rank)
        torch.empty(1, device="cuda")  # creates (and makes current) the primary context
        drv.init()
        self.device = drv.Device(rank)
        self.context = push_primary_context(drv, rank)
        self.drv = drv
        self.torch = torch
        self.dist = dist
        try:
            self.comm = comm.connect(rank, P, torch=torch, dist=dist,
                                     device=torch.device("cuda", rank), timeout_s=timeout_s,
                                     view=self._tensor)
        except BaseException:
            self.context.pop()
            raise
        self.sm_count = self.device.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
        self.name = self.device.name()
        self.functions: dict[str, object] = {}
        self.world = P
        self.stages = 1
        self.group = None  # this stage's communicator (None: the world's)
        self.inter = None  # a node view's rail communicator (use_nodes)
        self._node_comms: dict[int, tuple] = {}
        self.nodes = 1
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

                comm = stage_groups(self.dist, P)[self.rank // P]
            self._stage_comms[stages] = comm
        self.stages, self.group = stages, self._stage_comms[stages]
        return P

    def use_nodes(self, per_node: int) -> None:
        """Run a node's view of a program (a hierarchical split, codegen.lower_node): the
        world splits into nodes of `per_node` consecutive ranks (the group's collectives run
        on the node's communicator) and into rails of one local rank per node (the "inter"
        communicator of an AllReduce across nodes), both by ncclCommSplit (color = node,
        color = local rank). On one machine this emulates a node boundary. Every rank calls it
        with the same number at the same point."""
        if per_node < 1 or self.world % per_node:
            raise RuntimeFault(f"the {self.world} ranks must split into nodes of {per_node} "
                               f"GPUs, got a remainder of {self.world % max(per_node, 1)}; run on "
                               f"a multiple of {per_node} GPUs")
        node, local = divmod(self.rank, per_node)
        nodes = self.world // per_node
        if per_node in self._node_comms:  # made once per node size, as stage communicators
            self.group, self.inter = self._node_comms[per_node]
            self.stages, self.node_size, self.nodes = nodes, per_node, nodes
            return
        node_members = tuple(range(node * per_node, (node + 1) * per_node))
        rail_members = tuple(local + k * per_node for k in range(nodes))
        if self.comm.nccl is not None:
            world = self.comm.nccl
            self.group = world.split(self.comm.host, self.rank, node, node_members)
            self.inter = world.split(self.comm.host, self.rank, nodes + local, rail_members)
        else:
            dist = self.dist
            groups = {m: dist.new_group(list(m)) for m in
                      [tuple(range(k * per_node, (k + 1) * per_node)) for k in range(nodes)]
                      + [tuple(j + k * per_node for k in range(nodes))
                         for j in range(per_node)]}
            self.group, self.inter = groups[node_members], groups[rail_members]
        self._node_comms[per_node] = (self.group, self.inter)
        self.stages, self.node_size, self.nodes = nodes, per_node, nodes

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
                   root: int = 0, stream: int = 0, comm: str = "group") -> None:
        """Enqueue one NCCL collective on raw device addresses: op is all_reduce,
        reduce_scatter, all_gather, broadcast, reduce or all_to_all (codegen.plan.NcclStep);
        count is elements per rank (the send count of all_gather, the receive count of
        reduce_scatter); stream is a CUstream handle (0: the legacy default stream); comm
        "inter": on the rail's communicator of a node view (use_nodes). Through nccl4py where it
        imports, else torch.distributed."""
        inter = comm == "inter"
        if inter and self.inter is None:
            raise RuntimeFault("an NCCL call across nodes must run on the rail communicator, "
                               "got none; call Gpu.use_nodes(per_node) first")
        if self.comm.nccl is not None:
            nccl = self.inter if inter else (self.group if self.group is not None
                                             else self.comm.nccl)
            nccl.collective(op, reduce, src, dst, count, dtype, root, stream)
            return
        torch, dist = self.torch, self.dist
        n_src, n_dst = element_counts(op, count, self.nodes if inter else self.stage_size)
        s, d = self._tensor(src, n_src, dtype), self._tensor(dst, n_dst, dtype)
        red = getattr(dist.ReduceOp, TORCH_REDUCE[reduce]) if reduce else None
        ctx = (torch.cuda.stream(torch.cuda.ExternalStream(stream)) if stream
               else _nullcontext())
        chosen = self.inter if inter else self.group
        group = {"group": chosen} if chosen is not None else {}
        with ctx:
            if op == "all_reduce":
                if src != dst:
                    d.copy_(s)
                dist.all_reduce(d, op=red, **group)
            elif op == "reduce_scatter":
                dist.reduce_scatter_tensor(d, s, op=red, **group)
            elif op == "all_gather":
                dist.all_gather_into_tensor(d, s, **group)
            elif op == "all_to_all":
                dist.all_to_all_single(d, s, **group)
            elif op == "reduce":
                if src != dst:
                    d.copy_(s)
                first = (self.rank // self.stage_size) * self.stage_size
                dist.reduce(d, dst=first + root, op=red, **group)
            else:
                if src != dst:
                    d.copy_(s)
                # torch names the root by its global rank
                first = (self.rank // self.stage_size) * self.stage_size
                dist.broadcast(d, src=first + root, **group)

    def exchange(self, pieces, dtype: str, stream: int = 0) -> None:
        """Enqueue one step of a rotated exchange (an MoE overlap's AllToAll chunk,
        runtime.chunked.exchange_pieces) on `stream`: pieces (kind, peer, src, dst, count) with
        raw device addresses and peers as ranks of this rank's group; "copy" pieces (its own
        block) are device copies, sends and receives one NCCL group call (nccl4py where it
        imports, else torch.distributed's batch_isend_irecv)."""
        torch = self.torch
        ctx = (torch.cuda.stream(torch.cuda.ExternalStream(stream)) if stream
               else _nullcontext())
        with ctx:
            for kind, _, src, dst, n in pieces:
                if kind == "copy" and n:
                    self._tensor(dst, n, dtype).copy_(self._tensor(src, n, dtype))
        p2p = [p for p in pieces if p[0] != "copy"]
        if not p2p:
            return
        if self.comm.nccl is not None:
            nccl = self.group if self.group is not None else self.comm.nccl
            nccl.exchange(p2p, dtype, stream)
            return
        dist = self.dist
        first = (self.rank // self.stage_size) * self.stage_size  # torch names global ranks
        group = {"group": self.group} if self.group is not None else {}
        ops = [dist.P2POp(dist.isend if kind == "send" else dist.irecv,
                          self._tensor(src if kind == "send" else dst, n, dtype), first + peer,
                          **group)
               for kind, peer, src, dst, n in p2p]
        with ctx:
            for work in dist.batch_isend_irecv(ops):
                work.wait()  # the stream waits for NCCL's (no host block)

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
        typestr = TYPESTR[dtype]
        t = self.torch.as_tensor(CudaArray(ptr, numel, typestr),
                                 device=f"cuda:{self.rank}")
        return t.view(self.torch.bfloat16) if dtype == "bf16" else t

    def function(self, name: str, source: str):
        """The compiled kernel `name` of a CUDA `source` that codegen rendered, through the
        compile cache (keyed by its name and the source's hash)."""
        if name not in self.functions:
            cubin = compile_cubin(name, source, include_dir())
            module = self.drv.module_from_file(str(cubin))
            self.functions[name] = (module, module.get_function(name))
        return self.functions[name][1]

    def close(self) -> None:
        """End the rank's communication (MPI_Finalize under mpirun) and pop the context
        (whether or not the first part failed; a second close pops nothing)."""
        try:
            self.comm.close()
        finally:
            self.context.pop()


def rank_part(value: np.ndarray, t, rank: int, P: int) -> np.ndarray:
    """Rank `rank`'s part of a logical value, as a view (interpreter.to_ranks builds every
    rank's copy through np.take with a Python range: minutes at 2^28 elements)."""

    if isinstance(t.layout, LocalLayout):
        return value[rank]
    if isinstance(t.layout, Sliced):
        d = t.layout.dim
        n = value.shape[d] // P
        index = [slice(None)] * value.ndim
        index[d] = slice(rank * n, (rank + 1) * n)
        return value[tuple(index)]
    return value


class CudaArray:
    """A raw device pointer seen by torch.as_tensor (CUDA array interface, no copy)."""

    def __init__(self, ptr: int, numel: int | tuple, typestr: str):
        shape = numel if isinstance(numel, tuple) else (numel,)
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (ptr, False), "version": 3, "strides": None}


def torch_view(ptr: int, shape: tuple, dtype: str, device: int):
    """A row-major torch tensor over `shape` elements of `dtype` at a raw device address."""
    import torch

    typestr = TYPESTR[dtype]
    t = torch.as_tensor(CudaArray(ptr, tuple(shape), typestr), device=f"cuda:{device}")
    return t.view(torch.bfloat16) if dtype == "bf16" else t


class Reduction:
    """A ReduceStep bound to this rank's buffers: torch's reduction (CUB underneath) of the
    elements, accumulated in f64 like the interpreter, cast once into the f32 result."""

    def __init__(self, run: RunView, step: ReduceStep):
        dev = run.gpu.rank
        self.x = torch_view(run.address(step.x, step.dtype), (run.int_of(step.count),),
                            step.dtype, dev)
        self.out = torch_view(run.address(step.out, "f32"), (1,), "f32", dev)
        self.reduce = step.reduce

    def __call__(self) -> None:
        import torch

        if self.reduce == "add":
            value = torch.sum(self.x, dtype=torch.float64)
        elif self.reduce == "mul":
            value = torch.prod(self.x, dtype=torch.float64)
        else:  # max, min: exact in the element type
            value = (torch.amax if self.reduce == "max" else torch.amin)(self.x)
        self.out.copy_(value.reshape(1))


class Gemm:
    """A GemmStep bound to this rank's buffers: cuBLAS through torch.matmul(out=...), whole or
    on a block of rows (an overlap chunk)."""

    def __init__(self, run: RunView, step: GemmStep):
        m, k, n = (run.int_of(x) for x in (step.m, step.k, step.n))
        dev = run.gpu.rank
        self.a = torch_view(run.address(step.a, step.dtype), (m, k), step.dtype, dev)
        self.b = torch_view(run.address(step.b, step.dtype), (k, n), step.dtype, dev)
        self.c = torch_view(run.address(step.c, step.dtype), (m, n), step.dtype, dev)
        self.m = m
        self.epilogue = step.epilogue
        if step.epilogue:
            self.bias = torch_view(run.address(step.bias, step.dtype), (n,), step.dtype, dev)

    def __call__(self, rows: slice = slice(None)) -> None:
        import torch

        if not self.epilogue:
            torch.matmul(self.a[rows], self.b, out=self.c[rows])
        elif self.epilogue == "bias":  # cuBLASLt's BIAS epilogue (torch's addmm, 1-D bias)
            torch.addmm(self.bias, self.a[rows], self.b, out=self.c[rows])
        else:  # cuBLASLt's RELU_BIAS / GELU_BIAS (GeLU's tanh form) epilogues
            torch._addmm_activation(self.bias, self.a[rows], self.b, out=self.c[rows],
                                    use_gelu=self.epilogue == "bias_gelu_tanh")
