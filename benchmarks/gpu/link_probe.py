"""How fast can one GPU move bytes to its NVLink peer, by each mechanism it has? Answers
whether anything reaches the 413 GB/s per direction that the issue's 2x H200 Adam target
(2.6 ms for 1 GiB each way) needs, where the fused kernel's peer stores move ~356 GB/s.

One process drives GPUs 0 and 1 (cupy, peer access on), 512 MiB per transfer:
  - copy engines: cudaMemcpyPeerAsync issued on the source's stream (push) or the
    destination's (pull), whole or in 8 MiB pieces;
  - SM copies: 16-byte loads and stores (benchmarks/gpu/link_probe.cu `sm_copy`), as a push
    (peer stores) or a pull (peer loads), and stores of register values alone;
  - TMA bulk copies (`tma_copy`, `tma_store_only`: cp.async.bulk through shared memory);
  - a copy-engine push beside an HBM-bound kernel on both GPUs (what a copy-engine schedule
    of the Adam step would run), against each alone.
Each is run one way (GPU 0 -> 1) and both ways at once; the time is the wall clock over 10
back-to-back transfers between device synchronizations, the median of 5 such batches, and
the rate is bytes per direction / time.

    python3 benchmarks/gpu/link_probe.py OUT.json      (on a machine with >= 2 GPUs, nvcc)
"""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from probe_timing import seconds_per_round  # beside this script

NBYTES = 512 * 2**20
PIECE = 8 * 2**20
TMA_CHUNK = 16 * 2**10
REPS, BATCHES = 10, 5


def main(out_path: str) -> int:
    import cupy as cp

    src_cu = Path(__file__).with_name("link_probe.cu")
    cubin = Path(tempfile.mkdtemp(prefix="wb-link-")) / "link_probe.cubin"
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    subprocess.run([nvcc, "-arch=sm_90", "-O3", "-cubin", "-o", str(cubin), str(src_cu)],
                   check=True)
    rt = cp.cuda.runtime
    devs = (0, 1)
    mods, streams, bufs = {}, {}, {}
    for d in devs:
        with cp.cuda.Device(d):
            if not rt.deviceCanAccessPeer(d, 1 - d):
                raise SystemExit(f"GPU {d} must reach GPU {1 - d} by peer access, got no")
            rt.deviceEnablePeerAccess(1 - d)
            mods[d] = cp.RawModule(path=str(cubin))
            # a second stream per GPU runs the HBM-bound kernel beside the copies
            streams[d] = cp.cuda.Stream(non_blocking=True)
            streams[("side", d)] = cp.cuda.Stream(non_blocking=True)
            bufs[d] = {k: cp.zeros(NBYTES // 4, dtype=cp.float32) for k in ("src", "dst")}
            bufs[d]["x"] = cp.ones(2**28, dtype=cp.float32)  # 1 GiB each, for axpy
            bufs[d]["y"] = cp.ones(2**28, dtype=cp.float32)
    sms = cp.cuda.Device(0).attributes["MultiProcessorCount"]
    name = rt.getDeviceProperties(0)["name"].decode()
    print(f"{name}, {sms} SMs; {NBYTES >> 20} MiB per transfer", flush=True)

    def sync():
        for d in devs:
            with cp.cuda.Device(d):
                cp.cuda.runtime.deviceSynchronize()

    def timed(issues):
        return seconds_per_round(issues, sync, REPS, BATCHES)

    def ce(src_dev, push=True, piece=NBYTES, span=(0, NBYTES), stream_key=None):
        """Copy-engine transfer of bytes [span) of src to the peer's dst, in pieces."""
        dst_dev = 1 - src_dev
        on = src_dev if push else dst_dev
        s = streams[on if stream_key is None else stream_key]
        src, dst = bufs[src_dev]["src"].data.ptr, bufs[dst_dev]["dst"].data.ptr

        def f():
            with cp.cuda.Device(on):
                for off in range(span[0], span[1], piece):
                    n = min(piece, span[1] - off)
                    rt.memcpyPeerAsync(dst + off, dst_dev, src + off, src_dev, n, s.ptr)
        return f

    def ptr(dev, key):  # buffers go to kernels as raw pointers (peer ones included)
        return cp.uint64(bufs[dev][key].data.ptr)

    def kernel(on_dev, fn, grid, block, args, smem=0, stream_key=None):
        k = mods[on_dev].get_function(fn)
        s = streams[on_dev if stream_key is None else stream_key]

        def f():
            with cp.cuda.Device(on_dev):
                k((grid,), (block,), args, stream=s, shared_mem=smem)
        return f

    def sm(src_dev, push=True, blocks=2 * sms, span=(0, NBYTES), stream_key=None):
        """SM copy of bytes [span) of src to the peer's dst (peer stores or peer loads)."""
        dst_dev = 1 - src_dev
        on = src_dev if push else dst_dev
        return kernel(on, "sm_copy", blocks, 512,
                      (cp.uint64(bufs[src_dev]["src"].data.ptr + span[0]),
                       cp.uint64(bufs[dst_dev]["dst"].data.ptr + span[0]),
                       cp.int64((span[1] - span[0]) // 16)), stream_key=stream_key)

    def ce_and_sm(src_dev, ce_share):
        """The first ce_share of the bytes by copy engine, the rest by peer stores beside it."""
        cut = int(NBYTES * ce_share) // 2**20 * 2**20
        c = ce(src_dev, True, span=(0, cut))
        k = sm(src_dev, True, span=(cut, NBYTES), stream_key=("side", src_dev))
        return lambda: (c(), k())

    def ce_two_streams(src_dev):
        """Two copy-engine pushes of half the bytes each, on two streams."""
        a = ce(src_dev, True, span=(0, NBYTES // 2))
        b = ce(src_dev, True, span=(NBYTES // 2, NBYTES), stream_key=("side", src_dev))
        return lambda: (a(), b())

    def sm_store_only(src_dev):
        return kernel(src_dev, "sm_store_only", 2 * sms, 512,
                      (ptr(1 - src_dev, "dst"), cp.int64(NBYTES // 16)))

    def tma(src_dev, blocks=4 * sms):
        return kernel(src_dev, "tma_copy", blocks, 32,
                      (ptr(src_dev, "src"), ptr(1 - src_dev, "dst"), cp.int64(NBYTES),
                       cp.int32(TMA_CHUNK)), smem=2 * TMA_CHUNK)

    def tma_store_only(src_dev, blocks=4 * sms):
        return kernel(src_dev, "tma_store_only", blocks, 32,
                      (ptr(1 - src_dev, "dst"), cp.int64(NBYTES), cp.int32(TMA_CHUNK)),
                      smem=TMA_CHUNK)

    def axpy(dev):
        return kernel(dev, "axpy", 2 * sms, 512, (ptr(dev, "x"), ptr(dev, "y"),
                                                  cp.int64(2**28 // 4)), stream_key=("side", dev))

    def local_copy(dev):
        return kernel(dev, "sm_copy", 2 * sms, 512,
                      (ptr(dev, "src"), ptr(dev, "dst"), cp.int64(NBYTES // 16)))

    cases = {
        "ce push": lambda d: ce(d, True),
        "ce pull": lambda d: ce(d, False),
        "ce push 8 MiB pieces": lambda d: ce(d, True, PIECE),
        "sm push (peer stores)": lambda d: sm(d, True),
        "sm pull (peer loads)": lambda d: sm(d, False),
        "sm push, 32 blocks": lambda d: sm(d, True, 32),
        "sm stores of registers": sm_store_only,
        "tma copy push": tma,
        "tma stores of shared memory": tma_store_only,
        "ce push on two streams": ce_two_streams,
        "ce 3/4 + sm stores 1/4 at once": lambda d: ce_and_sm(d, 0.75),
        "ce 1/2 + sm stores 1/2 at once": lambda d: ce_and_sm(d, 0.5),
    }
    rows = []

    def record(case, way, s, nbytes=NBYTES):
        row = {"case": case, "way": way, "ms": s * 1e3, "GBps_per_direction": nbytes / s / 1e9}
        rows.append(row)
        print(f"{case:32s} {way:10s} {row['ms']:.3f} ms  {row['GBps_per_direction']:.1f} GB/s",
              flush=True)
        return row

    record("local sm copy (read+write)", "gpu 0", timed([local_copy(0)]))
    for case, make in cases.items():
        try:
            record(case, "one way", timed([make(0)]))
            record(case, "both ways", timed([make(0), make(1)]))
        except Exception as e:  # noqa: BLE001 - a mechanism that fails is reported, the rest run
            print(f"{case}: {type(e).__name__}: {e}", flush=True)
            rows.append({"case": case, "error": f"{type(e).__name__}: {e}"})
            sync()
    # A copy-engine push beside an HBM-bound kernel (axpy over 1 GiB: 3 GiB of HBM traffic).
    t_axpy = timed([axpy(0), axpy(1)])
    rows.append({"case": "axpy alone, both gpus", "ms": t_axpy * 1e3})
    print(f"axpy alone: {t_axpy * 1e3:.3f} ms ({3 * 2**30 / t_axpy / 1e9:.0f} GB/s HBM)")
    t_ce = timed([ce(0), ce(1)])
    t_both = timed([ce(0), ce(1), axpy(0), axpy(1)])
    rows.append({"case": "ce push both ways + axpy on both", "ms": t_both * 1e3,
                 "alone_ms": {"ce": t_ce * 1e3, "axpy": t_axpy * 1e3}})
    print(f"ce both ways + axpy: {t_both * 1e3:.3f} ms against ce {t_ce * 1e3:.3f}, "
          f"axpy {t_axpy * 1e3:.3f}, sum {(t_ce + t_axpy) * 1e3:.3f}", flush=True)
    t_sm = timed([sm(0), sm(1)])
    t_sm_both = timed([sm(0), sm(1), axpy(0), axpy(1)])
    rows.append({"case": "sm push both ways + axpy on both", "ms": t_sm_both * 1e3,
                 "alone_ms": {"sm": t_sm * 1e3, "axpy": t_axpy * 1e3}})
    print(f"sm push both ways + axpy: {t_sm_both * 1e3:.3f} ms against sm {t_sm * 1e3:.3f}, "
          f"sum {(t_sm + t_axpy) * 1e3:.3f}", flush=True)
    meta = {"gpu": name, "sm_count": sms, "nbytes": NBYTES, "reps": REPS, "batches": BATCHES,
            "timing": "wall clock over REPS rounds between device synchronizations, median "
                      "of BATCHES", "command": "python3 benchmarks/gpu/link_probe.py OUT.json"}
    Path(out_path).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
