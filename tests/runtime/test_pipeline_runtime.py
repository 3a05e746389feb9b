"""The pipeline's runtime without GPUs: ranks split into stages (stage-major), the --gpus
check, the NCCL chunk arithmetic, per-stage NCCL communicators and point-to-point dispatch
(fake nccl4py), and every schedule's PlanRun on fake devices: each rank allocates its
stage's buffers, maps the right ranks' buffers, and launches its stage's steps with the right
pointers, chunks and sequence numbers (4 ranks in threads, P = 2 per stage)."""

import threading
import types

import pytest

from workbench.cli.main import main
from workbench.errors import RuntimeFault
from workbench.runtime import comm
from workbench.runtime.chunked import nccl_chunk
from workbench.runtime.executor import PlanRun
from workbench.runtime.worker import held_outputs, stage_split

# -- ranks and stages


@pytest.mark.parametrize("world,stages,P", [(2, 2, 1), (4, 2, 2), (8, 2, 4), (3, 1, 3)])
def test_stage_split(world, stages, P):
    assert stage_split(world, stages) == P


@pytest.mark.parametrize("world,fits", [(3, "2 or 4"), (1, "2"), (5, "4 or 6")])
def test_stage_split_says_which_gpu_counts_work(world, fits):
    with pytest.raises(RuntimeFault, match=rf"^--gpus must be a multiple of the 2 stages of "
                                           rf"studies/pipeline.py, got --gpus {world}; use "
                                           rf"--gpus {fits} \(stages x ranks per stage\)$"):
        stage_split(world, 2, "studies/pipeline.py")


def test_compile_and_measure_refuses_gpus_that_do_not_split_into_stages(capsys):
    code = main(["compile-and-measure", "studies/pipeline.py", "--gpus", "3"])
    err = capsys.readouterr().err
    assert code == 2
    assert ("--gpus must be a multiple of the 2 stages of studies/pipeline.py, got --gpus 3; "
            "use --gpus 2 or 4") in err


@pytest.mark.parametrize("op,src,dst", [("all_reduce", 1, 1), ("all_gather", 1, 2),
                                        ("reduce_scatter", 2, 1)])
def test_nccl_chunk_offsets(op, src, dst):
    # 2 ranks, 12 f16 elements per rank in 3 chunks of 4: the side holding every rank's part
    # (all_gather's destination, reduce_scatter's source) moves P times faster.
    for i in range(3):
        s, d, n = nccl_chunk(op, 0x1000, 0x2000, 12, "f16", i, 3, 2)
        assert n == 4
        assert (s - 0x1000, d - 0x2000) == (i * 4 * 2 * src, i * 4 * 2 * dst)


# -- per-stage NCCL communicators and point-to-point (fake nccl4py)


class _Communicator:
    def __init__(self, nranks, rank, uid):
        self.nranks, self.rank, self.uid, self.calls = nranks, rank, uid, []

    def send(self, buf, peer, stream=0):
        self.calls.append(("send", buf, peer, stream))

    def recv(self, buf, peer, stream=0):
        self.calls.append(("recv", buf, peer, stream))


def _nccl(ids):
    made = iter(ids)
    return types.SimpleNamespace(
        get_unique_id=lambda: next(made), UniqueId=types.SimpleNamespace(from_bytes=lambda b: b),
        Communicator=types.SimpleNamespace(init=_Communicator))


class _Host:
    """One rank's view of a host allgather whose other entries are given."""

    def __init__(self, rank, others):
        self.rank, self.others = rank, others

    def allgather(self, obj):
        return [obj if q == self.rank else self.others.get(q) for q in range(4)]

    def bcast(self, obj, root=0):
        return obj if self.rank == root else bytes(128)


def test_stage_communicators_take_their_first_ranks_id():
    id0, id2 = b"\x01" * 128, b"\x02" * 128
    # rank 3 (stage 1, local rank 1): rank 2 made stage 1's id
    world = comm.Nccl4py(_Host(3, {}), 3, 4, lambda *a: a, nccl=_nccl([]))
    stage = world.subgroup(_Host(3, {0: id0, 2: id2}), 3, (2, 3))
    assert (stage.size, stage.comm.nranks, stage.comm.rank, stage.comm.uid) == (2, 2, 1, id2)
    # rank 0 makes stage 0's id itself
    world0 = comm.Nccl4py(_Host(0, {}), 0, 4, lambda *a: a, nccl=_nccl([id0, id0]))
    stage0 = world0.subgroup(_Host(0, {2: id2}), 0, (0, 1))
    assert stage0.comm.uid == id0 and stage0.comm.rank == 0
    with pytest.raises(RuntimeFault, match=r"^a rank must belong to the group it joins, got "
                                           r"rank 0 and group \[2, 3\]"):
        comm.group_unique_id(_Host(0, {}), 0, (2, 3), lambda: id0)
    with pytest.raises(RuntimeFault, match=r"^the NCCL unique id of group \[2, 3\] must be 128 "
                                           r"bytes from rank 2, got None"):
        comm.group_unique_id(_Host(3, {}), 3, (2, 3), lambda: id0)


def test_nccl4py_send_and_recv_on_the_world_communicator():
    world = comm.Nccl4py(_Host(1, {}), 1, 4, lambda p, n, d: (p, n, d), nccl=_nccl([]))
    world.p2p("send", 0x100, 8, "f16", 3, stream=5)
    world.p2p("recv", 0x200, 8, "f16", 3)
    assert world.comm.calls == [("send", (0x100, 8, "f16"), 3, 5),
                                ("recv", (0x200, 8, "f16"), 3, 0)]


# -- every schedule on 4 fake devices (2 stages of 2 ranks)

SIZES = {"T": 16, "H": 8, "P": 2}
BASE = 1 << 32  # rank q's allocations start at (q + 1) * BASE: an address names its rank


def _rank_of(addr: int) -> int:
    return addr // BASE - 1


class _Alloc(int):
    def free(self):
        pass


class _Mapped:
    def __init__(self, handle, flags):
        self.addr = int.from_bytes(bytes(handle), "little")

    def __int__(self):
        return self.addr

    def close(self):
        pass


class _Drv:
    ipc_mem_flags = types.SimpleNamespace(LAZY_ENABLE_PEER_ACCESS=1)
    event_flags = types.SimpleNamespace(DISABLE_TIMING=2)
    Context = types.SimpleNamespace(synchronize=lambda: None)
    IPCMemoryHandle = _Mapped

    def __init__(self, rank):
        self.next = (rank + 1) * BASE

    def mem_alloc(self, nbytes):
        a = _Alloc(self.next)
        self.next += -(-nbytes // 256) * 256
        return a

    def memset_d32(self, *a):
        pass

    memset_d16 = memset_d32

    def mem_get_ipc_handle(self, ptr):
        return int(ptr).to_bytes(8, "little")

    def Stream(self):
        return types.SimpleNamespace(handle=id(object()), wait_for_event=lambda e: None)

    def Event(self, flags=0):
        return types.SimpleNamespace(record=lambda stream=None: None)


class _Fn:
    def __init__(self, spec, log):
        self.spec, self.log = spec, log

    def prepare(self, sig):
        self.sig = sig

    def prepared_async_call(self, grid, block, stream, *args):
        names = [p.name for p in self.spec.params]
        self.log.append(("kernel", self.spec.kind, grid[0], dict(zip(names, args))))


class _Gpu:
    def __init__(self, rank, barrier, board):
        self.rank, self.world, self.drv, self.sm_count = rank, 4, _Drv(rank), 4
        self.barrier_, self.board, self.log = barrier, board, []

    def all_gather(self, obj):
        self.board[self.rank] = obj
        self.barrier_.wait()
        out = list(self.board)
        self.barrier_.wait()
        return out

    def function(self, name, source):
        # the runtime gets the source codegen rendered (Plan.source), never a spec to render
        assert 'extern "C" __global__' in source and name in source
        return _Fn(self.specs[name], self.log)

    def collective(self, op, reduce, src, dst, count, dtype, root=0, stream=0):
        self.log.append(("nccl", op, src, dst, count))

    def p2p(self, op, ptr, count, dtype, peer, stream=0):
        self.log.append(("p2p", op, ptr, count, peer))


def _run_all(program, monkeypatch):
    """Each of 4 ranks builds a PlanRun and runs it twice; returns (runs, logs) by rank."""
    from codegen.lower import lower

    monkeypatch.setitem(__import__("sys").modules, "torch", types.SimpleNamespace(
        cuda=types.SimpleNamespace(ExternalStream=lambda h: h)))
    plan = lower(program, 2)
    barrier, board = threading.Barrier(4), [None] * 4
    gpus = [_Gpu(q, barrier, board) for q in range(4)]
    for gpu in gpus:
        gpu.specs = {spec.name: spec for spec in plan.kernels()}
    runs, errors = [None] * 4, []

    def rank_main(q):
        try:
            runs[q] = PlanRun(gpus[q], plan, SIZES)
            runs[q].run()
            runs[q].run()
        except BaseException as e:  # reported below, with the rank
            errors.append((q, e))
            barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(q,)) for q in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return plan, runs, [g.log for g in gpus]


def _program(schedule):
    from studies.pipeline import build

    program, schedules = build(chunks=2)
    return program if schedule is None else next(
        s for s in schedules if s.name == schedule).apply()


def test_unscheduled_sends_through_nccl_from_each_stage0_rank_to_its_partner(monkeypatch):
    plan, runs, logs = _run_all(_program(None), monkeypatch)
    for q in range(4):
        stage, local = divmod(q, 2)
        assert runs[q].stage == stage and runs[q].local == local
        # every buffer this rank allocated is one of its stage's, in its own address range
        assert {b.group for b in runs[q].buffers} == {stage}
        assert {_rank_of(a) for a in runs[q].ptr.values()} == {q}
        p2p = [e for e in logs[q] if e[0] == "p2p"]
        n = SIZES["T"] * SIZES["H"]
        if stage == 0:
            assert [e[0] for e in logs[q]] == ["nccl", "kernel", "p2p"] * 2
            assert p2p[0] == ("p2p", "send", runs[q].ptr["z"], n, q + 2)
        else:
            assert [e[0] for e in logs[q]] == ["p2p"] * 2
            assert p2p[0] == ("p2p", "recv", runs[q].ptr["out"], n, q - 2)
    assert runs[0].holds("z") and not runs[2].holds("z") and runs[2].holds("out")
    with pytest.raises(RuntimeFault, match=r"^value 'out' must live on this rank's stage "
                                           r"stage0 to be downloaded"):
        runs[0].download(["out"])
    mine, theirs = held_outputs(runs[0], plan.program, plan.program)
    assert mine.outputs == () and theirs.outputs == ()
    mine, _ = held_outputs(runs[3], plan.program, plan.program)
    assert [v.name for v in mine.outputs] == ["out"]


@pytest.mark.parametrize("schedule", ["fuse-rs-c-send-ag", "overlap-fuse-rs-c-send-ag"])
def test_fused_send_writes_into_the_partner_and_waits_with_matching_sequence(schedule,
                                                                              monkeypatch):
    plan, runs, logs = _run_all(_program(schedule), monkeypatch)
    chunks = 2 if schedule.startswith("overlap") else 1
    for q in range(4):
        stage, local = divmod(q, 2)
        kernels = [e for e in logs[q] if e[0] == "kernel"]
        if stage == 0:
            assert [k[1] for k in kernels] == ["send"] * 2 * chunks
            for k, (_, _, grid, args) in enumerate(kernels):
                # the Send's data and flag live on the partner (same local rank, stage 1);
                # the reduce-scatter reads this stage's two ranks; the ack is local
                assert _rank_of(args["p_out_s_remote"]) == q + 2
                assert args["p_out_s_remote"] == runs[q + 2].ptr["out_s"]
                assert args["sendflags"] == runs[q + 2].ptr["sendflags_out_s"]
                assert args["sendack"] == runs[q].ptr["sendack_out_s"]
                assert [_rank_of(args[f"p_y_peer{j}"]) for j in range(2)] == [0, 1]
                assert [_rank_of(args[f"flags{j}"]) for j in range(2)] == [0, 1]
                assert args["rank"] == local and grid == 8  # 2 blocks per SM, all resident
                assert args["seq"] == 1 + k // chunks
                if chunks > 1:
                    assert args["chunk"] == k % chunks
        else:
            waits = [k for k in kernels if k[1] == "wait"]
            assert len(waits) == 2 * chunks
            for k, (_, _, grid, args) in enumerate(waits):
                assert grid == 1 and args["seq"] == 1 + k // chunks
                assert args["chunk"] == (k % chunks if chunks > 1 else 0)
                assert args["sendack"] == runs[q - 2].ptr["sendack_out_s"]
                assert args["sendflags"] == runs[q].ptr["sendflags_out_s"]
            gathers = [e for e in logs[q] if e[0] == "nccl"]
            assert [e[1] for e in gathers] == ["all_gather"] * 2 * chunks
            # per chunk: the wait, then the AllGather of that chunk's part
            order = [e[1] if e[0] == "kernel" else e[1] for e in logs[q]]
            assert order == ["wait", "all_gather"] * 2 * chunks
            part = SIZES["T"] * SIZES["H"] // 2 // chunks
            for i, (_, _, src, dst, count) in enumerate(gathers[:chunks]):
                assert count == part
                assert src == runs[q].ptr["out_s"] + 2 * i * part
                assert dst == runs[q].ptr["out"] + 2 * i * part * 2


def test_fuse_c_send_overlap_ar_overlaps_allreduce_chunks_with_the_send(monkeypatch):
    plan, runs, logs = _run_all(_program("fuse-c-send-overlap-ar"), monkeypatch)
    for q in (0, 1):
        kinds = [e[1] if e[0] == "nccl" else e[1] for e in logs[q]]
        assert kinds == ["all_reduce", "send"] * 4  # 2 chunks, 2 runs
        sends = [e[3] for e in logs[q] if e[0] == "kernel"]
        assert [a["chunk"] for a in sends] == [0, 1, 0, 1]
        assert [a["seq"] for a in sends] == [1, 1, 2, 2]
        assert sends[0]["p_out_remote"] == runs[q + 2].ptr["out"]
    for q in (2, 3):
        assert [e[1] for e in logs[q]] == ["wait"] * 4


def test_comm_bytes_count_the_send():
    from workbench.runtime.worker import comm_bytes

    sizes = {"T": 16, "H": 8, "P": 2}
    whole = 16 * 8 * 2  # f16
    # AllReduce within the stage 2 (P-1)/P x size, then each rank sends all of z
    assert comm_bytes(_program(None), sizes, 2) == whole + whole
    # ReduceScatter (P-1)/P x size, a slice sent, AllGather (P-1)/P x size on stage 1
    assert comm_bytes(_program("rs-c-send-ag"), sizes, 2) == whole // 2 * 3
