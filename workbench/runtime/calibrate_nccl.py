"""Calibration's NCCL measurements, on torch tensors through torch.distributed: every collective
over a sweep of sizes and dtypes (the slowest rank's median per point), send/recv between
peers, the runtime's own NCCL path, and the host's issue cost of an NCCL call.
"""

from __future__ import annotations

import statistics

from cost_model.hardware import NCCL_DTYPES
from workbench.runtime.baselines import event_times
from workbench.runtime.calibrate_progress import log
from workbench.runtime.comm import Nccl4py, TorchHost
from workbench.runtime.gpu import torch_view

COLLECTIVE_NBYTES = [2**k for k in range(16, 31)]  # 64 KiB .. 1 GiB, the NCCL table's range


TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def collectives(torch, dist, rank: int, P: int, warmup: int, reps: int,
                dtypes=("f32", *NCCL_DTYPES), passes: int = 1) -> tuple[dict, dict]:
    """({dtype: rows}, {dtype: error}): one row per size with nbytes and each collective's
    slowest-rank median time (ms), on buffers of each dtype (the same byte sizes in every
    dtype); a dtype whose buffers cannot be made is left out with its error. With `passes`
    > 1 the whole sweep runs that many times and each point is the median of its passes:
    single sweeps on 2x H200 (calibration runs 4 and 5) moved latency-bound points by 20-25 %.

    The dtypes are interleaved, size by size, in an order that rotates from one size to the
    next: in the second 2x H200 calibration, where each dtype had its own sweep, the f16 and
    bf16 sweeps (run after the f32 one) took half the time at 64 KiB even for all_gather,
    which does no arithmetic; interleaved, such drift cannot pass for a dtype effect."""
    dev = torch.device("cuda", rank)
    bufs, errors = {}, {}
    for dtype in dtypes:
        try:
            tdtype = getattr(torch, TORCH_DTYPES[dtype])
            item = torch.empty(0, dtype=tdtype).element_size()
            bufs[dtype] = (item, torch.randn(COLLECTIVE_NBYTES[-1] // item, device=dev,
                                             dtype=tdtype),
                           torch.empty(COLLECTIVE_NBYTES[-1] // item // P, device=dev,
                                       dtype=tdtype))
        except Exception as e:  # noqa: BLE001 - recorded in the raw file and logged
            errors[dtype] = f"{type(e).__name__}: {e}"
            log(rank, f"collectives {dtype} left out: {errors[dtype]}")
    order = list(bufs)
    samples = {dtype: {n: {} for n in COLLECTIVE_NBYTES} for dtype in order}
    for i, nbytes in enumerate(COLLECTIVE_NBYTES * passes):
        for dtype in order[i % len(order):] + order[:i % len(order)]:
            item, big, part = bufs[dtype]
            n = nbytes // item
            full, piece = big[:n], part[:n // P]
            ops = {"allreduce": lambda f=full: dist.all_reduce(f),
                   "reducescatter": lambda f=full, p=piece: dist.reduce_scatter_tensor(p, f),
                   "allgather": lambda f=full, p=piece: dist.all_gather_into_tensor(f, p)}
            times = samples[dtype][nbytes]
            for kind, fn in ops.items():
                times.setdefault(f"{kind}_ms", []).append(slowest_median(
                    torch, dist, dev, fn, warmup, reps))
            log(rank, f"collectives {dtype} {nbytes} B (pass {i // len(COLLECTIVE_NBYTES) + 1}"
                f"): " + ", ".join(f"{k} {v[-1]:.4f} ms" for k, v in times.items()))
    del bufs
    torch.cuda.empty_cache()
    return {dtype: median_rows(by_size) for dtype, by_size in samples.items()}, errors


def slowest_median(torch, dist, dev, fn, warmup: int, reps: int) -> float:
    """The slowest rank's median time (ms) of fn() between CUDA events (every rank calls)."""
    dist.barrier()
    med = torch.tensor([statistics.median(event_times(torch, fn, warmup, reps))], device=dev)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    return float(med.item())


def median_rows(by_size: dict) -> list[dict]:
    """{nbytes: {key: [ms per pass]}} -> rows of nbytes and each key's median over passes."""
    return [{"nbytes": n, **{k: statistics.median(v) for k, v in times.items()}}
            for n, times in by_size.items()]


def p2p(torch, dist, rank: int, P: int, warmup: int, reps: int, nccl=None,
        passes: int = 1) -> list[dict]:
    """One row per size (64 KiB .. 1 GiB) with the time (ms) of an NCCL send/recv from each
    rank of the first half of the GPUs to the same rank of the second half, all pairs at
    once: the pipeline's Send between stages (stage k's rank r is GPU k * P + r). Through
    torch.distributed (`sendrecv_ms`) and, where `nccl` (the runtime's nccl4py communicator)
    is given, through it as the runtime sends (`nccl4py_sendrecv_ms`), the two interleaved
    size by size. A time is the slowest rank's median, senders and receivers both (the
    transfer ends when both do); with `passes` > 1, the median of that many sweeps."""
    dev = torch.device("cuda", rank)
    peer, sender = halves_peer(rank, P)
    buf = torch.empty(COLLECTIVE_NBYTES[-1], device=dev, dtype=torch.uint8)
    stream, ptr = torch.cuda.current_stream().cuda_stream, buf.data_ptr()
    samples = {n: {} for n in COLLECTIVE_NBYTES}
    for nbytes in COLLECTIVE_NBYTES * passes:
        piece = buf[:nbytes]
        paths = {"sendrecv_ms": (lambda t=piece: dist.send(t, peer)) if sender
                 else (lambda t=piece: dist.recv(t, peer))}
        if nccl is not None:
            paths["nccl4py_sendrecv_ms"] = lambda n=nbytes: nccl.p2p(
                "send" if sender else "recv", ptr, n // 4, "f32", peer, stream)
        times = samples[nbytes]
        for key, fn in paths.items():
            times.setdefault(key, []).append(slowest_median(torch, dist, dev, fn, warmup,
                                                             reps))
        log(rank, f"p2p {nbytes} B: " + ", ".join(f"{k} {v[-1]:.4f} ms"
                                                 for k, v in times.items()))
    del buf
    torch.cuda.empty_cache()
    return median_rows(samples)


def runtime_nccl(torch, dist, rank: int, P: int):
    """The runtime's NCCL communicator (nccl4py, workbench.runtime.comm) beside
    torch.distributed's, or None where nccl4py does not import (logged)."""

    try:
        return Nccl4py(TorchHost(dist, rank, rank), rank, P,
                       lambda ptr, n, dt: torch_view(ptr, (n,), dt, rank))
    except Exception as e:  # noqa: BLE001 - the torch paths are still measured
        log(rank, f"nccl4py left out: {type(e).__name__}: {e}")
        return None


def halves_peer(rank: int, P: int) -> tuple[int, bool]:
    """(peer, sender) of a send/recv between the halves of P GPUs: rank r < P/2 sends to
    r + P/2 (stage k's rank r is GPU k * P/2 + r in a two-stage pipeline)."""
    half = P // 2
    return (rank + half, True) if rank < half else (rank - half, False)


def nccl_calls(torch, dist, rank: int, P: int, buf, n: int, nccl=None) -> dict:
    """The NCCL calls whose host cost calibration measures, on the first n f32 elements of
    `buf`: an all_reduce and a send/recv between the halves, through torch.distributed and,
    where `nccl` (the runtime's nccl4py communicator) is given, through it."""
    peer, sender = halves_peer(rank, P)
    piece = buf[:n]
    calls = {"torch_allreduce": lambda: dist.all_reduce(piece),
             "torch_sendrecv": (lambda: dist.send(piece, peer)) if sender
             else (lambda: dist.recv(piece, peer))}
    if nccl is not None:
        stream, ptr = torch.cuda.current_stream().cuda_stream, buf.data_ptr()
        calls["nccl4py_allreduce"] = lambda: nccl.collective(
            "all_reduce", "add", ptr, ptr, n, "f32", stream=stream)
        calls["nccl4py_sendrecv"] = lambda: nccl.p2p(
            "send" if sender else "recv", ptr, n, "f32", peer, stream)
    return calls


def host_issue_s(torch, dist, fn, calls: int = 200) -> float:
    """This rank's host seconds per call of fn(), issued back to back without waiting for
    the GPU (after 10 warm-up calls and a barrier)."""
    import time

    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    per_call = (time.perf_counter() - t0) / calls
    torch.cuda.synchronize()
    return per_call


def host_issue(torch, dist, rank: int, P: int, nccl=None, calls: int = 200) -> dict:
    """Host time of one NCCL call (4-byte all_reduce; send/recv between the halves), issued
    back to back without waiting for the GPU, through torch.distributed and through `nccl`
    (the runtime's nccl4py communicator; left out where None): seconds per call, the slowest
    rank's. The NCCL fit's host overhead is torch's (its tables are timed through
    torch.distributed); the workbench's own programs pay nccl4py's."""
    dev = torch.device("cuda", rank)
    buf = torch.zeros(1, device=dev)
    out = {}
    for name, fn in nccl_calls(torch, dist, rank, P, buf, 1, nccl).items():
        per_call = torch.tensor([host_issue_s(torch, dist, fn, calls)], device=dev,
                                dtype=torch.float64)
        dist.all_reduce(per_call, op=dist.ReduceOp.MAX)
        out[f"{name}_s"] = float(per_call.item())
        log(rank, f"host issue {name}: {out[f'{name}_s'] * 1e6:.1f} us per call")
    return out

