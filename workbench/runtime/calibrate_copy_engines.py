"""Calibration's copy-engine measurement: every GPU pushes into each other GPU's CUDA-IPC-mapped
buffer by cuMemcpyDtoDAsync at once, checked, the slowest rank's median.
"""

from __future__ import annotations

import statistics

from cost_model.calibration import (
    COPY_ENGINE_NBYTES,
)
from workbench.errors import RuntimeFault
from workbench.runtime.calibrate_kernels import Kernels
from workbench.runtime.calibrate_progress import log


def copy_slot(sender: int, receiver: int) -> int:
    """The slot of `receiver`'s destination buffer that `sender` pushes into: the P - 1 other
    ranks in rank order (a rank never pushes to itself, so it has no slot of its own)."""
    return sender - (sender > receiver)


def copy_engines(torch, dist, rank: int, P: int, warmup: int, reps: int) -> list[dict]:
    """The copy engines' peer-to-peer bandwidth (`copy_engine_pushes`) on the primary context
    that torch and NCCL use, through pycuda (CUDA IPC and cuMemcpyDtoDAsync, as the runtime
    maps and moves peer buffers)."""
    with Kernels(torch, rank) as kern:
        return copy_engine_pushes(kern.drv, dist, rank, P, warmup, reps)


def copy_engine_pushes(drv, dist, rank: int, P: int, warmup: int, reps: int,
                       sizes=COPY_ENGINE_NBYTES) -> list[dict]:
    """One row per size n (bytes per peer, COPY_ENGINE_NBYTES): every rank pushes n bytes of
    its source into its slot of each other rank's destination at once, by copy engines
    (drv.memcpy_dtod_async into the peer's buffer mapped through CUDA IPC, one stream per
    peer), so every link direction is busy, as in a fused collective moved by copy engines.

    Each repetition starts after a barrier (every rank pushes at the same time) and is timed
    with CUDA events from a start on one stream, which the peer streams wait for, to an end
    after every peer's copy. A row gives nbytes, peers (P - 1), the slowest rank's median
    time (ms) and Bps = peers * nbytes / time: bytes per GPU per direction (each GPU sends
    and receives peers * nbytes). After each size every rank checks that the first and last
    word of each slot hold its sender's fill (rank + 1), so a time is of bytes that landed
    where they should (`check`); a mismatch anywhere raises on every rank alike.

    The same pattern as the link probe's copy engines both ways at once (2x H200, GPU run
    11, records/gpu/h200x2-run11-link: 389-392 GB/s per direction); the section takes
    well under a second."""

    peers = [q for q in range(P) if q != rank]
    big = max(sizes)
    src, dst = drv.mem_alloc(big), drv.mem_alloc(big * len(peers))
    mapped: dict[int, object] = {}
    try:
        drv.memset_d32(src, rank + 1, big // 4)  # the fill that names the sender
        drv.Context.synchronize()
        handles: list = [None] * P
        dist.all_gather_object(handles, bytes(drv.mem_get_ipc_handle(int(dst))))
        for q in peers:
            mapped[q] = drv.IPCMemoryHandle(bytearray(handles[q]),
                                            drv.ipc_mem_flags.LAZY_ENABLE_PEER_ACCESS)
        main, streams = drv.Stream(), {q: drv.Stream() for q in peers}
        start, end = drv.Event(), drv.Event()
        done = {q: drv.Event() for q in peers}
        rows = []
        for n in sizes:
            def push(n=n) -> float:
                """One push of n bytes to every peer at once; its time (ms)."""
                start.record(main)
                for q in peers:
                    streams[q].wait_for_event(start)
                    drv.memcpy_dtod_async(int(mapped[q]) + copy_slot(rank, q) * big, src, n,
                                          streams[q])
                    done[q].record(streams[q])
                    main.wait_for_event(done[q])
                end.record(main)
                end.synchronize()
                return end.time_since(start)

            # zero the slots, so that the check below sees this size's bytes; the barrier
            # before the first push keeps every peer from pushing before this is done
            drv.memset_d32(dst, 0, big * len(peers) // 4)
            drv.Context.synchronize()
            times = []
            for i in range(warmup + reps):
                dist.barrier()
                ms = push()
                if i >= warmup:
                    times.append(ms)
            dist.barrier()  # every rank's pushes have ended: read what landed
            wrong = []
            for q in peers:
                base = int(dst) + copy_slot(q, rank) * big
                words = [read_u32(drv, base), read_u32(drv, base + n - 4)]
                if words != [q + 1, q + 1]:
                    wrong.append(f"rank {rank} from {q}: first and last word {words}, want "
                                 f"{q + 1}")
            medians: list = [None] * P
            dist.all_gather_object(medians, (statistics.median(times), wrong))
            bad = [w for _, ws in medians for w in ws]
            if bad:
                raise RuntimeFault(f"copy-engine pushes of {n} bytes must land in every "
                                   f"peer's slot, got {'; '.join(bad)}")
            ms = max(m for m, _ in medians)  # the slowest rank's median
            rows.append({"nbytes": n, "peers": len(peers), "ms": ms,
                         "Bps": len(peers) * n / (ms * 1e-3), "check": "ok"})
            log(rank, f"copy engines {n} B to each of {len(peers)} peer(s): {ms:.4f} ms, "
                      f"{rows[-1]['Bps'] / 1e9:.1f} GB/s per direction")
        drv.Context.synchronize()
        for h in mapped.values():
            h.close()
        mapped = {}
        dist.barrier()  # no rank frees its destination while a peer still maps it
        return rows
    finally:
        for h in mapped.values():  # after a failure: this rank's mappings, then its buffers
            h.close()
        src.free()
        dst.free()


def read_u32(drv, ptr: int) -> int:
    """The 32-bit word at device address `ptr`."""
    import numpy as np

    word = np.zeros(1, dtype=np.uint32)
    drv.memcpy_dtoh(word, ptr)
    return int(word[0])

