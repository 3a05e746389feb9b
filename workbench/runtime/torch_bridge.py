"""Run a compiled schedule on torch CUDA tensors from inside a training loop (design note 50).

The pieces `wbtorch` (the user's door: the data-parallel optimizer, the tensor-parallel layer)
is built on, kept in the runtime because they are runtime machinery:

- `TorchGpu`: a rank's Gpu made from a process group that torch.distributed already has
  (torchrun), not from the workbench's launcher: the host exchange runs on that group
  (`GroupHost`), the NCCL communicator the schedule needs is an nccl4py communicator over the
  same ranks whose unique id travels through the group (torch.distributed's NCCL on the group
  where nccl4py does not import), and the device is torch's current device with the primary
  context torch made (pycuda retains and pushes the same context: one context per process).
- `BoundPlan`: a lowered Plan bound to sizes on that GPU (PlanRun: buffers, CUDA IPC peer
  mappings, compiled kernels) whose values the training loop sees as torch tensors over the
  plan's own device memory (no copy: a parameter's `.data` and `.grad` are views into a
  bucket's buffers, as DDP's gradient_as_bucket_view does), and whose `run()` enqueues the
  schedule ordered after the work already on torch's current stream and before the work torch
  enqueues next (CUDA events), so no host synchronisation is needed.

The plan owns the memory (pycuda allocations) rather than torch's caching allocator because a
fused collective's peer buffers are exported through CUDA IPC, which maps whole allocations:
a tensor carved out of one of torch's cached segments would map at the wrong address.

torch, pycuda and nccl4py are imported inside functions only.
"""

from __future__ import annotations

from workbench.errors import RuntimeFault
from workbench.runtime import comm as comm_mod
from workbench.runtime.executor import PlanRun
from workbench.runtime.gpu import Gpu, import_pycuda, push_primary_context
from workbench.runtime.launches import KernelLaunch, NcclCall

TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


class GroupHost:
    """Host exchange (small Python objects) through a torch.distributed process group; ranks
    are the group's ranks (0 .. size-1)."""

    kind = "torch.distributed group"

    def __init__(self, dist, group, device_index: int):
        self.dist, self.group, self.device_index = dist, group, device_index
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)

    def _global(self, group_rank: int) -> int:
        if self.group is None:
            return group_rank
        return self.dist.get_global_rank(self.group, group_rank)

    def allgather(self, obj) -> list:
        out = [None] * self.size
        self.dist.all_gather_object(out, obj, group=self.group)
        return out

    def bcast(self, obj, root: int = 0):
        box = [obj]
        self.dist.broadcast_object_list(box, src=self._global(root), group=self.group)
        return box[0]

    def barrier(self) -> None:
        self.dist.barrier(group=self.group, device_ids=[self.device_index])

    def close(self) -> None:
        pass


class TorchGpu(Gpu):
    """A rank's Gpu (workbench.runtime.gpu) over a torch.distributed process group that
    already exists.

    `group` None is the default (world) group. The rank and size are the group's; the device
    is torch's current CUDA device. NCCL: nccl4py over the group's ranks where it imports
    (WB_NCCL as for compile-and-measure), else torch.distributed's NCCL on the group."""

    def __init__(self, group=None):  # noqa: D107 (Gpu.__init__ is not called: no launcher)
        import torch
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeFault("torch.distributed must be initialised before the workbench's "
                               "torch bridge, got no default process group; call "
                               "torch.distributed.init_process_group('nccl') (torchrun sets "
                               "its environment) first")
        if not torch.cuda.is_available():
            raise RuntimeFault("a CUDA device must be present for the workbench's torch bridge, "
                               "got torch.cuda.is_available() False; run on a GPU machine")
        drv = import_pycuda()
        index = torch.cuda.current_device()
        torch.empty(1, device="cuda")  # makes torch's (primary) context exist and current
        drv.init()
        self.device_index = index
        self.device = drv.Device(index)
        # popped by close(), or at the latest by workbench.runtime.gpu's exit hook (an unpopped push
        # aborts the process when pycuda tears down: GPU run 22)
        self.context = push_primary_context(drv, index)
        try:
            self._connect(drv, torch, dist, group, index)
        except BaseException:
            self.context.pop()  # a failed construction leaves nothing pushed
            raise

    def _connect(self, drv, torch, dist, group, index: int) -> None:
        self.drv, self.torch, self.dist = drv, torch, dist
        host = GroupHost(dist, group, index)
        self.rank, self.P = host.rank, host.size
        core, note = comm_mod._import_nccl4py(comm_mod.nccl_choice())
        nccl = None
        if core is not None:
            nccl = comm_mod.Nccl4py(host, self.rank, self.P, self._tensor, core)
            info = {"host_exchange": host.kind, "nccl_via": nccl.kind, **nccl.versions()}
        else:
            info = {"host_exchange": host.kind, "nccl_via": "torch.distributed",
                    "nccl4py_note": note, "nccl": ".".join(map(str, torch.cuda.nccl.version()))}
        self.comm = comm_mod.Comm(host, nccl, info)
        self.sm_count = self.device.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
        self.name = self.device.name()
        self.functions = {}
        self.world = self.P
        self.stages = 1
        # Gpu.collective reads `group` as nccl4py's communicator when nccl4py is in use and as
        # torch's process group otherwise.
        self.group = group if nccl is None else None
        self._stage_comms = {1: self.group}

    def _tensor(self, ptr: int, numel: int, dtype: str):
        return device_view(self.torch, ptr, (numel,), dtype, self.device_index)

    def synchronize(self) -> None:
        """Wait for everything enqueued on this device."""
        self.torch.cuda.synchronize()

    def side_stream(self) -> SideStream:
        """A new stream beside torch's current one (wbtorch's optimizer in backward)."""
        return SideStream(self)

    def close(self) -> None:
        """Pop the context pushed at construction (the process group stays torch's; plans
        bound to this GPU keep their memory, freed when they are). Again: nothing."""
        self.context.pop()


class SideStream:
    """A CUDA stream that a plan's kernels and torch's ops share, beside the stream torch
    computes on: made by pycuda non-blocking (no implicit order with the legacy default stream
    that torch's forward and backward run on, so work on it overlaps theirs) and wrapped for
    torch (`torch.cuda.ExternalStream`). Order is by events only: `wait_current()` before
    work that reads what torch's current stream produced, `join()` before torch's current
    stream reads what was produced here. `with side:` makes it torch's current stream."""

    def __init__(self, gpu: TorchGpu):
        self.torch = gpu.torch
        self.pycuda = gpu.drv.Stream(flags=1)  # CU_STREAM_NON_BLOCKING
        self.handle = int(self.pycuda.handle)
        self.stream = self.torch.cuda.ExternalStream(self.handle, device=gpu.device_index)
        self._ctx = []
        # One event each way, recorded again at every call (a wait binds the event's latest
        # record when it is enqueued): torch's wait_stream makes a new Event per call, which
        # the optimizer in backward pays once a bucket on autograd's thread (design note 93).
        self._waited = self.torch.cuda.Event()
        self._joined = self.torch.cuda.Event()

    def wait_current(self) -> None:
        """This stream waits for the work enqueued so far on torch's current stream."""
        self._waited.record(self.torch.cuda.current_stream())
        self.stream.wait_event(self._waited)

    def join(self) -> None:
        """torch's current stream waits for the work enqueued so far on this one."""
        self._joined.record(self.stream)
        self.torch.cuda.current_stream().wait_event(self._joined)

    def __enter__(self):
        ctx = self.torch.cuda.stream(self.stream)
        ctx.__enter__()
        self._ctx.append(ctx)
        return self

    def __exit__(self, *exc):
        return self._ctx.pop().__exit__(*exc)


def device_view(torch, ptr: int, shape: tuple, dtype: str, device_index: int):
    """A torch tensor over `shape` elements of `dtype` at a raw device address (no copy; the
    memory stays owned by whoever allocated it)."""
    from workbench.runtime.gpu import TYPESTR, CudaArray

    typestr = TYPESTR.get(dtype)
    if typestr is None:
        raise RuntimeFault(f"a torch view must be of {', '.join(TYPESTR)}, got {dtype!r}")
    t = torch.as_tensor(CudaArray(ptr, tuple(shape), typestr), device=f"cuda:{device_index}")
    return t.view(torch.bfloat16) if dtype == "bf16" else t


class BoundPlan:
    """A Plan bound to sizes on a TorchGpu: its values as torch views, and `run()` ordered
    on torch's current stream.

    The PlanRun launches on the legacy default stream (pycuda's and NCCL's stream 0). When
    torch's current stream is another one, `run()` makes the default stream wait for an event
    recorded on it, and the current stream wait for an event recorded after the plan: the
    plan sees everything torch enqueued before, and torch's later work sees the plan's
    results, with no host synchronisation."""

    def __init__(self, gpu: TorchGpu, plan, sizes: dict, blocks_per_sm: int | None = None):
        self.gpu, self.plan = gpu, plan
        self.run_ = PlanRun(gpu, plan, sizes, blocks_per_sm)
        self.torch = gpu.torch
        self._views: dict[str, object] = {}
        self._before = self.torch.cuda.Event()
        self._after = self.torch.cuda.Event()

    def numel(self, name: str) -> int:
        """Elements of value `name` on this rank (its local part)."""
        return self.run_.int_of(self.plan.locs[name].numel)

    def dtype(self, name: str) -> str:
        """The workbench dtype name (f32, f16, bf16) of the buffer holding value `name`."""
        buf = self.plan.locs[name].buffer
        return next(b.dtype for b in self.plan.buffers if b.name == buf)

    def view(self, name: str):
        """This rank's part of value `name` as a torch tensor over the plan's memory."""
        if name not in self._views:
            if not self.run_.holds(name):
                raise RuntimeFault(f"value '{name}' must be held by this rank's plan, got none "
                                   f"of that name; values: {', '.join(sorted(self.plan.locs))}")
            dtype = self.dtype(name)
            self._views[name] = device_view(self.torch, self.run_.address(
                self.plan.locs[name], dtype), (self.numel(name),), dtype,
                self.gpu.device_index)
        return self._views[name]

    def rebind(self, tensors: dict) -> None:
        """Point input buffers at torch tensors' memory instead of the plan's own (zero copy
        for activations and parameters that torch owns): {input name: contiguous tensor of
        the buffer's dtype and size}. Only buffers that no other rank maps (not `peer`, or
        any buffer at P = 1) can move; the plan's launches are prepared again when an address
        changed."""
        moved: dict[int, int] = {}  # old address -> new
        run = self.run_
        for name, t in tensors.items():
            loc = self.plan.locs[name]
            spec = next(b for b in self.plan.buffers if b.name == loc.buffer)
            if spec.peer and self.run_.P > 1:
                raise RuntimeFault(f"input '{name}' must be in a buffer no peer maps to be "
                                   f"rebound to a torch tensor, got peer buffer {spec.name}; "
                                   "copy into BoundPlan.view(name) instead")
            want = self.numel(name)
            dtype = TORCH_DTYPES[spec.dtype]
            if (not t.is_contiguous() or t.numel() != want or str(t.dtype) != f"torch.{dtype}"
                    or t.device.index != self.gpu.device_index):
                raise RuntimeFault(f"input '{name}' must be a contiguous {dtype} tensor of "
                                   f"{want} elements on cuda:{self.gpu.device_index}, got "
                                   f"{t.dtype} of {t.numel()} on {t.device} (contiguous: "
                                   f"{t.is_contiguous()}); pass .contiguous() of that shape")
            ptr = t.data_ptr()
            if run.ptr[loc.buffer] != ptr:
                moved[run.ptr[loc.buffer]] = ptr
                run.ptr[loc.buffer] = ptr
                self._views.pop(name, None)
        if moved:
            self._relocate(moved)

    def _relocate(self, moved: dict[int, int]) -> None:
        """Point the prepared launches at moved buffers: a kernel's buffer arguments are the
        buffers' first addresses, so each one that was an old address becomes the new one (a
        few microseconds; preparing again renders every kernel's source, about a millisecond
        each, which a training step that rebinds a gradient per bucket cannot pay: GPU run
        33). A plan with other kinds of steps is prepared again."""
        import numpy as np

        run = self.run_
        if not all(isinstance(i, KernelLaunch) for i in run.launches):
            run.launches = [run.prepare(s) for s in run.steps]
            return
        for item in run.launches:
            for j, param in enumerate(item.step.spec.params):
                if param.kind in ("buf", "peer") and int(item.args[j]) in moved:
                    item.args[j] = np.uintp(moved[int(item.args[j])])

    @property
    def direct(self) -> bool:
        """Whether `run(side)` puts every launch straight onto the side stream (kernels and
        NCCL calls only), so torch's current stream need not be the side stream around it."""
        return all(isinstance(i, (KernelLaunch, NcclCall)) for i in self.run_.launches)

    def run(self, side: SideStream | None = None) -> None:
        """Enqueue one execution of the schedule after torch's current stream's work; with
        `side` (torch's current stream must be it), its kernels and NCCL calls go on that
        stream directly (a plan with other kinds of steps runs on the default stream, ordered
        by events as without it: correct, but serialized with torch's default-stream work)."""
        launches = self.run_.launches
        if side is not None and all(isinstance(i, (KernelLaunch, NcclCall)) for i in launches):
            for item in launches:
                if isinstance(item, NcclCall):
                    self.run_.nccl(item, side.handle)
                else:
                    self.run_.launch(item, side.pycuda)
            return
        torch = self.torch
        current = torch.cuda.current_stream()
        default = torch.cuda.default_stream()
        other = current != default
        if other:
            self._before.record(current)
            default.wait_event(self._before)
        self.run_.run()
        if other:
            self._after.record(default)
            current.wait_event(self._after)

    def free(self) -> None:
        """Release the plan's memory (its views must not be used afterwards)."""
        self._views = {}
        self.run_.free()
