"""One rank's communication layer: host-side exchange of Python objects, and NCCL.

- Host exchange (small objects: checks, times, CUDA IPC handles; barriers): mpi4py's
  COMM_WORLD when the rank runs under mpirun, else torch.distributed (its NCCL process group,
  as before mpirun was supported), so that nothing needs MPI where it is missing.
- NCCL on raw device addresses: a communicator of nccl4py (`nccl.core`), whose unique id rank 0
  makes and the host exchange broadcasts; torch.distributed's NCCL when nccl4py does not import
  (or WB_NCCL=torch).
- torch.distributed is initialised in every case (the baselines use it as users would); under
  a bare mpirun, without the launcher's MASTER_ADDR/PORT, rank 0 picks a port and broadcasts it.

"Under mpirun" is read from the environment (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK), never
by importing mpi4py first: initialising MPI outside mpirun starts a singleton runtime, slow and
with helper processes of its own. mpi4py's COMM_WORLD must then agree with the size mpirun gave,
which catches an mpi4py built for another MPI than the mpirun in use.

mpi4py, nccl4py and torch are imported inside the functions here only.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field

from workbench import ir
from workbench.errors import RuntimeFault
from workbench.runtime.launcher import free_port

MPI_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")
MPI_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
MPI_LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
NCCL_CHOICES = ("auto", "nccl4py", "torch")
# NCCL's functions a plan calls (codegen.plan.NcclStep.op), from the one name table
# (ir.COLLECTIVES); all_to_all: an MoE exchange, count elements per rank in, as many out.
NCCL_OPS = tuple(c.nccl for c in ir.COLLECTIVES)
UNIQUE_ID_BYTES = 128  # sizeof(ncclUniqueId)
# The workbench's reduction names (codegen.plan.NcclStep.reduce) -> nccl.core's constants.
NCCL_REDUCE = {"add": "SUM", "max": "MAX", "min": "MIN", "mul": "PROD"}


@dataclass(frozen=True, slots=True)
class RankEnv:
    """Who this process is, from its environment: the launcher's WB_RANK/WB_WORLD_SIZE first,
    else mpirun's variables; `under_mpi` when an MPI launcher started it."""

    rank: int
    size: int
    local_rank: int
    under_mpi: bool


def _first(environ, names: tuple[str, ...]) -> str | None:
    return next((environ[n] for n in names if environ.get(n, "") != ""), None)


def rank_env(environ=None) -> RankEnv:
    """This rank's RankEnv, or a RuntimeFault that says how ranks are started."""
    env = os.environ if environ is None else environ
    mpi_rank = _first(env, MPI_RANK_VARS)
    rank = env.get("WB_RANK") or mpi_rank
    size = env.get("WB_WORLD_SIZE") or _first(env, MPI_SIZE_VARS)
    if rank is None or size is None:
        raise RuntimeFault("a rank must know its rank and world size, got neither WB_RANK/"
                           "WB_WORLD_SIZE (the launcher's) nor OMPI_COMM_WORLD_RANK/SIZE "
                           "(mpirun's); start ranks with `workbench compile-and-measure`, or "
                           "`mpirun -np P python -m workbench.runtime.worker JOB`")
    local = env.get("LOCAL_RANK") or _first(env, MPI_LOCAL_RANK_VARS) or rank
    try:
        return RankEnv(int(rank), int(size), int(local), mpi_rank is not None)
    except ValueError:
        raise RuntimeFault(f"rank variables must be integers, got rank {rank!r}, size {size!r}, "
                           f"local rank {local!r}; unset the odd one") from None


def host_mode(env: RankEnv, mpi4py_importable: bool | None = None) -> str:
    """'mpi' (mpi4py's COMM_WORLD) under mpirun when mpi4py imports, else 'torch'."""
    if mpi4py_importable is None:
        mpi4py_importable = importlib.util.find_spec("mpi4py") is not None
    return "mpi" if env.under_mpi and mpi4py_importable else "torch"


def nccl_choice(environ=None) -> str:
    """WB_NCCL: auto (nccl4py when it imports), nccl4py, or torch."""
    env = os.environ if environ is None else environ
    raw = env.get("WB_NCCL", "")
    choice = raw.strip().lower() or "auto"
    if choice not in NCCL_CHOICES:
        raise RuntimeFault(f"WB_NCCL must be auto, nccl4py or torch, got {raw!r}; unset it to "
                           "use nccl4py where it imports")
    return choice


def element_counts(op: str, count: int, P: int) -> tuple[int, int]:
    """Elements of the source and destination of an NCCL op: `count` is per rank (the send
    count of all_gather, the receive count of reduce_scatter)."""
    if op not in NCCL_OPS:
        raise RuntimeFault(f"NCCL op must be {', '.join(NCCL_OPS[:-1])} or {NCCL_OPS[-1]}, "
                           f"got {op!r}")
    return ir.collective_named(op).counts(count, P)


# -- host exchange


class MpiHost:
    """Host exchange through an mpi4py communicator (COMM_WORLD)."""

    kind = "mpi4py"

    def __init__(self, comm, env: RankEnv, library: str = ""):
        if comm.Get_size() != env.size or comm.Get_rank() != env.rank:
            raise RuntimeFault(
                f"mpi4py's COMM_WORLD must hold rank {env.rank} of the {env.size} ranks that "
                f"mpirun started, got rank {comm.Get_rank()} of {comm.Get_size()}: mpi4py is "
                f"linked to another MPI ({library or 'unknown'}) than the mpirun that started "
                "this rank; use that MPI's mpirun (WB_MPIRUN=PATH) or WB_LAUNCHER=spawn")
        self.comm, self.library = comm, library

    @classmethod
    def world(cls, env: RankEnv) -> MpiHost:
        from mpi4py import MPI  # initialises MPI

        # Open MPI's version string ends in a NUL byte: strip it (it lands in logs and JSON).
        version = MPI.Get_library_version().replace("\x00", "").splitlines()[0].strip()
        return cls(MPI.COMM_WORLD, env, version)

    def allgather(self, obj) -> list:
        return self.comm.allgather(obj)

    def bcast(self, obj, root: int = 0):
        return self.comm.bcast(obj, root=root)

    def barrier(self) -> None:
        self.comm.Barrier()

    def close(self) -> None:
        """MPI_Finalize (mpirun counts a rank that exits without it as failed)."""
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.Finalize()


class TorchHost:
    """Host exchange through torch.distributed's (NCCL) process group."""

    kind = "torch.distributed"

    def __init__(self, dist, rank: int, device_index: int):
        self.dist, self.rank, self.device_index = dist, rank, device_index

    def allgather(self, obj) -> list:
        out = [None] * self.dist.get_world_size()
        self.dist.all_gather_object(out, obj)
        return out

    def bcast(self, obj, root: int = 0):
        box = [obj]
        self.dist.broadcast_object_list(box, src=root)
        return box[0]

    def barrier(self) -> None:
        self.dist.barrier(device_ids=[self.device_index])

    def close(self) -> None:
        pass


def torch_rendezvous(host, env: RankEnv, environ=None) -> dict[str, str]:
    """The variables torch.distributed's env:// rendezvous reads. MASTER_ADDR/PORT come from
    the launcher; under a bare mpirun rank 0 picks a free port and `host` broadcasts it."""
    environ = os.environ if environ is None else environ
    addr, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")
    if not (addr and port):
        if host is None:
            raise RuntimeFault("MASTER_ADDR and MASTER_PORT must be set for torch.distributed "
                               "outside mpirun, got "
                               f"MASTER_ADDR={addr!r} MASTER_PORT={port!r}; start the ranks "
                               "with the launcher (workbench compile-and-measure)")

        addr, port = host.bcast(("127.0.0.1", free_port()) if env.rank == 0 else None, root=0)
    return {"MASTER_ADDR": str(addr), "MASTER_PORT": str(port), "RANK": str(env.rank),
            "WORLD_SIZE": str(env.size), "LOCAL_RANK": str(env.local_rank)}


def share_unique_id(host, rank: int, make_id) -> bytes:
    """Rank 0's NCCL unique id (`make_id()` -> bytes), the same on every rank, through the host
    exchange's broadcast."""
    raw = host.bcast(bytes(make_id()) if rank == 0 else None, root=0)
    if not isinstance(raw, (bytes, bytearray)) or len(raw) != UNIQUE_ID_BYTES:
        got = f"{len(raw)} bytes" if isinstance(raw, (bytes, bytearray)) else repr(raw)
        raise RuntimeFault(f"the NCCL unique id broadcast from rank 0 must be "
                           f"{UNIQUE_ID_BYTES} bytes, got {got} on rank {rank}; every rank must "
                           "run the same workbench and nccl4py")
    return bytes(raw)


def group_unique_id(host, rank: int, members: tuple[int, ...], make_id) -> bytes:
    """The NCCL unique id of the group `members` (global ranks, this rank among them): made by
    the group's first rank, exchanged through one host allgather in which every rank of the
    world takes part (each group's first rank contributes its id)."""
    if rank not in members:
        raise RuntimeFault(f"a rank must belong to the group it joins, got rank {rank} and "
                           f"group {list(members)}; split the world into stages of consecutive "
                           "ranks")
    everyone = host.allgather(bytes(make_id()) if rank == members[0] else None)
    raw = everyone[members[0]]
    if not isinstance(raw, (bytes, bytearray)) or len(raw) != UNIQUE_ID_BYTES:
        raise RuntimeFault(f"the NCCL unique id of group {list(members)} must be "
                           f"{UNIQUE_ID_BYTES} bytes from rank {members[0]}, got {raw!r:.40}; "
                           "every rank must split the world into the same stages")
    return bytes(raw)


# -- NCCL through nccl4py


class Nccl4py:
    """An nccl4py communicator over every rank, for collectives on raw device addresses.

    `view(ptr, numel, dtype)` makes the buffer object nccl4py reads (anything with
    `__cuda_array_interface__` or DLPack; Gpu passes zero-copy torch views, since the CUDA array
    interface has no bfloat16). Views are cached per (address, count, dtype): a plan calls the
    same collectives every run.
    """

    kind = "nccl4py"

    def __init__(self, host, rank: int, size: int, view, nccl=None, members=None):
        if nccl is None:
            from nccl import core as nccl
        self.nccl, self.view = nccl, view
        if members is None:  # every rank of the world
            uid = share_unique_id(host, rank, lambda: bytes(nccl.get_unique_id()))
            self.size, mine = size, rank
        else:  # a group of the world (a pipeline stage): its first rank makes the id
            uid = group_unique_id(host, rank, tuple(members),
                                  lambda: bytes(nccl.get_unique_id()))
            self.size, mine = len(members), list(members).index(rank)
        self.comm = nccl.Communicator.init(self.size, mine, nccl.UniqueId.from_bytes(uid))
        self._views: dict[tuple[int, int, str], object] = {}

    def split(self, host, rank: int, color: int, members: tuple[int, ...]) -> Nccl4py:
        """The communicator of the ranks of `color` (ncclCommSplit: every rank of this
        communicator calls it at once, `members` the global ranks of this rank's color, in
        rank order). Through nccl4py's Communicator.split where it has one, else a fresh
        communicator of `members` (`subgroup`: a unique id through the host exchange)."""
        method = getattr(self.comm, "split", None)
        if method is None:
            return self.subgroup(host, rank, members)
        made = object.__new__(Nccl4py)
        made.nccl, made.view, made._views = self.nccl, self.view, {}
        made.size = len(members)
        made.comm = method(color, members.index(rank))
        return made

    def subgroup(self, host, rank: int, members: tuple[int, ...]) -> Nccl4py:
        """A communicator of the ranks `members` (global ranks; this rank among them) for a
        stage's collectives. Every rank of the world calls it at once, each with its own
        group (the unique ids travel through one host allgather)."""
        return Nccl4py(host, rank, len(members), self.view, self.nccl, members)

    def p2p(self, op: str, ptr: int, count: int, dtype: str, peer: int, stream: int = 0) -> None:
        """Enqueue an NCCL send (op "send") or recv of `count` elements at `ptr` with rank
        `peer` of this communicator, on `stream`: nccl4py's Communicator.send(sendbuf, peer,
        *, stream) and recv(recvbuf, peer, *, stream) (its documented point-to-point
        methods). One call each side, no group call: a pipeline Send goes one way between one
        pair of ranks."""
        buf = self._buffer(ptr, count, dtype)
        method = getattr(self.comm, op, None)
        if method is None:
            raise RuntimeFault(f"nccl4py's Communicator must have {op}() for an NCCL Send, got "
                               f"none in nccl4py {self.versions().get('nccl4py')}; run with "
                               "WB_NCCL=torch")
        method(buf, peer, stream=int(stream))

    def exchange(self, pieces, dtype: str, stream: int = 0) -> None:
        """One step of a rotated exchange (Gpu.exchange): NCCL's documented pattern for
        all-to-all pieces, one ncclSend/ncclRecv per piece inside one group call."""
        start = getattr(self.nccl, "group_start", None)
        end = getattr(self.nccl, "group_end", None)
        if start is None or end is None or not hasattr(self.comm, "send"):
            raise RuntimeFault(f"nccl4py must have group_start/group_end with send/recv for an "
                               f"overlapped AllToAll, got none in nccl4py "
                               f"{self.versions().get('nccl4py')}; run with WB_NCCL=torch")
        start()
        for kind, peer, src, dst, n in pieces:
            if kind == "send":
                self.comm.send(self._buffer(src, n, dtype), peer, stream=int(stream))
            else:
                self.comm.recv(self._buffer(dst, n, dtype), peer, stream=int(stream))
        end()

    def _buffer(self, ptr: int, numel: int, dtype: str):
        key = (ptr, numel, dtype)
        if key not in self._views:
            self._views[key] = self.view(ptr, numel, dtype)
        return self._views[key]

    def _reduce(self, op: str, reduce: str | None):
        if reduce not in NCCL_REDUCE:
            raise RuntimeFault(f"the reduction of an NCCL {op} must be one of "
                               f"{', '.join(NCCL_REDUCE)}, got {reduce!r}")
        return getattr(self.nccl, NCCL_REDUCE[reduce])

    def collective(self, op: str, reduce: str | None, src: int, dst: int, count: int,
                   dtype: str, root: int = 0, stream: int = 0) -> None:
        """Enqueue one collective on `stream` (a CUstream handle, 0: the default stream);
        the arguments mean what Gpu.collective's do."""
        n_src, n_dst = element_counts(op, count, self.size)
        s, d = self._buffer(src, n_src, dtype), self._buffer(dst, n_dst, dtype)
        c, stream = self.comm, int(stream)
        if op == "all_reduce":
            c.allreduce(s, d, self._reduce(op, reduce), stream=stream)
        elif op == "reduce_scatter":
            c.reduce_scatter(s, d, self._reduce(op, reduce), stream=stream)
        elif op == "all_gather":
            c.allgather(s, d, stream=stream)
        elif op == "reduce":
            # root must be given: nccl4py's reduce without a root is an AllReduce
            c.reduce(s, d, self._reduce(op, reduce), int(root), stream=stream)
        elif op == "all_to_all":
            self._all_to_all(s, d, src, dst, count, dtype, stream)
        else:
            c.broadcast(s, d, root, stream=stream)

    def _all_to_all(self, s, d, src: int, dst: int, count: int, dtype: str,
                    stream: int) -> None:
        """ncclAlltoAll through nccl4py's alltoall where it has one, else NCCL's documented
        pattern: one ncclSend and one ncclRecv per peer, inside one group call."""
        method = getattr(self.comm, "alltoall", None)
        if method is not None:
            method(s, d, stream=stream)
            return
        start = getattr(self.nccl, "group_start", None)
        end = getattr(self.nccl, "group_end", None)
        if start is None or end is None or not hasattr(self.comm, "send"):
            raise RuntimeFault(f"nccl4py must have Communicator.alltoall or group_start/"
                               f"group_end with send/recv for an AllToAll, got neither in "
                               f"nccl4py {self.versions().get('nccl4py')}; run with "
                               "WB_NCCL=torch")
        block = count // self.size
        size = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4}[dtype]
        start()
        for peer in range(self.size):
            self.comm.send(self._buffer(src + peer * block * size, block, dtype), peer,
                           stream=stream)
            self.comm.recv(self._buffer(dst + peer * block * size, block, dtype), peer,
                           stream=stream)
        end()

    def versions(self) -> dict[str, str]:
        info = self.nccl.get_version()
        lib = info.libnccl
        return {"nccl": str(lib.version if lib is not None else info.nccl_bindings),
                "nccl4py": str(info.nccl4py)}


# -- the whole layer


@dataclass
class Comm:
    """This rank's host exchange and NCCL; `nccl` None: torch.distributed's NCCL (the caller
    runs collectives through torch). `info` says which is in use, with versions."""

    host: MpiHost | TorchHost
    nccl: Nccl4py | None
    info: dict = field(default_factory=dict)

    def summary(self) -> str:
        i = self.info
        via = i["nccl_via"] + (f" {i['nccl4py']}" if self.nccl is not None else "")
        why = f" ({i['nccl4py_note']})" if i.get("nccl4py_note") else ""
        host = i["host_exchange"] + (f" {i['mpi4py']} ({i['mpi']})" if "mpi4py" in i else "")
        return f"NCCL {i['nccl']} through {via}{why}; host exchange through {host}"

    def close(self) -> None:
        # The nccl4py communicator is left to process exit, like torch's process group:
        # ncclCommDestroy is collective and would hang behind a rank that died.
        self.host.close()


def _import_nccl4py(choice: str):
    """(nccl.core, "") or (None, why not); a RuntimeFault when WB_NCCL=nccl4py fails."""
    if choice == "torch":
        return None, "WB_NCCL=torch"
    try:
        from nccl import core
    except Exception as e:  # ImportError, or libnccl/cuda-core failing to load
        if choice == "nccl4py":
            raise RuntimeFault(f"nccl4py must import with WB_NCCL=nccl4py, got {e}; install it "
                               "(pip install nccl4py) or unset WB_NCCL") from None
        return None, f"nccl4py not importable: {e}"
    return core, ""


def connect(rank: int, size: int, *, torch, dist, device, timeout_s: float, view,
            environ=None) -> Comm:
    """Bring up this rank's communication: the host exchange, torch.distributed's NCCL
    process group (always), and an nccl4py communicator where nccl4py imports."""
    import datetime

    env = rank_env(environ)
    if (env.rank, env.size) != (rank, size):
        raise RuntimeFault(f"the rank's environment must say rank {rank} of {size}, got rank "
                           f"{env.rank} of {env.size}; start every rank the same way")
    host = MpiHost.world(env) if host_mode(env) == "mpi" else None
    os.environ.update(torch_rendezvous(host, env, environ))
    dist.init_process_group("nccl", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout_s), device_id=device)
    if host is None:
        host = TorchHost(dist, rank, device.index)
    info = {"host_exchange": host.kind}
    if isinstance(host, MpiHost):
        import mpi4py

        info.update(mpi4py=mpi4py.__version__, mpi=host.library)
    core, note = _import_nccl4py(nccl_choice(environ))
    nccl = Nccl4py(host, rank, size, view, core) if core is not None else None
    if nccl is not None:
        info.update(nccl_via=nccl.kind, **nccl.versions())
    else:
        info.update(nccl_via="torch.distributed", nccl4py_note=note,
                    nccl=".".join(map(str, torch.cuda.nccl.version())))
    return Comm(host, nccl, info)
