"""NCCL's own tuning model: latency and bandwidth per algorithm (ring, tree, NVLS, NVLSTree,
PAT) and protocol (LL, LL128, Simple), and its choice rule (least predicted time).

Source, every table: NVIDIA/nccl at tag v2.28.9-1, commit
dbc86fd06e8b0c4517b95d8958a09ccacf9520c9 (NCCL 2.28.9, what the GPU machines run:
/work/shared/device/README.md). src/graph/tuning.cc (ncclTunerConstantsDefaults,
ncclTopoTuneModel, ncclTopoGetAlgoTime), src/graph/search.cc (the speed arrays),
src/graph/topo.h (per-link NVLink bandwidth), src/include/device.h (NCCL_MAX_NVLS_ARITY).
The numbers are that release's tables, transcribed as Python mappings; the formulas are
re-derived in words:

- Ring over R ranks on N nodes: S steps (AllReduce 2(R-1), ReduceScatter/AllGather R-1,
  Broadcast/Reduce R), of which I cross the network (AllReduce 2(N-1), RS/AG N-1).
  Latency = base + (S - I) * max(NVLink hop, net overhead) + I * (net hop + fabric). Each
  step moves 1/R of the buffer: time = latency + S/R * bytes / bus bandwidth.
- Tree (double binary tree across nodes, a chain inside each node; AllReduce only):
  latency = base + 2 * ((R/N - 1) * NVLink hop + floor(log2 N) * (net hop + fabric)); the
  buffer goes up and down: time = latency + 2 * bytes / bus bandwidth.
- Bus bandwidth: what the topology gives the collective (cost_model.collectives.group_path)
  reduced per protocol (ring LL a half, capped; ring LL128 0.92, capped per channel; tree
  0.92, capped per channel; tree LL 1/3.8; tree LL128 120/128, 7/9 inside one node), and for
  a tree by a size-dependent correction factor.
- Ring Simple AllReduce across nodes: latency x 1.4 (x 1.9 before Ampere) once every rank's
  share per channel reaches 64 bytes ("plateau effect of ring").
- NVLS (in-switch reduction inside an NVSwitch node), NVLSTree (NVLS inside each node, a
  tree of the nodes' NICs across them) and PAT (AllGather/ReduceScatter at one GPU per node):
  at the end of this module.

GPU generations are NCCL's (tuning.cc compCapIndex): compute capability >= 100 Blackwell,
>= 90 Hopper, >= 80 Ampere, else Volta. Multi-node LL caps take NCCL's Intel x86 row (the
host CPU decides them there). CollNet (SHARP switches with NCCL's CollNet plugin) is not
modelled: the preset fabrics have no SHARP plugin, and NCCL disables CollNet without it.
Inside one node the workbench keeps its constants fitted on real GPUs (cost_model.presets.
H200_NCCL) for the ring; this model prices what crosses nodes and NVLS.
"""

from __future__ import annotations

import math

NCCL_VERSION = "2.28.9"
NCCL_COMMIT = "dbc86fd06e8b0c4517b95d8958a09ccacf9520c9"  # tag v2.28.9-1

# NCCL's generations by their lowest compute capability (tuning.cc compCapIndex: the table
# rows Volta, Ampere, Hopper, Blackwell). Below 7.0 NCCL's LL128 and PAT are off and its
# tables have no row of their own: the workbench refuses such a GPU.
GENERATIONS = (("volta", 70), ("ampere", 80), ("hopper", 90), ("blackwell", 100))
MIN_COMPUTE_CAPABILITY = 70
NVLS_MIN_COMPUTE_CAPABILITY = 90  # search.cc: no NVLS graph below sm90


def generation(compute_capability: int) -> str:
    """NCCL's generation (volta, ampere, hopper, blackwell) of a compute capability given as
    an integer (9.0 -> 90), as tuning.cc maps it. ValueError below 7.0."""
    if compute_capability < MIN_COMPUTE_CAPABILITY:
        raise ValueError(f"compute capability must be >= {MIN_COMPUTE_CAPABILITY} (Volta), got "
                         f"{compute_capability}")
    name = GENERATIONS[0][0]
    for gen, lowest in GENERATIONS:
        if compute_capability >= lowest:
            name = gen
    return name


# Microseconds. (algorithm, protocol) -> latency. tuning.cc: baseLatencies.
BASE_LATENCY_US = {
    ("tree", "LL"): 6.8, ("tree", "LL128"): 14.0, ("tree", "Simple"): 8.4,
    ("ring", "LL"): 6.6, ("ring", "LL128"): 14.0, ("ring", "Simple"): 8.4,
    ("nvls", "Simple"): 0.0, ("nvlstree", "Simple"): 0.0, ("pat", "Simple"): 8.0,
}
# One hop's latency by where it runs. tuning.cc: hwLatencies[NCCL_HW_NVLINK], [NCCL_HW_NET].
NVLINK_HOP_US = {
    ("tree", "LL"): 0.6, ("tree", "LL128"): 1.25, ("tree", "Simple"): 4.0,
    ("ring", "LL"): 0.6, ("ring", "LL128"): 1.9, ("ring", "Simple"): 3.4,
    ("nvls", "Simple"): 25.0, ("nvlstree", "Simple"): 25.0, ("pat", "Simple"): 4.0,
}
NET_HOP_US = {
    ("tree", "LL"): 5.0, ("tree", "LL128"): 8.5, ("tree", "Simple"): 14.0,
    ("ring", "LL"): 2.7, ("ring", "LL128"): 4.0, ("ring", "Simple"): 14.0,
    ("nvls", "Simple"): 18.0, ("nvlstree", "Simple"): 20.9, ("pat", "Simple"): 14.0,
}
# Host cost of posting a network operation, per ring step across nodes: 1 us on Intel x86
# (2 on AMD), three times that for Simple. tuning.cc: getNetOverhead.
NET_OVERHEAD_US = 1.0
SIMPLE_NET_OVERHEAD_FACTOR = 3.0

# GB/s caps, by node-count column: N1 (one node), N2 (2 nodes), N4 (more). tuning.cc.
# llMaxBws: one node by generation; across nodes by host CPU (the Intel row).
LL_MAX_ONE_NODE_GBPS = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
LL_MAX_NET_GBPS = (39.0, 20.4)  # Intel N2, N4
RING_LL128_PER_CHANNEL_GBPS = {  # perChMaxRingLL128Bws
    "volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0),
    "hopper": (36.7, 36.7, 36.7), "blackwell": (2 * 36.7, 34.6, 2 * 36.7)}
TREE_LL128_PER_CHANNEL_GBPS = {  # perChMaxTreeLL128Bws
    "volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0),
    "hopper": (36.7, 36.7, 29.0), "blackwell": (55.6, 31.67, 20.0)}
TREE_PER_CHANNEL_GBPS = {  # perChMaxTreeBws
    "volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
    "hopper": (38.7, 41.4, 36.0), "blackwell": (70.0, 42.8, 24.0)}
NVLS_TREE_PER_CHANNEL_GBPS = {  # perChMaxNVLSTreeBws (no NVLSTree before Hopper)
    "hopper": (0.0, 57.7, 45.5), "blackwell": (0.0, 96.0, 43.8)}

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
# reaches 64 bytes; 1.9 below compute capability 8.0. tuning.cc: ncclTopoGetAlgoTime.
RING_PLATEAU = {"volta": 1.9, "ampere": 1.4, "hopper": 1.4, "blackwell": 1.4}
RING_PLATEAU_MIN_BYTES = 64

# The ring and tree algorithms NCCL runs per collective across nodes (NVLSTree and PAT are
# added by cost_model.collectives where they apply).
ALGORITHMS = {"allreduce": ("ring", "tree"), "reducescatter": ("ring",),
              "allgather": ("ring",), "broadcast": ("ring",), "reduce": ("ring",)}


def column(nodes: int) -> int:
    """tuning.cc's index2: 0 for one node, 1 for two, 2 for more."""
    return 0 if nodes <= 1 else (1 if nodes == 2 else 2)


def ring_steps(kind: str, ranks: int, nodes: int) -> tuple[int, int]:
    """(all steps, steps that cross the network) of a ring collective (tuning.cc nsteps,
    nInterSteps)."""
    if kind == "allreduce":
        return 2 * (ranks - 1), 2 * (nodes - 1)
    if kind in ("reducescatter", "allgather"):
        return ranks - 1, nodes - 1
    return ranks, nodes


def latency_s(kind: str, algorithm: str, protocol: str, ranks: int, nodes: int,
              fabric_s: float = 0.0, message_s: float = 0.0) -> float:
    """NCCL's modelled latency of a collective over `ranks` ranks on `nodes` > 1 nodes, with
    `fabric_s` added to every network hop (switch hops beyond NCCL's table; twice for
    Simple, which also waits for its flush: tuning.cc adds the graph's latencyInter twice)
    and the transport's per-message cost `message_s` (Fabric.message_s) once per network
    hop, before the ring plateau factor."""
    key = (algorithm, protocol)
    ppn = ranks // nodes
    # with one rank per node every latency is exposed: NCCL takes the tree's network latency
    net_key = ("tree", protocol) if ppn == 1 else key
    net = (NET_HOP_US[net_key] * 1e-6 + fabric_s * (2 if protocol == "Simple" else 1)
           + message_s)
    intra = NVLINK_HOP_US[key] * 1e-6
    base = BASE_LATENCY_US[key] * 1e-6
    if algorithm == "tree":
        return base + 2 * ((ppn - 1) * intra + math.floor(math.log2(nodes)) * net)
    steps, inter = ring_steps(kind, ranks, nodes)
    if kind in ("broadcast", "reduce"):
        # a chain whose channels differ (NCCL's graph.sameChannels 0): every step pays a
        # network hop (Simple: the tree's, "some chunk latency")
        hop = (NET_HOP_US[("tree", "Simple")] * 1e-6 + message_s if protocol == "Simple"
               else net)
        return base + steps * hop
    overhead = NET_OVERHEAD_US * 1e-6 * (SIMPLE_NET_OVERHEAD_FACTOR if protocol == "Simple"
                                         else 1.0)
    return base + (steps - inter) * max(intra, overhead) + inter * net


def bus_bandwidth_Bps(kind: str, algorithm: str, protocol: str, topology_Bps: float,
                      ranks: int, nodes: int, channels: int, gen: str) -> float:
    """NCCL's bus bandwidth for a ring or tree (algorithm, protocol) across `nodes` > 1
    nodes, from the bus bandwidth the topology gives (`topology_Bps`, bytes/s) and NCCL's
    `channels` (tuning.cc, "various model refinements")."""
    col = column(nodes)
    gb = 1e9
    ll_max = LL_MAX_NET_GBPS[col - 1] * gb
    bw = topology_Bps
    if algorithm == "ring":
        if protocol == "LL":
            return min(ll_max, bw * 0.5)
        if protocol == "LL128":
            return min(bw * 0.92, channels * RING_LL128_PER_CHANNEL_GBPS[gen][col] * gb)
        return bw
    bw = min(bw * 0.92, channels * TREE_PER_CHANNEL_GBPS[gen][col] * gb)
    if protocol == "LL":
        return min(bw / 3.8, ll_max)
    if protocol == "LL128":
        return min(bw * 120 / 128, channels * TREE_LL128_PER_CHANNEL_GBPS[gen][col] * gb)
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


# ---------------------------------------------------------------- NVLS, NVLSTree, PAT

# NVLink SHARP (NVLS): AllReduce (and, inside one node, AllGather and ReduceScatter) by
# in-switch reduction and multicast. tuning.cc: nvlsEfficiency (0 before Hopper).
NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}
NVLS_LATENCY_US = NVLINK_HOP_US[("nvls", "Simple")]  # no base latency: latency = intraLat
NVLS_MAX_ARITY = 32  # device.h NCCL_MAX_NVLS_ARITY: NVLS channels inside a node at most
# NCCL's per-link NVLink bandwidth by generation (topo.h SM70/SM80/SM90/SM100_NVLINK_BW),
# and the datasheets' per-link rate per direction (NVLink 2, 3, 4: 25 GB/s; NVLink 5: 50).
NVLINK_LINK_GBPS = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
NVLINK_DATASHEET_LINK_GBPS = {"volta": 25.0, "ampere": 25.0, "hopper": 25.0, "blackwell": 50.0}
# The per-channel speeds the graph search tries, fastest first (search.cc speedArrayIntra/
# Inter before Hopper, sm90SpeedArray*, sm100SpeedArray*).
SPEEDS_INTRA_GBPS = {
    "volta": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
SPEEDS_INTRA_GBPS["ampere"] = SPEEDS_INTRA_GBPS["volta"]
SPEEDS_INTER_GBPS = {
    "volta": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0,
              3.0, 2.4, 1.2, 0.24, 0.12),
    "hopper": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4,
               1.2, 0.24, 0.12),
    "blackwell": (96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                  3.0, 2.4, 1.2, 0.24, 0.12),
}
SPEEDS_INTER_GBPS["ampere"] = SPEEDS_INTER_GBPS["volta"]


def nvls_channels(gpus: int) -> int:
    """NVLS channels inside a node of `gpus` GPUs: one per GPU up to NCCL_MAX_NVLS_ARITY
    (search.cc forces minChannels = maxChannels = min(arity, GPUs) inside a node)."""
    return min(NVLS_MAX_ARITY, gpus)


def nvls_channel_GBps(gpus: int, nvlink_GBps: float, gen: str) -> float:
    """The per-channel bandwidth (bwIntra) NCCL's NVLS graph gets inside one node of `gpus`
    GPUs whose NVLink NCCL counts as `nvlink_GBps`: the fastest speed of the search's list
    whose channels fit that bandwidth. (A reading of the search, which NCCL runs on the real
    topology; stated here as the model's assumption: on 8 H100 it gives 8 x 40, the figure
    whose busbw, 476 GB/s, nccl-tests posts show.)"""
    ch = nvls_channels(gpus)
    speeds = SPEEDS_INTRA_GBPS[gen]
    for speed in speeds:
        if ch * speed <= nvlink_GBps:
            return speed
    return speeds[-1]


def nvls_inter_GBps(bw_intra: float, gen: str) -> float:
    """The NVLS graph's bwInter inside one node: search.cc's second pass raises it through
    the speed list while it stays below twice bwIntra (no NIC bounds it in one node)."""
    speeds = SPEEDS_INTRA_GBPS[gen]
    i = speeds.index(bw_intra)
    bw = bw_intra
    while i > 0 and bw < 2 * bw_intra:
        i -= 1
        bw = speeds[i]
    return bw


def nvls_bus_Bps(kind: str, gpus: int, nvlink_GBps: float, gen: str) -> float:
    """NCCL's NVLS bus bandwidth inside one node (tuning.cc: nChannels x min(bwIntra x
    nvlsEfficiency x (nCh - 1)/nCh x (2 for AllReduce, which pipelines its reduce and its
    broadcast; (ppn - 1)/ppn for AllGather/ReduceScatter), bwInter))."""
    ch = nvls_channels(gpus)
    bw_intra = nvls_channel_GBps(gpus, nvlink_GBps, gen)
    intra = bw_intra * NVLS_EFFICIENCY[gen] * (ch - 1) / ch
    intra *= 2.0 if kind == "allreduce" else (gpus - 1) / gpus
    return ch * min(intra, nvls_inter_GBps(bw_intra, gen)) * 1e9


def nvls_time_s(kind: str, nbytes: float, gpus: int, nvlink_GBps: float, gen: str) -> float:
    """NCCL's modelled time of an NVLS collective of `nbytes` inside one node: its latency
    plus the buffer at the algorithm bandwidth (AllReduce: bus bandwidth x nRanks / (2
    (nRanks - 1)); AllGather/ReduceScatter: not converted, tuning.cc)."""
    bus = nvls_bus_Bps(kind, gpus, nvlink_GBps, gen)
    alg = bus * gpus / (2 * (gpus - 1)) if kind == "allreduce" else bus
    return NVLS_LATENCY_US * 1e-6 + nbytes / alg


# PAT (Parallel Aggregated Trees): AllGather and ReduceScatter at one GPU per node only
# (tuning.cc ncclPatEnable: nNodes == nRanks), Simple protocol only. Latency = base (8 us) +
# log2(nNodes) x interLat / 3.5 + nRanks x 2.8 us, interLat the tree's network latency (one
# rank per node) plus the graph's inter-node latency twice (the Simple flush); bus bandwidth
# x 0.75, not converted to algorithm bandwidth (time = latency + bytes / that).
PAT_PER_RANK_US = 2.8
PAT_BANDWIDTH_FACTOR = 0.75


def pat_latency_s(ranks: int, nodes: int, fabric_s: float = 0.0,
                  message_s: float = 0.0) -> float:
    """PAT's modelled latency over `ranks` ranks, one per node (`fabric_s`: switch hops
    beyond NCCL's table, counted like the graph's inter-node latency: twice for Simple;
    `message_s`: the transport's per-message cost, once)."""
    inter = NET_HOP_US[("tree", "Simple")] * 1e-6 + 2 * fabric_s + message_s
    return (BASE_LATENCY_US[("pat", "Simple")] * 1e-6 + (nodes.bit_length() - 1) * inter / 3.5
            + ranks * PAT_PER_RANK_US * 1e-6)


def pat_bandwidth_Bps(topology_Bps: float) -> float:
    """PAT's bandwidth (bytes of the whole buffer per second) from the bus bandwidth the
    topology gives one GPU per node."""
    return topology_Bps * PAT_BANDWIDTH_FACTOR


# NVLSTree: AllReduce across nodes of NVSwitch nodes, NVLS inside each node and a tree of
# the nodes' NICs. Its graph (search.cc) has one channel per NIC head at the fastest
# inter-node speed the NIC carries, for both bwIntra and bwInter. busBw per channel =
# min(bwIntra x nvlsEfficiency x (nCh-1)/nCh x 2, bwInter x (2 at <= 2 nodes),
# perChMaxNVLSTreeBws[gen][N2|N4]); latency = hwLatencies[NVLINK][NVLSTree] (25 us) +
# 2 log2(nNodes) x hwLatencies[NET][NVLSTree][Simple] (20.9 us); bandwidth x nRanks / nsteps
# to algorithm bandwidth.


def inter_channel_GBps(nic_Bps: float, gen: str) -> float:
    """The fastest per-channel speed of the search's inter-node list a NIC of `nic_Bps`
    carries (400 Gb/s = 50 GB/s: 48)."""
    for speed in SPEEDS_INTER_GBPS[gen]:
        if speed * 1e9 <= nic_Bps:
            return speed
    return SPEEDS_INTER_GBPS[gen][-1]


def nvls_tree_bus_Bps(heads: int, nodes: int, nic_Bps: float, gen: str,
                      delivered_Bps: float | None = None) -> float:
    """NCCL's NVLSTree AllReduce bus bandwidth over `nodes` nodes of `heads` NIC heads, each
    NIC of line rate `nic_Bps` (nccl-tests' busbw is this number). `delivered_Bps`: what a
    NIC delivers on the fabric (Fabric.efficiency_at; None: its line rate), which bounds a
    channel's inter-node speed beyond NCCL's model, whose graph takes the line rate."""
    speed = inter_channel_GBps(nic_Bps, gen)
    bw_inter = speed if delivered_Bps is None else min(speed, delivered_Bps / 1e9)
    intra = speed * NVLS_EFFICIENCY[gen] * (heads - 1) / heads * 2
    inter = bw_inter * (2 if nodes <= 2 else 1)
    cap = NVLS_TREE_PER_CHANNEL_GBPS[gen][column(nodes)]
    return heads * min(intra, inter, cap) * 1e9


# NVLSTree's pipeline fill. NCCL 2.28.9's tuning model prices NVLSTree as its latency plus
# the buffer at its peak rate, which measured 2-node tables contradict at every mid size
# (2x p5.48xlarge: 105.5 GB/s busbw at 16 MiB where that gives 182; issue 37). The kernel
# NCCL runs moves the buffer in chunks through a pipeline: nvlsChannels channels (transport/
# nvls.cc: NVLS_NCHANNELS_SM90 16, NVLS_NCHANNELS_SM100 32 across nodes) times the NIC heads
# run as concurrent operations, each on chunks of NCCL_NVLS_CHUNKSIZE (128 KiB), which
# enqueue.cc (calcCollChunking, NCCL_ALGO_NVLS_TREE) halves for small buffers and caps at
# 64 KiB from 4 nodes. Each operation's chunks pass the pipeline's stages one after the
# other: the in-switch reduction inside the node, up the tree, down it, the multicast: 4
# stages at any node count (the workbench's reading of the algorithm, not a table of
# NCCL's), so the pipeline fills for 3 chunks of every operation before the first leaves.
# The other reading, a stage per tree level (2 + 2 log2(nodes)), was tried against
# NVIDIA/nccl-tests#309's 4- and 8-node InfiniBand tables and missed them by -28 and -36 %
# at 16 MiB (4 stages: -8.8 and -4.0 %), so those rows chose between the two readings.
# The workbench adds that fill (decision 102: where the model leaves
# NCCL's, following measurements).
NVLS_TREE_CHANNELS = {"hopper": 16, "blackwell": 32}
NVLS_CHUNK_BYTES = 128 * 1024
NVLS_TREE_STAGES = 4


def nvls_tree_chunk_bytes(nbytes: float, ops: int, nodes: int) -> int:
    """The chunk NCCL 2.28.9 gives an NVLSTree AllReduce of `nbytes` run as `ops` concurrent
    operations (nvlsChannels x NIC heads) over `nodes` nodes (enqueue.cc)."""
    chunk = NVLS_CHUNK_BYTES if nodes < 4 else min(NVLS_CHUNK_BYTES, 65536)
    for factor, floor in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
        if nbytes < factor * ops * chunk and chunk > floor:
            chunk = floor
    return chunk


def nvls_tree_fill_s(nbytes: float, alg_Bps: float, heads: int, nodes: int, gen: str) -> float:
    """The time NVLSTree's pipeline takes to fill, beyond its latency and the buffer at the
    algorithm bandwidth `alg_Bps`: (stages - 1) chunks of every concurrent operation, each
    at its share of the bandwidth (an operation with less than a chunk fills with what it
    has)."""
    ops = NVLS_TREE_CHANNELS[gen] * heads
    chunk = nvls_tree_chunk_bytes(nbytes, ops, nodes)
    return (NVLS_TREE_STAGES - 1) * min(chunk, nbytes / ops) * ops / alg_Bps


def nvls_tree_latency_s(nodes: int, fabric_s: float = 0.0, message_s: float = 0.0) -> float:
    """NCCL's NVLSTree latency over `nodes` nodes (`fabric_s` per network hop beyond NCCL's
    table, twice: the Simple flush; `message_s`, the transport's per-message cost, once)."""
    net = NET_HOP_US[("nvlstree", "Simple")] * 1e-6 + 2 * fabric_s + message_s
    return NVLS_LATENCY_US * 1e-6 + 2 * (nodes.bit_length() - 1) * net


# ---------------------------------------------------------------- the tree's network pipeline

# NCCL moves a tree's buffer through the network as a pipeline of proxy steps (decision 112).
# Every channel cuts its share of the buffer into chunks of one step, buffSize / NCCL_STEPS
# (enqueue.cc calcCollChunking: the Simple tree keeps chunkSteps = 1 and never halves its
# chunk; device.h NCCL_STEPS 8), and each chunk crosses the network as one message of the
# transport's net plugin, up the tree and back down. A channel has up to NCCL_STEPS messages
# in flight: while a buffer fills more than one loop (channels x chunk), the later chunks
# follow the first at the stream rate; the first loop's chunks cross alone, one message per
# active channel per network stage. On InfiniBand and RoCE a lone message moves as the stream
# does (the verbs write goes straight to the NIC) and this adds nothing; the proxy
# transports' plugins pay a host cost per message, one active channel after the other, and
# move a lone message at a rate far below the line's (cost_model.specs LONE_MESSAGE: EFA v1
# and TCPXO, fitted), which NCCL's tuning model does not see: the plan keeps it out of NCCL's
# choice (collectives.Plan.unseen_s), as NVLSTree's fill.
NCCL_STEPS = 8  # src/include/device.h, v2.28.9-1
MAX_CHANNELS = 64  # src/include/device.h MAXCHANNELS, v2.28.9-1
# enqueue.cc (ring/tree channel tuning): NCCL drops channels while the buffer is below
# channels x threads x threadThreshold; Simple: NCCL_SIMPLE_MAX_NTHREADS (device.h, 512) x
# NCCL_SIMPLE_THREAD_THRESHOLD (comm.h, 64) = 32 KiB per channel.
SIMPLE_CHANNEL_BYTES = 512 * 64


def tree_chunk_bytes(buffsize_bytes: int) -> int:
    """The Simple tree's chunk: one step of the transport's Simple buffer (enqueue.cc
    calcCollChunking: stepSize = buffSizes[Simple] / NCCL_STEPS, chunkSteps 1 for the tree)."""
    return buffsize_bytes // NCCL_STEPS


def active_channels(nbytes: float, channels: int) -> int:
    """The channels NCCL runs a Simple tree of `nbytes` on, of its `channels` (enqueue.cc:
    one less while the buffer is below SIMPLE_CHANNEL_BYTES per channel, at least 1)."""
    return max(1, int(min(channels, nbytes // SIMPLE_CHANNEL_BYTES)))


def tree_first_loop_s(nbytes: float, nodes: int, channels: int, chunk_bytes: int,
                      message_s: float, message_Bps: float, stream_Bps: float) -> float:
    """The time the Simple tree's first loop takes beyond what its bytes cost at the stream
    rate. Its first min(`nbytes`, channels x `chunk_bytes`) bytes cross 2 log2(`nodes`)
    network stages as lone messages: at each stage the active channels' messages pay the
    host cost `message_s` one after the other and each moves at `message_Bps` (one
    message's rate), where the plan prices those bytes as 2 passes at its bus rate `stream_Bps`.
    The first channel's host cost is the per-message cost already in the latency
    (Fabric.message_s): each further active channel's message waits for those before it.
    Never below 0."""
    active = active_channels(nbytes, channels)
    first = min(nbytes, active * chunk_bytes)
    stages = 2 * math.floor(math.log2(nodes))
    stage_s = (active - 1) * message_s + first / active / message_Bps
    return max(0.0, stages * stage_s - 2 * first / stream_Bps)



def ring_first_post_s(nbytes: float, channels: int, inter_steps: int, message_s: float) -> float:
    """The Simple ring's wait on a lone-message transport (decision 115): on each of its
    `inter_steps` network steps (tuning.cc nInterSteps) the proxy posts the first message of
    every active channel one after the other, so each further active channel's first message
    waits the host cost `message_s` (decision 112's, unchanged; the first channel's is the
    per-message cost already in the latency). Later messages overlap those in flight (the
    ring keeps NCCL_STEPS / sliceSteps = 4 slices in flight per channel): no lone-message
    rate, which the A3 Mega AllGather rows refute for the ring's 4 MiB chunk."""
    return inter_steps * (active_channels(nbytes, channels) - 1) * message_s

# ---------------------------------------------------------------- LL128 across the network

# LL128 crosses a network connection one step at a time (decision 116). Inside a node an LL128
# receiver reads each 128-byte line as it lands (its flag is the line's last 8 bytes,
# prims_ll128.h); across the network the kernel writes a whole step into the connection's
# buffer, then `postSend` (after a barrier and __threadfence_system) moves the tail, and only
# then does the proxy send the step as one message (transport/net.cc sendProxy: with GPUDirect
# RDMA an LL128 step is ready when the tail passes it; LL128 is never flushed). The step is
# the protocol's chunk (enqueue.cc calcCollChunking: chunkSteps = sliceSteps = 1 for LL128),
# at most a step of the LL128 buffer, 15 of its 16 words data. A collective connection is not
# shared, so its proxy keeps NCCL_STEPS steps in flight (net.cc maxDepth: NCCL_SHARED_STEPS /
# nsubs with one sub).
# - The ring: every network step is a step of the ring (one chunk per rank and channel while
#   the buffer is under a loop); the network link stays busy from the first step to the last,
#   so the step-sized message adds nothing beyond NCCL's bandwidth term (no term here).
# - The tree: each chunk goes up and down the tree; at each of its 2 log2(nodes) network
#   stages it is stored whole before it is forwarded, so the pipeline's fill gains one chunk's
#   transfer per network stage. Up the tree a chunk shares its NIC's direction only with the
#   other channels' chunks going up: the network leg's rate over the channels. NCCL's two
#   trees are mirrored (connect.cc: the second half of the channels runs the other tree), so
#   every NIC direction carries one tree's up pass and the other's down pass: while a
#   channel's up pass still streams (its share of the buffer is more than a chunk), a chunk
#   going down gets half that rate, the plan's own steady rate (it prices 2 x the buffer at
#   the leg's rate). NCCL's tuning model prices latency per hop and the buffer at its rate,
#   not this fill: like NVLSTree's fill (decision 102) it is the plan's `unseen_s`.
LL128_BUFFSIZE = 120 * 640 * NCCL_STEPS * 8  # init.cc DEFAULT_LL128_BUFFSIZE: 4,915,200 bytes
LL128_LINE_WORDS, LL128_DATA_WORDS = 16, 15  # device.h NCCL_LL128_LINEELEMS, _DATAELEMS


def ll128_chunk_bytes(buffsize_bytes: int = LL128_BUFFSIZE) -> int:
    """The data bytes of one LL128 step (enqueue.cc calcCollChunking: stepSize =
    buffSizes[LL128] / NCCL_STEPS, then (chunkSize / NCCL_LL128_LINEELEMS) x
    NCCL_LL128_DATAELEMS): 576,000 bytes by NCCL's default buffer."""
    return buffsize_bytes // NCCL_STEPS // LL128_LINE_WORDS * LL128_DATA_WORDS


def tree_ll128_chunk_bytes(nbytes: float, channels: int, nodes: int, ppn: int) -> int:
    """The chunk NCCL 2.28.9 gives a tree LL128 AllReduce of `nbytes` on `channels` channels
    over `nodes` nodes of `ppn` ranks (enqueue.cc calcCollChunking, NCCL_ALGO_TREE with
    NCCL_PROTO_LL128: halved while a channel has fewer than nstepsLL128 x 64 / ppn chunks
    down to 128 KiB, then fewer than nstepsLL128 x 16 / ppn down to 32 KiB; nstepsLL128 =
    1 + log2(nodes) + 0.1 ppn; the quotient an integer division, as NCCL's)."""
    chunk = ll128_chunk_bytes()
    steps = 1 + int(math.log2(nodes)) + 0.1 * ppn
    size = math.inf if math.isinf(nbytes) else int(nbytes)
    for per_rank, floor in ((64, 131072), (16, 32768)):
        while size // (channels * chunk) < steps * per_rank / ppn and chunk > floor:
            chunk //= 2
    return chunk


def tree_ll128_forward_s(nbytes: float, nodes: int, ppn: int, channels: int,
                         channel_Bps: float) -> float:
    """The tree LL128's store-and-forward across the network, beyond NCCL's estimate: at each
    of its log2(`nodes`) network stages up and as many down, a channel's chunk
    (tree_ll128_chunk_bytes, or the channel's whole share of `nbytes` if less) crosses whole,
    its 16/15 wire bytes, before the next stage starts: up at `channel_Bps` (the network
    leg's rate over the channels), down at half of it while the channel's up pass still
    streams (a share of more than one chunk), else at it."""
    chunk = tree_ll128_chunk_bytes(nbytes, channels, nodes, ppn)
    message = min(chunk, nbytes / channels) * LL128_LINE_WORDS / LL128_DATA_WORDS
    down_share = 0.5 if nbytes / channels > chunk else 1.0
    return math.floor(math.log2(nodes)) * message * (1 + 1 / down_share) / channel_Bps


# ---------------------------------------------------------------- NCCL 2.4.8 (release "2.4")

# A profile's `nccl.release` names the NCCL whose algorithm choice prices its collectives:
# "2.28" (the default: NCCL 2.28.9's tuning model above, least modelled time) or "2.4"
# (NCCL 2.4.8, NVIDIA/nccl tag v2.4.8-1: PyTorch's bundled NCCL from pytorch/pytorch#23186,
# July 2019, until #40621 moved master to 2.7.3, June 2020). NCCL 2.4.8 has no tuning model and no
# LL128 (NCCL 2.5 brought both): it picks by fixed thresholds (src/init.cc ncclTreeThreshold,
# src/enqueue.cc getKernelInfo/computeColl):
# - AllReduce runs the tree up to a byte threshold, the ring above; every other kind the ring.
#   threshold = 3 x ringbw x (ringlat - treelat) with ringbw = 5000 B/us x channels on NVLink
#   machines, the tree at 3/4 of it, ringlat = 6 us x (ranks - 1), treelat = 15 us x
#   log2(nodes) + 4 us x (ranks/nodes - 1); no tree on one node or where ringlat <= treelat.
# - LL while the buffer is at most channels x threads x chunks per loop x the per-thread
#   threshold (64 B on Volta, x2 across nodes, x4 for the tree; threads up to 256, MAXTHREADS),
#   Simple above.
# - The tree's Simple kernel pipelines chunks of 512 KiB (4 MiB buffer / 8 steps), halved down
#   to 128/64/32 KiB while a channel has fewer than 8/4/1 x depth chunks; depth = ranks/nodes
#   + log2(nodes). Every chunk crosses the chain inside each node and the binary tree across
#   them, up then down: a pipeline of (chunks + 2 (depth - 1)) chunk steps.
# Its ring and tree LL and ring Simple are priced by the formulas above (the kernels kept their
# protocols); its tree Simple by that pipeline, each chunk step at 2.4.8's own tree bandwidth,
# 3/4 of the ring's (init.cc: treebw = ringbw x 3 / 4 on NVLink machines), per channel.
RELEASES = ("2.28", "2.6", "2.4")  # 2.6: NCCL 2.6.4, cost_model.nccl_v26
V24_COMMIT = "7c72dee660e4d055b81721dd6b03e4e1c0a983cf"  # NVIDIA/nccl tag v2.4.8-1
V24_MAX_CHANNELS = 16  # comm.h MAXCHANNELS
V24_LL_MAX_THREADS = 256  # devcomm.h MAXTHREADS (NCCL_LL_MAX_NTHREADS)
V24_LL_MIN_THREADS = 64  # enqueue.h NCCL_LL_MIN_NTHREADS
V24_LL_CHANNEL_THRESHOLD = 8  # enqueue.h: bytes per thread before more channels
V24_THREAD_THRESHOLD = 64  # enqueue.h NCCL_THREAD_THRESHOLD (Volta and newer)
V24_STEP_BYTES = (1 << 22) // 8  # comm.h DEFAULT_BUFFER_SIZE_BYTES / devcomm.h NCCL_STEPS
V24_TREE_TO_RING = 0.75  # init.cc ncclTreeThreshold: treebw = ringbw * 3 / 4 (NVLink)


def v24_tree_threshold(ranks: int, nodes: int, channels: int) -> float:
    """NCCL 2.4.8's AllReduce tree threshold in bytes (init.cc ncclTreeThreshold, on an NVLink
    machine): the tree up to it, the ring above; 0 for no tree."""
    ring_bw = 5000.0 * channels  # B/us
    tree_bw = ring_bw * V24_TREE_TO_RING
    ring_lat = 6.0 * (ranks - 1)
    tree_lat = 15.0 * (nodes.bit_length() - 1) + 4.0 * (ranks // nodes - 1)
    if nodes < 2 or ring_lat <= tree_lat:
        return 0.0
    return ring_bw * tree_bw / (ring_bw - tree_bw) * (ring_lat - tree_lat)


def v24_ll_threshold(nbytes: float, tree: bool, ranks: int, nodes: int,
                     channels: int) -> float:
    """NCCL 2.4.8's LL threshold in bytes for a buffer of `nbytes` (enqueue.cc
    getKernelInfo): LL at or below it, Simple above."""
    chunks = 1 if tree else ranks  # chunks per loop: the tree's 1, the ring's nRanks
    per_thread_ll = min(V24_THREAD_THRESHOLD * (2 if nodes > 1 else 1),
                        V24_LL_CHANNEL_THRESHOLD)
    nt = V24_LL_MIN_THREADS
    while math.ceil(nbytes / (nt * chunks)) > per_thread_ll and nt * 2 <= V24_LL_MAX_THREADS:
        nt *= 2
    nc = min(max(1, math.ceil(nbytes / (nt * chunks * per_thread_ll))), channels)
    per_thread = V24_THREAD_THRESHOLD * (2 if nodes > 1 else 1) * (4 if tree else 1)
    return nc * nt * chunks * per_thread


def v24_choice(kind: str, nbytes: float, ranks: int, nodes: int,
               channels: int = V24_MAX_CHANNELS) -> tuple[str, str]:
    """(algorithm, protocol) NCCL 2.4.8 runs a collective of `nbytes` with."""
    tree = kind == "allreduce" and nbytes <= v24_tree_threshold(ranks, nodes, channels)
    ll = nbytes <= v24_ll_threshold(nbytes, tree, ranks, nodes, channels)
    return ("tree" if tree else "ring"), ("LL" if ll else "Simple")


def v24_tree_chunk_bytes(nbytes: float, ranks: int, nodes: int, channels: int) -> int:
    """The chunk NCCL 2.4.8's Simple tree pipelines (enqueue.cc computeColl)."""
    depth = ranks // nodes + (nodes.bit_length() - 1)
    chunk = V24_STEP_BYTES
    for floor, per_depth in ((131072, 8), (65536, 4), (32768, 1)):
        while nbytes / (channels * chunk) < depth * per_depth and chunk > floor:
            chunk //= 2
    return chunk


def v24_tree_simple(nbytes: float, ranks: int, nodes: int, channels: int,
                    ring_alg_Bps: float) -> tuple[int, int, float]:
    """NCCL 2.4.8's Simple tree AllReduce as a pipeline: (chunk steps, chunk bytes, seconds per
    step). `ring_alg_Bps`: the ring's algorithm bandwidth on the same GPUs (bytes of buffer per
    second); a tree channel moves a chunk at 3/4 of its share of it."""
    chunk = v24_tree_chunk_bytes(nbytes, ranks, nodes, channels)
    depth = ranks // nodes + (nodes.bit_length() - 1)
    steps = math.ceil(nbytes / (channels * chunk)) + 2 * (depth - 1)
    per_channel = V24_TREE_TO_RING * ring_alg_Bps / channels
    return steps, chunk, chunk / per_channel
