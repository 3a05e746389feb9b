"""NCCL 2.6.4's tuning model (profile `"nccl": {"release": "2.6"}`): the NCCL that CoCoNet's
fused kernels ran on (parasailteam/coconet's `nccl/` is a fork of it: `nccl/build/lib/
libnccl.so.2.6.4`; its src/graph/tuning.cc differs from the tag only by the fused kind's
name), design note 89.

Source, every constant: NVIDIA/nccl tag v2.6.4-1, commit
b221128ecacf4ce1b3054172b9f30163307042c5 (hereafter "2.6.4"): src/graph/tuning.cc (baseLat,
hwLat, ll128MaxBw, the "model refinements", treeCorrectionFactor, ncclTopoGetAlgoTime),
src/graph/search.cc (speedArray), src/graph/topo.h (PCI_WIDTH), src/graph/topo.cc (a NIC's
width = its speed in Mb/s / 8000), src/enqueue.cc (getAlgoInfo: least modelled time).

What differs from NCCL 2.28.9's model (cost_model.nccl_model):
- A ring across nodes pays the network hop latency on *every* step (tuning.cc: hw[a] =
  NCCL_HW_NET whenever nNodes > 1), not only on the steps that cross nodes; no ring plateau
  and no per-step host overhead.
- Bus bandwidth is the graph's nChannels x speed, the speed the fastest of search.cc's
  speedArray that the GPU-NIC path carries (a PCIe Gen3 x16 GPU: 12 GB/s; an EDR NIC 12.5:
  12 GB/s). Refinements: ring LL x 1/4; ring LL128 x 120/128 capped by ll128MaxBw of the
  collective; tree x 0.9 capped at 80 GB/s beyond 2 nodes (110 at 2); tree LL x 1/3; tree
  LL128 x 7/9. AllReduce by the tree converts bus to algorithm bandwidth by 1/2, the ring by
  nRanks / nsteps.
- Its own tree correction table (22 entries, 64 B to 128 MiB).
The choice is the least modelled time over tree and ring x LL, LL128, Simple (LL128 on: the
graph's NIC is at most PIX from the GPU and its intra-node links NVLink, Volta only).
"""

from __future__ import annotations

V26_VERSION = "2.6.4"
V26_COMMIT = "b221128ecacf4ce1b3054172b9f30163307042c5"  # NVIDIA/nccl tag v2.6.4-1

# Microseconds. tuning.cc baseLat (Tree, Ring) x (LL, LL128, Simple).
BASE_LATENCY_US = {
    ("tree", "LL"): 4.4, ("tree", "LL128"): 4.4, ("tree", "Simple"): 0.0,
    ("ring", "LL"): 3.6, ("ring", "LL128"): 3.6, ("ring", "Simple"): 8.4,
}
# tuning.cc hwLat[NCCL_HW_NVLINK] and hwLat[NCCL_HW_NET] (its comment: "Tree/Simple is the
# latency a 256kB chunk").
NVLINK_HOP_US = {
    ("tree", "LL"): 0.5, ("tree", "LL128"): 1.9, ("tree", "Simple"): 28.0,
    ("ring", "LL"): 0.4, ("ring", "LL128"): 2.5, ("ring", "Simple"): 5.7,
}
NET_HOP_US = {
    ("tree", "LL"): 5.0, ("tree", "LL128"): 7.5, ("tree", "Simple"): 50.0,
    ("ring", "LL"): 0.9, ("ring", "LL128"): 2.5, ("ring", "Simple"): 6.6,
}
# GB/s. tuning.cc ll128MaxBw per collective (Broadcast, Reduce, AllGather, ReduceScatter,
# AllReduce).
LL128_MAX_GBPS = {"broadcast": 113.0, "reduce": 72.0, "allgather": 110.0,
                  "reducescatter": 91.0, "allreduce": 100.0}
TREE_EFFICIENCY = 0.9  # busBw * .9
TREE_MAX_GBPS = (110.0, 80.0)  # at <= 2 nodes, beyond
# search.cc speedArray (GB/s per channel), fastest first; topo.h PCI_WIDTH (PCIe Gen3 x16).
SPEEDS_GBPS = (24.0, 21.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2,
               0.24, 0.12)
PCI_WIDTH_GBPS = 12.0
# tuning.cc treeCorrectionFactor: entry k for buffers of 64 B x 2^k .. 64 B x 2^(k+1).
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .5, .5, .6, .7, .8, .9, .9,
           1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .8, .7, .7, .7, .6, .6, .7, .7, .8,
              .8, .9, .9, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6,
               .7, .8, .9),
}


def channel_speed_GBps(nic_line_Bps: float) -> float:
    """The per-channel speed of 2.6.4's graph across nodes: the fastest of speedArray that the
    GPU-NIC path carries (system->maxWidth: the slower of the GPU's PCIe, 12 GB/s, and the
    NIC's width, its line rate)."""
    width = min(PCI_WIDTH_GBPS, nic_line_Bps / 1e9)
    return next((s for s in SPEEDS_GBPS if s <= width), SPEEDS_GBPS[-1])


def latency_s(kind: str, algorithm: str, protocol: str, ranks: int, nodes: int,
              fabric_s: float = 0.0) -> float:
    """2.6.4's modelled latency across `nodes` > 1 nodes (`fabric_s`: switch hops beyond its
    table on every network hop). A ring pays the network hop on every one of its steps; a
    tree 2 x ((ranks per node - 1) NVLink hops + log2(nodes) network hops)."""
    key = (algorithm, protocol)
    base = BASE_LATENCY_US[key] * 1e-6
    net = NET_HOP_US[key] * 1e-6 + fabric_s
    if algorithm == "tree":
        ppn = ranks // nodes
        return base + 2 * ((ppn - 1) * NVLINK_HOP_US[key] * 1e-6
                           + (nodes.bit_length() - 1) * net)
    steps = {"allreduce": 2 * (ranks - 1), "reducescatter": ranks - 1,
             "allgather": ranks - 1}.get(kind, ranks)
    return base + steps * net


def bus_bandwidth_Bps(kind: str, algorithm: str, protocol: str, topology_Bps: float,
                      nodes: int, channels: int, speed_GBps: float) -> float:
    """2.6.4's bus bandwidth: the graph's channels x speed (at most what the topology
    delivers, `topology_Bps`: the fabric's efficiency, which 2.6.4's model does not have),
    refined per algorithm and protocol (module docstring)."""
    gb = 1e9
    bw = min(channels * speed_GBps * gb, topology_Bps)
    if algorithm == "ring":
        if protocol == "LL":
            return bw / 4
        if protocol == "LL128":
            return min(bw * 120 / 128, LL128_MAX_GBPS[kind] * gb)
        return bw
    bw = min(bw * TREE_EFFICIENCY, TREE_MAX_GBPS[0 if nodes <= 2 else 1] * gb)
    if protocol == "LL":
        return bw / 3
    if protocol == "LL128":
        return bw * 7 / 9
    return bw


def tree_correction(protocol: str, nbytes: float) -> float:
    """2.6.4's tree bandwidth correction for a buffer of `nbytes` (log2i(nBytes >> 6) < 22,
    else 1)."""
    k = int(nbytes) >> 6
    k = k.bit_length() - 1 if k > 0 else 0
    table = TREE_CORRECTION[protocol]
    return table[k] if k < len(table) else 1.0


def time_s(kind: str, algorithm: str, protocol: str, nbytes: float, ranks: int, nodes: int,
           topology_Bps: float, channels: int, speed_GBps: float,
           fabric_s: float = 0.0) -> float:
    """2.6.4's ncclTopoGetAlgoTime: latency + bytes / algorithm bandwidth (the tree's
    corrected by size)."""
    bus = bus_bandwidth_Bps(kind, algorithm, protocol, topology_Bps, nodes, channels,
                            speed_GBps)
    if algorithm == "tree":
        alg = bus * 0.5 * tree_correction(protocol, nbytes)
    else:
        steps = 2 * (ranks - 1) if kind == "allreduce" else ranks - 1
        alg = bus * ranks / steps
    return latency_s(kind, algorithm, protocol, ranks, nodes, fabric_s) + nbytes / alg


def choice(kind: str, nbytes: float, ranks: int, nodes: int, topology_Bps: float,
           channels: int, speed_GBps: float) -> tuple[str, str]:
    """(algorithm, protocol) of least modelled time, as 2.6.4's getAlgoInfo picks it (the
    tree for AllReduce only)."""
    algorithms = ("tree", "ring") if kind == "allreduce" else ("ring",)
    options = [(time_s(kind, a, p, nbytes, ranks, nodes, topology_Bps, channels, speed_GBps),
                (a, p)) for a in algorithms for p in ("LL", "LL128", "Simple")]
    return min(options)[1]

