"""The copy-engine section of `workbench calibrate` (calibrate_copy_engines.copy_engine_pushes) on a
CPU: P ranks as threads over a fake pycuda driver whose device memory is shared bytearrays,
whose CUDA IPC handles name another rank's allocation and whose copies move real bytes, and a
fake torch.distributed of thread barriers. Checks where every push lands, the times and
bandwidths a row reports (the slowest rank's median), the barrier before each repetition,
and that a push into the wrong slot fails on every rank with a clear error."""

import struct
import threading
from types import SimpleNamespace

import pytest

from workbench.errors import RuntimeFault
from workbench.runtime.calibrate_copy_engines import copy_engine_pushes, copy_slot

SIZES = [64, 256]  # bytes per peer, small stand-ins for 256 MiB and 1 GiB


class World:
    """What the ranks share: device memory (address -> bytearray) and a host barrier."""

    def __init__(self, P: int):
        self.P, self.memory, self.next = P, {}, 1 << 40
        self.barrier = threading.Barrier(P, timeout=10)
        self.lock = threading.Lock()
        self.gathered: list = [None] * P

    def alloc(self, n: int) -> int:
        with self.lock:
            addr, self.next = self.next, self.next + (1 << 32)
            self.memory[addr] = bytearray(n)
        return addr

    def find(self, ptr: int, n: int) -> tuple[bytearray, int]:
        """The allocation holding [ptr, ptr + n) and the offset of ptr in it."""
        for base, mem in self.memory.items():
            if base <= ptr and ptr + n <= base + len(mem):
                return mem, ptr - base
        raise AssertionError(f"no allocation holds {n} bytes at {ptr:#x}")


class FakeDrv:
    """One rank's pycuda driver: copies happen at once; each event reads a clock that a copy
    advances by its bytes / this rank's rate (ms), so a push of B bytes takes B / rate."""

    def __init__(self, world: World, rank: int, rate_Bpms: float, misplace: bool = False):
        self.world, self.rank, self.rate, self.misplace = world, rank, rate_Bpms, misplace
        self.clock, self.copies, self.allocs, self.freed, self.closed = 0.0, [], [], [], []
        self.ipc_mem_flags = SimpleNamespace(LAZY_ENABLE_PEER_ACCESS="lazy")
        self.Context = SimpleNamespace(synchronize=lambda: None)
        drv = self

        class Allocation(int):
            def free(self):
                drv.freed.append(int(self))

        class IPCMemoryHandle:
            def __init__(self, handle, flags):
                assert flags == "lazy" and isinstance(handle, bytearray)
                self.addr = int(bytes(handle).decode())

            def __int__(self):
                return self.addr

            def close(self):
                drv.closed.append(self.addr)

        class Event:
            def record(self, stream=None):
                self.t = drv.clock

            def synchronize(self):
                pass

            def time_since(self, other):
                return self.t - other.t

        self.Allocation, self.IPCMemoryHandle, self.Event = Allocation, IPCMemoryHandle, Event
        self.Stream = lambda: SimpleNamespace(wait_for_event=lambda event: None)

    def mem_alloc(self, n):
        self.allocs.append(self.world.alloc(n))
        return self.Allocation(self.allocs[-1])

    def memset_d32(self, ptr, value, count):
        mem, off = self.world.find(int(ptr), 4 * count)
        mem[off:off + 4 * count] = struct.pack("<I", value) * count

    def mem_get_ipc_handle(self, ptr):
        return str(int(ptr)).encode()

    def memcpy_dtod_async(self, dst, src, n, stream):
        if self.misplace:
            dst += 4  # a wrong slot offset: the check must catch it
        (dmem, doff), (smem, soff) = self.world.find(int(dst), n), self.world.find(int(src), n)
        dmem[doff:doff + n] = smem[soff:soff + n]
        self.copies.append((int(dst), n))
        self.clock += n / self.rate

    def memcpy_dtoh(self, out, ptr):
        mem, off = self.world.find(int(ptr), out.nbytes)
        out[:] = list(struct.unpack(f"<{len(out)}I", bytes(mem[off:off + out.nbytes])))


class FakeDist:
    """torch.distributed's barrier and all_gather_object for one rank of a thread world."""

    def __init__(self, world: World, rank: int):
        self.world, self.rank, self.barriers = world, rank, 0

    def barrier(self):
        self.barriers += 1
        self.world.barrier.wait()

    def all_gather_object(self, out, obj):
        self.world.barrier.wait()
        self.world.gathered[self.rank] = obj
        self.world.barrier.wait()
        out[:] = list(self.world.gathered)
        self.world.barrier.wait()


def _run(P: int, rates: list[float], warmup=2, reps=3, misplace_rank=None):
    """copy_engine_pushes on P thread ranks: ({rank: rows or exception}, drivers, dists)."""
    world = World(P)
    drvs = [FakeDrv(world, r, rates[r], r == misplace_rank) for r in range(P)]
    dists = [FakeDist(world, r) for r in range(P)]
    out = {}

    def rank_main(r):
        try:
            out[r] = copy_engine_pushes(drvs[r], dists[r], r, P, warmup, reps, sizes=SIZES)
        except Exception as e:  # noqa: BLE001 - the test inspects it
            out[r] = e

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(P)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return out, drvs, dists, world


def test_slots_leave_out_the_receiver():
    # rank 1 of 3 receives from 0 into slot 0 and from 2 into slot 1
    assert [copy_slot(s, 1) for s in (0, 2)] == [0, 1]
    assert [copy_slot(s, 0) for s in (1, 2)] == [0, 1]
    assert [copy_slot(s, 2) for s in (0, 1)] == [0, 1]


def test_every_rank_pushes_to_every_peer_and_the_slowest_median_is_reported():
    P, warmup, reps = 3, 2, 3
    rates = [100.0, 50.0, 80.0]  # bytes per ms: rank 1 is the slowest
    out, drvs, dists, world = _run(P, rates, warmup, reps)
    rows = out[0]
    assert all(out[r] == rows for r in range(P))  # every rank returns the same rows
    # per size: 2 peers x n bytes from the slowest rank at 50 B/ms
    assert [(r["nbytes"], r["peers"], r["check"]) for r in rows] == [(n, 2, "ok")
                                                                     for n in SIZES]
    assert [r["ms"] for r in rows] == pytest.approx([2 * n / 50.0 for n in SIZES])
    assert [r["Bps"] for r in rows] == pytest.approx([50.0 * 1e3] * len(SIZES))
    for r, drv in enumerate(drvs):
        # warm-up and timed pushes of each size to each peer, into the slot of the sender
        assert len(drv.copies) == len(SIZES) * (warmup + reps) * (P - 1)
        assert {n for _, n in drv.copies} == set(SIZES)
        # a barrier before every repetition, one before the check of each size, one before
        # freeing
        assert dists[r].barriers == len(SIZES) * (warmup + reps + 1) + 1
        assert len(drv.closed) == P - 1 and len(drv.freed) == 2
    # what landed: rank r's destination holds each sender's fill (sender + 1) in its slot
    big = max(SIZES)
    for r in range(P):
        mem = world.memory[drvs[r].allocs[1]]  # each rank allocated src, then dst
        assert len(mem) == big * (P - 1)
        for s in (q for q in range(P) if q != r):
            slot = mem[copy_slot(s, r) * big:(copy_slot(s, r) + 1) * big]
            assert set(struct.unpack(f"<{big // 4}I", bytes(slot))) == {s + 1}


def test_two_gpus_push_one_way_each():
    out, drvs, _, _ = _run(2, [200.0, 200.0], warmup=1, reps=1)
    assert [(r["nbytes"], r["peers"]) for r in out[0]] == [(64, 1), (256, 1)]
    assert [r["ms"] for r in out[0]] == pytest.approx([0.32, 1.28])
    assert [r["Bps"] for r in out[0]] == pytest.approx([200e3, 200e3])


def test_a_push_into_the_wrong_place_fails_on_every_rank():
    out, drvs, _, _ = _run(3, [100.0] * 3, misplace_rank=2)
    for r in range(3):
        assert isinstance(out[r], RuntimeFault), out[r]
        assert str(out[r]).startswith("copy-engine pushes of 64 bytes must land in every "
                                      "peer's slot, got rank 0 from 2: first and last word "
                                      "[0, 3], want 3")
        # a failure still closes this rank's mappings and frees its buffers
        assert len(drvs[r].closed) == 2 and len(drvs[r].freed) == 2

