"""The link's practical rate at P peers (issue 35 item 3): every GPU moves bytes to (or from)
all P - 1 peers at once, as each phase of a collective over P ranks does, by each mechanism a
fused kernel or a copy-engine schedule has:

  - SM stores: one kernel per GPU, its blocks split evenly over the P - 1 peers, 16-byte
    stores into each peer's buffer (benchmarks/gpu/link_probe.cu `sm_copy`, a push);
  - SM loads: the same with 16-byte peer loads into the GPU's own buffer (a pull);
  - copy engines: P - 1 cudaMemcpyPeerAsync per GPU, one stream per peer.

All P GPUs run at once. The time is the wall clock over REPS back-to-back rounds between
device synchronizations, the median of BATCHES such batches; the rate is the bytes each GPU
sends (or receives) per direction / time. `practical_GBps` is the fastest mechanism: the
rate a schedule's `x_floor` divides by (`compile-and-measure --link-rate FILE`).

    python3 benchmarks/gpu/link_probe_peers.py OUT.json [P]   (P GPUs, default all; nvcc)
"""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from probe_timing import seconds_per_round  # beside this script

from workbench.files import write_atomic  # run from the repo root (PYTHONPATH)

NBYTES = 256 * 2**20  # per GPU per round, split over its P - 1 peers
REPS, BATCHES = 10, 5


def main(out_path: str, P: int | None = None) -> int:
    import cupy as cp

    rt = cp.cuda.runtime
    P = P or rt.getDeviceCount()
    if P < 2 or P > rt.getDeviceCount():
        raise SystemExit(f"P must be 2..{rt.getDeviceCount()} (the GPUs present), got {P}")
    src_cu = Path(__file__).with_name("link_probe.cu")
    cubin = Path(tempfile.mkdtemp(prefix="wb-link-")) / "link_probe.cubin"
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    subprocess.run([nvcc, "-arch=sm_90", "-O3", "-cubin", "-o", str(cubin), str(src_cu)],
                   check=True)
    devs = range(P)
    piece = NBYTES // (P - 1) // 2**20 * 2**20  # whole MiB to each peer
    mods, streams, bufs = {}, {}, {}
    for d in devs:
        with cp.cuda.Device(d):
            for q in devs:
                if q != d:
                    if not rt.deviceCanAccessPeer(d, q):
                        raise SystemExit(f"GPU {d} must reach GPU {q} by peer access, got no")
                    rt.deviceEnablePeerAccess(q)
            mods[d] = cp.RawModule(path=str(cubin))
            for q in devs:
                streams[d, q] = cp.cuda.Stream(non_blocking=True)
            bufs[d] = {k: cp.zeros(NBYTES // 4, dtype=cp.float32) for k in ("src", "dst")}
    sms = cp.cuda.Device(0).attributes["MultiProcessorCount"]
    name = rt.getDeviceProperties(0)["name"].decode()
    print(f"{name} x {P}, {sms} SMs; {piece >> 20} MiB to each of {P - 1} peers a round",
          flush=True)

    def sync():
        for d in devs:
            with cp.cuda.Device(d):
                rt.deviceSynchronize()

    def timed(issues):
        return seconds_per_round(issues, sync, REPS, BATCHES)

    def slot(d, q):  # where GPU d's bytes for peer q sit, in both buffers
        return (q if q < d else q - 1) * piece

    def ptr(d, key, off):
        return cp.uint64(bufs[d][key].data.ptr + off)

    def sm(d, push, blocks):
        """GPU d's kernels to all peers: `blocks` in all, split over the P - 1 peers."""
        k = mods[d].get_function("sm_copy")
        per_peer = max(1, blocks // (P - 1))
        calls = []
        for q in devs:
            if q == d:
                continue
            src = ptr(d, "src", slot(d, q)) if push else ptr(q, "src", slot(q, d))
            dst = ptr(q, "dst", slot(q, d)) if push else ptr(d, "dst", slot(d, q))
            calls.append((streams[d, q], (src, dst, cp.int64(piece // 16))))

        def f():
            with cp.cuda.Device(d):
                for s, args in calls:
                    k((per_peer,), (512,), args, stream=s)
        return f

    def ce(d):
        """GPU d pushes its piece for each peer by copy engine, one stream per peer."""
        def f():
            with cp.cuda.Device(d):
                for q in devs:
                    if q != d:
                        rt.memcpyPeerAsync(bufs[q]["dst"].data.ptr + slot(q, d), q,
                                           bufs[d]["src"].data.ptr + slot(d, q), d, piece,
                                           streams[d, q].ptr)
        return f

    cases = {
        "sm stores to all peers": lambda d: sm(d, True, 2 * sms),
        "sm loads from all peers": lambda d: sm(d, False, 2 * sms),
        "sm stores to all peers, 32 blocks": lambda d: sm(d, True, 32),
        "ce push to all peers": ce,
    }
    rows = []
    moved = piece * (P - 1)
    for case, make in cases.items():
        s = timed([make(d) for d in devs])
        row = {"case": case, "ms": s * 1e3, "GBps_per_gpu_per_direction": moved / s / 1e9}
        rows.append(row)
        print(f"{case:36s} {row['ms']:.3f} ms  {row['GBps_per_gpu_per_direction']:.1f} GB/s",
              flush=True)
    best = max(rows, key=lambda r: r["GBps_per_gpu_per_direction"])
    result = {"gpu": name, "P": P, "bytes_per_gpu": moved, "reps": REPS, "batches": BATCHES,
              "rows": rows, "practical_GBps": best["GBps_per_gpu_per_direction"],
              "practical_by": best["case"]}
    write_atomic(out_path, json.dumps(result, indent=1))
    print(f"practical rate at P = {P}: {result['practical_GBps']:.1f} GB/s per GPU per "
          f"direction ({best['case']})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None))
