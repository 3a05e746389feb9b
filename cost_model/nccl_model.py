"""NCCL's own tuning model for collectives across nodes: latency and bandwidth per algorithm
(ring, tree) and protocol (LL, LL128, Simple), and its choice rule (least predicted time).

Source: NVIDIA/nccl, src/graph/tuning.cc at commit b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2
(the NCCL 2.19 line: ncclTopoTuneModel, ncclTopoGetAlgoTime). The numbers below are that
file's tables, re-expressed as Python mappings; the formulas are re-derived in words:

- Ring over R ranks on N nodes: S steps (AllReduce 2(R-1), ReduceScatter/AllGather R-1,
  Broadcast/Reduce R), of which I cross the network (AllReduce 2N, RS/AG N-1, Bcast/Reduce N).
  Latency = base + (S - I) * max(NVLink hop, net overhead) + I * (net hop + fabric). Each
  step moves 1/R of the buffer: time = latency + S/R * bytes / bus bandwidth.
- Tree (double binary tree across nodes, a chain inside each node; AllReduce only):
  latency = base + 2 * ((R/N - 1) * NVLink hop + floor(log2 N) * (net hop + fabric)); the
  buffer goes up and down: time = latency + 2 * bytes / bus bandwidth.
- Bus bandwidth: what the topology gives the collective (cost_model.collectives.group_path)
  reduced per protocol (LL a quarter, capped; LL128 0.92 or 0.7 at one GPU per node, capped
  per channel; tree 0.92, capped per channel; tree LL 1/3.8; tree LL128 120/128), and for a
  tree by a size-dependent correction factor.
- Ring Simple AllReduce across nodes: latency x 1.4 (x 1.9 before Ampere) once every rank's
  share per channel reaches 64 bytes ("plateau effect of ring").

Inside one node the workbench keeps its constants fitted on real GPUs (cost_model.hardware.
H200_NCCL); this model prices only what crosses nodes, where nothing was measured. Two more
algorithms come from NCCL 2.30 (the end of this module, design note 38): NVLS AllReduce inside
an NVSwitch node (Cluster.nvls) and PAT AllGather/ReduceScatter at one GPU per node. CollNet
(SHARP switches) and NVLS across nodes (NVLSTree) are not modelled.
"""

from __future__ import annotations

import math

# Microseconds. (algorithm, protocol) -> latency. tuning.cc: baseLat.
BASE_LATENCY_US = {
    ("tree", "LL"): 6.8, ("tree", "LL128"): 14.0, ("tree", "Simple"): 0.0,
    ("ring", "LL"): 6.6, ("ring", "LL128"): 14.0, ("ring", "Simple"): 8.4,
}
# One hop's latency by where it runs. tuning.cc: hwLat[NCCL_HW_NVLINK], hwLat[NCCL_HW_NET].
NVLINK_HOP_US = {
    ("tree", "LL"): 0.6, ("tree", "LL128"): 1.25, ("tree", "Simple"): 28.0,
    ("ring", "LL"): 0.6, ("ring", "LL128"): 1.9, ("ring", "Simple"): 3.4,
}
NET_HOP_US = {
    ("tree", "LL"): 5.0, ("tree", "LL128"): 8.5, ("tree", "Simple"): 28.0,
    ("ring", "LL"): 2.7, ("ring", "LL128"): 4.0, ("ring", "Simple"): 14.0,
}
# Host cost of posting a network operation, per ring step across nodes: 1 us on Intel x86
# (2 on AMD), three times that for Simple. tuning.cc: getNetOverhead.
NET_OVERHEAD_US = 1.0
SIMPLE_NET_OVERHEAD_FACTOR = 3.0

# GB/s caps. Index by node-count class: 0 for 2 nodes, 1 for more (this model runs only
# across nodes). LL across nodes is capped by the host CPU (Intel row). tuning.cc: llMaxBws.
LL_MAX_GBPS = (39.0, 20.4)
# Per-channel caps by GPU generation: (2 nodes, more). tuning.cc: perChMaxRingLL128Bws,
# perChMaxTreeLL128Bws, perChMaxTreeBws (Blackwell is not in that version: Hopper's row).
RING_LL128_PER_CHANNEL_GBPS = {"volta": (20.0, 20.0), "ampere": (20.0, 20.0),
                               "hopper": (36.7, 36.7)}
TREE_LL128_PER_CHANNEL_GBPS = {"volta": (20.0, 20.0), "ampere": (20.0, 20.0),
                               "hopper": (36.7, 29.0)}
TREE_PER_CHANNEL_GBPS = {"volta": (18.5, 10.0), "ampere": (23.6, 17.8), "hopper": (41.4, 36.0)}

# Tree bandwidth correction by buffer size: entry k is for sizes in [64 B * 2^k, 64 B *
# 2^(k+1)), k = 0..22 (64 B to 256 MiB); larger buffers are not corrected.
# tuning.cc: treeCorrectionFactor.
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9,
           1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9,
              .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
               .8, .9, .9),
}
# Ring Simple AllReduce across nodes: latency multiplier once the per-rank, per-channel share
# reaches 64 bytes; 1.9 before compute capability 8.0. tuning.cc: ncclTopoGetAlgoTime.
RING_PLATEAU = {"volta": 1.9, "ampere": 1.4, "hopper": 1.4}
RING_PLATEAU_MIN_BYTES = 64

# The algorithms NCCL runs per collective across nodes in this model.
ALGORITHMS = {"allreduce": ("ring", "tree"), "reducescatter": ("ring",),
              "allgather": ("ring",), "broadcast": ("ring",), "reduce": ("ring",)}


def generation(gpu_name: str) -> str:
    """The GPU generation whose rows of NCCL's tables apply (volta, ampere, hopper; newer
    GPUs take Hopper's, the newest the cited version knows)."""
    name = gpu_name.upper()
    if name.startswith("V100"):
        return "volta"
    if name.startswith("A100"):
        return "ampere"
    return "hopper"


def ring_steps(kind: str, ranks: int, nodes: int) -> tuple[int, int]:
    """(all steps, steps that cross the network) of a ring collective."""
    if kind == "allreduce":
        return 2 * (ranks - 1), 2 * nodes
    if kind in ("reducescatter", "allgather"):
        return ranks - 1, nodes - 1
    return ranks, nodes


def latency_s(kind: str, algorithm: str, protocol: str, ranks: int, nodes: int,
              fabric_s: float = 0.0) -> float:
    """NCCL's modelled latency of a collective over `ranks` ranks on `nodes` > 1 nodes, with
    `fabric_s` added to every network hop (switch hops beyond NCCL's table; twice for
    Simple, which also waits for its flush), before the ring plateau factor."""
    key = (algorithm, protocol)
    net = NET_HOP_US[key] * 1e-6 + fabric_s * (2 if protocol == "Simple" else 1)
    intra = NVLINK_HOP_US[key] * 1e-6
    base = BASE_LATENCY_US[key] * 1e-6
    if algorithm == "tree":
        return base + 2 * ((ranks // nodes - 1) * intra + math.floor(math.log2(nodes)) * net)
    steps, inter = ring_steps(kind, ranks, nodes)
    if kind in ("broadcast", "reduce"):
        # a chain: every step pays a network hop (Simple: the tree's chunk latency)
        hop = NET_HOP_US[("tree", "Simple")] * 1e-6 if protocol == "Simple" else net
        return base + steps * hop
    overhead = NET_OVERHEAD_US * 1e-6 * (SIMPLE_NET_OVERHEAD_FACTOR if protocol == "Simple"
                                         else 1.0)
    return base + (steps - inter) * max(intra, overhead) + inter * net


def bus_bandwidth_Bps(kind: str, algorithm: str, protocol: str, topology_Bps: float,
                      ranks: int, nodes: int, channels: int, gen: str) -> float:
    """NCCL's bus bandwidth for an (algorithm, protocol) across `nodes` > 1 nodes, from the
    bus bandwidth the topology gives (`topology_Bps`, bytes/s) and NCCL's `channels`."""
    more = 0 if nodes <= 2 else 1
    gb = 1e9
    bw = topology_Bps
    if algorithm == "ring":
        if protocol == "LL":
            return min(LL_MAX_GBPS[more] * gb, bw / 4)
        if protocol == "LL128":
            share = 0.7 if ranks / nodes < 2 else 0.92
            return min(bw * share, channels * RING_LL128_PER_CHANNEL_GBPS[gen][more] * gb)
        return bw
    bw = min(bw * 0.92, channels * TREE_PER_CHANNEL_GBPS[gen][more] * gb)
    if protocol == "LL":
        return min(bw / 3.8, LL_MAX_GBPS[more] * gb)
    if protocol == "LL128":
        return min(bw * 120 / 128, channels * TREE_LL128_PER_CHANNEL_GBPS[gen][more] * gb)
    return bw


def tree_correction(protocol: str, nbytes: float) -> float:
    """The tree's bandwidth correction for a buffer of `nbytes`."""
    k = int(nbytes) >> 6
    k = k.bit_length() - 1 if k > 0 else 0
    table = TREE_CORRECTION[protocol]
    return table[k] if k < len(table) else 1.0


def plateau(kind: str, algorithm: str, protocol: str, nbytes: float, ranks: int,
            channels: int, gen: str) -> float:
    """The ring Simple AllReduce latency multiplier across nodes (1 elsewhere)."""
    if (kind, algorithm, protocol) != ("allreduce", "ring", "Simple"):
        return 1.0
    if nbytes / (channels * ranks) < RING_PLATEAU_MIN_BYTES:
        return 1.0
    return RING_PLATEAU[gen]


# ---------------------------------------------------------------- NVLS and PAT (NCCL 2.30)
# Re-expressed from NVIDIA/nccl src/graph/tuning.cc and src/graph/search.cc, src/graph/topo.h
# at commit 5067397c (NCCL 2.30.7, makefiles/version.mk). The ring and tree tables above stay
# those of the 2.20 line they were taken from; these two algorithms are what the 2.20 tables
# lack or model differently (NVLS's ratio 5/6 there; PAT is NCCL 2.23+).

# NVLink SHARP (NVLS): AllReduce inside an NVSwitch node by in-switch reduction (multicast).
# tuning.cc: nvlsEfficiency (Hopper 0.85, Blackwell 0.74); hwLatencies[NVLINK][NVLS][Simple]
# = 25 us with no base latency (latencies = intraLat for NVLS).
NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}
NVLS_LATENCY_US = 25.0
# What NCCL's topology counts per GPU: NVLink links x per-link bandwidth (topo.h
# SM90_NVLINK_BW 20.6, SM100_NVLINK_BW 40.1 GB/s; 18 links on H100/H200/B200).
NVLINK_LINK_GBPS = {"hopper": 20.6, "blackwell": 40.1}
NVLINK_LINKS = 18
# The per-channel speeds the graph search tries inside a node (search.cc:
# sm90SpeedArrayIntra, sm100SpeedArrayIntra), fastest first.
SPEEDS_INTRA_GBPS = {
    "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}


def nvls_channel_Bps(gpus: int, gen: str) -> float:
    """The per-channel bandwidth NCCL's NVLS graph gets inside one node of `gpus` GPUs: one
    channel per GPU (search.cc forces minChannels = maxChannels = min(NCCL_MAX_NVLS_ARITY,
    GPUs) inside a node), at the fastest speed of the search's list whose `gpus` channels fit
    the GPU's NVLink bandwidth as the topology counts it. (A reading of the search, which
    NCCL runs on the real topology; stated here as the model's assumption.)"""
    nvlink = NVLINK_LINKS * NVLINK_LINK_GBPS[gen]
    for speed in SPEEDS_INTRA_GBPS[gen]:
        if gpus * speed <= nvlink:
            return speed * 1e9
    return SPEEDS_INTRA_GBPS[gen][-1] * 1e9


def nvls_allreduce_bus_Bps(gpus: int, gen: str) -> float:
    """NCCL's NVLS AllReduce bus bandwidth inside one node (tuning.cc: nChannels x bwIntra x
    nvlsEfficiency x (nChannels - 1) / nChannels, x 2 because AllReduce pipelines its
    reduce and its broadcast). nccl-tests' busbw is this number."""
    ch = gpus
    return 2 * NVLS_EFFICIENCY[gen] * ch * nvls_channel_Bps(gpus, gen) * (ch - 1) / ch


def nvls_allreduce_time_s(nbytes: float, gpus: int, gen: str) -> float:
    """NCCL's modelled time of an NVLS AllReduce of `nbytes` inside one node: its latency
    plus the buffer at the algorithm bandwidth (bus bandwidth x nRanks / (2 (nRanks - 1)),
    tuning.cc's ratio for NVLS)."""
    alg = nvls_allreduce_bus_Bps(gpus, gen) * gpus / (2 * (gpus - 1))
    return NVLS_LATENCY_US * 1e-6 + nbytes / alg


# PAT (Parallel Aggregated Trees; NCCL 2.23+): AllGather and ReduceScatter at one GPU per node
# only (tuning.cc ncclPatEnable: nNodes == nRanks), Simple protocol only. tuning.cc:
# baseLatencies[PAT] = 8.0 us; with one rank per node the network latency is the tree's
# (hwLatencies[NET][TREE][Simple] = 14 us) plus the graph's inter-node latency twice (the
# Simple flush); latency = base + log2(nNodes) * interLat / 3.5 + nRanks * 2.8 us; bus
# bandwidth x 0.75, not converted to algorithm bandwidth (time = latency + bytes / that).
PAT_BASE_US = 8.0
PAT_NET_US = 14.0
PAT_PER_RANK_US = 2.8
PAT_BANDWIDTH_FACTOR = 0.75


def pat_latency_s(ranks: int, nodes: int, fabric_s: float = 0.0) -> float:
    """PAT's modelled latency over `ranks` ranks, one per node (`fabric_s`: switch hops
    beyond NCCL's table, counted like the graph's inter-node latency: twice for Simple)."""
    inter = PAT_NET_US * 1e-6 + 2 * fabric_s
    return (PAT_BASE_US * 1e-6 + (nodes.bit_length() - 1) * inter / 3.5
            + ranks * PAT_PER_RANK_US * 1e-6)


def pat_bandwidth_Bps(topology_Bps: float) -> float:
    """PAT's bandwidth (bytes of the whole buffer per second) from the bus bandwidth the
    topology gives one GPU per node."""
    return topology_Bps * PAT_BANDWIDTH_FACTOR


# NVLSTree: AllReduce across nodes of NVSwitch nodes, NVLS inside each node and a tree of
# the nodes' NICs (tuning.cc 2.30.7, Hopper). Its graph (search.cc) has one channel per NIC
# head at the fastest sm90SpeedArrayInter speed the NIC carries, for both bwIntra and bwInter.
# busBw per channel = min(bwIntra x nvlsEfficiency x (nCh-1)/nCh x 2, bwInter x (2 at <= 2
# nodes), perChMaxNVLSTreeBws[Hopper][N2|N4]); latency = hwLatencies[NVLINK][NVLSTree] (25
# us) + 2 log2(nNodes) x hwLatencies[NET][NVLSTree][Simple] (20.9 us); bandwidth x nRanks /
# nsteps to algorithm bandwidth.
SPEEDS_INTER_GBPS = {"hopper": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0,
                                12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)}
NVLS_TREE_PER_CHANNEL_GBPS = {"hopper": (57.7, 45.5)}  # N2, N4
NVLS_TREE_NET_US = 20.9


def inter_channel_GBps(nic_Bps: float, gen: str) -> float:
    """The fastest per-channel speed of the search's inter-node list a NIC of `nic_Bps`
    carries (400 Gb/s = 50 GB/s: 48)."""
    for speed in SPEEDS_INTER_GBPS[gen]:
        if speed * 1e9 <= nic_Bps:
            return speed
    return SPEEDS_INTER_GBPS[gen][-1]


def nvls_tree_bus_Bps(heads: int, nodes: int, nic_Bps: float, gen: str) -> float:
    """NCCL's NVLSTree AllReduce bus bandwidth over `nodes` nodes of `heads` NIC heads, each
    NIC carrying `nic_Bps` (nccl-tests' busbw is this number)."""
    speed = inter_channel_GBps(nic_Bps, gen)
    intra = speed * NVLS_EFFICIENCY[gen] * (heads - 1) / heads * 2
    inter = speed * (2 if nodes <= 2 else 1)
    cap = NVLS_TREE_PER_CHANNEL_GBPS[gen][0 if nodes <= 2 else 1]
    return heads * min(intra, inter, cap) * 1e9


def nvls_tree_latency_s(nodes: int, fabric_s: float = 0.0) -> float:
    """NCCL's NVLSTree latency over `nodes` nodes (`fabric_s` per network hop beyond NCCL's
    table, twice: the Simple flush)."""
    net = NVLS_TREE_NET_US * 1e-6 + 2 * fabric_s
    return NVLS_LATENCY_US * 1e-6 + 2 * (nodes.bit_length() - 1) * net
