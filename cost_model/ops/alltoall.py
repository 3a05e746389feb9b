"""AllToAll (an MoE layer's dispatch and combine) as NCCL runs it: grouped ncclSend/ncclRecv
(or ncclAlltoAll), each rank sending block j of its buffer to rank j at once.

Each rank sends (P - 1)/P of its buffer and receives as much. NCCL runs the sends as point-to-
point operations, one per peer, scheduled in rounds over its p2p channels (enqueue.cc at
v2.28.9-1: the p2p schedule pairs the send to rank + i with the receive from rank - i):

- Inside an NVLink domain the NVSwitch carries every pair at once, so a rank's sends share
  its NVLink bandwidth at the NCCL protocol's efficiency (the ring's fitted Simple or LL
  efficiency inside a node, the same copy loops: 370 GB/s of 450 on H100, the figure NCCL's
  maintainer gives for every non-AllReduce collective, NVIDIA/nccl-tests#212), or at the
  cluster's calibrated send/recv rate where it has one.
- Across nodes the blocks bound for the other nodes ((P - g)/P of the buffer, g GPUs per node)
  leave through the NICs while the rest crosses NVLink: the slower of the two sets the time.
  A rank's network share is one NIC's worth, its GPU's share of the node's NICs at the
  fabric's delivered rate (`Cluster.node_injection_Bps`: efficiency over the node count,
  oversubscription past a leaf): "Alltoall cannot aggregate the bandwidth of multiple NICs,
  so the performance you should see is the performance of a single NIC" (NCCL's maintainer,
  NVIDIA/nccl-tests#267). PXN (a remote block relayed through the GPU on the destination's
  rail) adds NVLink traffic an order of magnitude below NVLink's rate: not priced.
- Protocol: a send/recv runs LL up to NCCL_P2P_LL_THRESHOLD (16 KiB, enqueue.cc) times the
  channels a peer's operation may use (p2pnChannelsPerPeer, `p2p_channels_per_peer`), Simple
  above: 512 KiB a peer inside an H100 node, 32 KiB across nodes.
- Latency, the workbench's reading: the rounds start one after the other, each local peer
  one NVLink hop of the protocol (tuning.cc hwLatencies[NVLINK][RING]), each remote peer one
  network operation posted by the proxy (tuning.cc getNetOverhead: 1 us on x86, 3 for
  Simple), after the protocol's base latency (baseLatencies[RING]); the remote operations fly
  at once, so one network hop (hwLatencies[NET][RING], the fabric's switch hops beyond NCCL's
  table and the transport's per-message cost, `Fabric.message_s`) is paid once. NCCL's
  tuning model has no p2p entry; this is not its estimate. On 8 GPUs of one node at LL it
  gives 6.6 + 7 x 0.6 = 10.8 us, against 10.59-11.13 us measured at 128 B to 4 KiB
  (deepseek-ai/DeepEP#303, benchmarks/validation_nccl.py): nothing was fitted on those rows.
- nccl-tests reports busbw = algbw x (P - 1)/P ("1/n of the data is local", NCCL's
  maintainer, NVIDIA/nccl-tests#130).

Over one rank it is the copy NCCL makes of an out-of-place buffer.

The formulas take a rank's buffer bytes and the ranks (`alltoall_split`, `alltoall_seconds`,
`alltoall_busy`, `alltoall_latency_s`): a plan's all_to_all step (cost_model.plan_cost), the
simulator's process (simulator.alltoall) and the validation against public nccl-tests figures
(benchmarks/validation_nccl.py) are priced by the same ones.
"""

from __future__ import annotations

from cost_model import collectives as coll
from cost_model import nccl_model
from cost_model.hardware import Cluster

# enqueue.cc (v2.28.9-1, addP2pToPlan): NCCL_PARAM(P2pLLThreshold, "P2P_LL_THRESHOLD",
# 16384); a p2p operation runs LL while its bytes are at most this times nChannelsMax, the
# channels one peer's operation may be striped over (comm->p2pnChannelsPerPeer).
P2P_LL_THRESHOLD_BYTES = 16384
# paths.cc (v2.28.9-1, ncclTopoGetNchannels): a remote peer gets 2 channels ("start from 2
# channels per NIC and reduce with scale": halved while 2 x ranks > 4 x p2pnChannels); a peer
# over NVLink 2 x (path bandwidth / one link's), 2 x the NVLinks on an NVSwitch.
P2P_CHANNELS_PER_NET_PEER = 2
P2P_NET_CHANNELS_PER_P2P_CHANNEL = 4
# device.h (v2.28.9-1): MAXCHANNELS 64, NCCL_MAX_P2P_NCHANNELS' default: p2pnChannels at most.
MAX_CHANNELS = 64
# tuning.cc (v2.28.9-1), ring LL across nodes: bus bandwidth x 0.5 (LL moves 8-byte lines
# of 4 bytes of data and a 4-byte flag).
LL_NET_BANDWIDTH_FACTOR = 0.5


def alltoall_split(cluster: Cluster, nbytes, P: int):
    """(bytes a rank sends inside its node, bytes it sends to other nodes, whether the group
    spans nodes) of an AllToAll of `nbytes` per rank over P ranks."""
    g = _local_ranks(cluster, P)
    return nbytes * (g - 1) / P, nbytes * (P - g) / P, P > g


def _local_ranks(cluster: Cluster, P: int) -> int:
    """The ranks of the group inside one node (all of them on one node)."""
    return min(P, cluster.gpus_per_node) if cluster.nodes > 1 else P


def _pow2_up(n: int) -> int:
    """The smallest power of two >= n (NCCL's pow2Up)."""
    return 1 << max(int(n) - 1, 0).bit_length()


def p2p_channels_per_peer(cluster: Cluster, P: int) -> int:
    """NCCL 2.28.9's comm->p2pnChannelsPerPeer for a group of P ranks (paths.cc
    ncclTopoComputeP2pChannels): the power of two at or above the fewest channels any peer
    gets, at most p2pnChannels (the communicator's channels rounded up to a power of two).
    The communicator's channels: inside one node the profile's NCCL channel count
    (`nccl.max_channels`, 32 on the presets; NCCL's graph gives a DGX H100 24, which rounds up
    to the same 32), across nodes one graph channel per NIC doubled (connect.cc
    ncclTopoPostset: 16 on a DGX H100), as `collectives.network_channels` reads search.cc."""
    g = _local_ranks(cluster, P)
    if P == g:
        p2p = min(_pow2_up(cluster.nccl.max_channels), MAX_CHANNELS)
        return min(_pow2_up(min(p2p, 2 * cluster.nvlink_link_count)), p2p)
    p2p = min(_pow2_up(2 * coll.network_channels(cluster)), MAX_CHANNELS)
    net = P2P_CHANNELS_PER_NET_PEER
    while net * P > P2P_NET_CHANNELS_PER_P2P_CHANNEL * p2p and net > 1:
        net //= 2
    return min(_pow2_up(net), p2p)


def alltoall_protocol(cluster: Cluster, nbytes, P: int) -> str:
    """The protocol NCCL runs an AllToAll's sends with: LL while a peer's block is at most
    P2P_LL_THRESHOLD_BYTES x `p2p_channels_per_peer`, Simple above (and for a size not bound
    to a number, and across nodes on a fabric whose software stack leaves NCCL Simple only:
    `Fabric.runs_protocol`, decision 110)."""
    crosses = alltoall_split(cluster, 0.0, P)[2]
    if crosses and not cluster.fabric.runs_protocol("LL"):
        return "Simple"
    threshold = P2P_LL_THRESHOLD_BYTES * p2p_channels_per_peer(cluster, P)
    if coll.is_number(nbytes) and float(nbytes) / P <= threshold:
        return "LL"
    return "Simple"


def alltoall_gpu_latency_s(cluster: Cluster, P: int, protocol: str) -> float:
    """The GPU-side latency of an AllToAll over P > 1 ranks at `protocol` (module docstring):
    the protocol's base latency, one NVLink hop per local peer, one posted network operation
    per remote peer and one network hop."""
    key = ("ring", protocol)
    g = _local_ranks(cluster, P)
    lat = (nccl_model.BASE_LATENCY_US[key]
           + (g - 1) * nccl_model.NVLINK_HOP_US[key]) * 1e-6
    if P > g:
        nodes = -(-P // g)
        overhead = nccl_model.NET_OVERHEAD_US * (
            nccl_model.SIMPLE_NET_OVERHEAD_FACTOR if protocol == "Simple" else 1.0)
        fabric_s = coll.fabric_hop_s(cluster, nodes) * (2 if protocol == "Simple" else 1)
        lat += ((P - g) * overhead + nccl_model.NET_HOP_US[key]) * 1e-6 + fabric_s \
            + cluster.fabric.message_s
    return lat


def _rates_Bps(cluster: Cluster, P: int, protocol: str) -> tuple[float, float]:
    """(a rank's NVLink send rate, its network send rate) for an AllToAll over P ranks."""
    proto = next((p for p in cluster.nccl.protocols if p.name == protocol),
                 cluster.nccl.protocols[-1])
    if protocol == "Simple" and cluster.p2p_bandwidth_Bps:
        nvlink = cluster.p2p_bandwidth_Bps  # calibrated send/recv inside a node
    else:
        nvlink = cluster.nvlink.bandwidth_Bps * proto.efficiency
    g = _local_ranks(cluster, P)
    nodes = -(-P // g)
    net = cluster.node_injection_Bps(nodes) / cluster.gpus_per_node if P > g else 0.0
    if protocol == "LL":
        net *= LL_NET_BANDWIDTH_FACTOR
    return nvlink, net


def alltoall_seconds(cluster: Cluster, nbytes, P: int, scale: float = 1.0):
    """Seconds of one AllToAll of `nbytes` per rank over P ranks on `scale` of its buffer (a
    chunk of an overlap), NCCL's host cost included; None over one rank (a copy)."""
    if P == 1:
        return None
    protocol = alltoall_protocol(cluster, nbytes * scale, P)
    intra, inter, crosses = alltoall_split(cluster, nbytes * scale, P)
    nvlink_Bps, net_Bps = _rates_Bps(cluster, P, protocol)
    transfer = intra / nvlink_Bps
    if crosses:
        transfer = coll.smax(transfer, inter / net_Bps)
    return (cluster.nccl.host_overhead_s + alltoall_gpu_latency_s(cluster, P, protocol)
            + transfer)


def alltoall_busy(cluster: Cluster, nbytes, P: int) -> dict:
    """The link time an AllToAll occupies (bandwidth only): NVLink's or the NIC's share."""
    intra, inter, crosses = alltoall_split(cluster, nbytes, P)
    busy = {"link": intra / cluster.nvlink.bandwidth_Bps}
    if crosses:
        busy["link"] = coll.smax(busy["link"], inter / cluster.nic.bandwidth_Bps)
    return busy


def alltoall_latency_s(cluster: Cluster, P: int, nbytes=0.0):
    """An AllToAll's fixed cost, NCCL's host cost included, at the protocol a buffer of
    `nbytes` runs (0: the LL latency); over one rank the copy's host cost and launch."""
    if P == 1:
        return cluster.nccl.host_overhead_s + cluster.gpu.launch_latency_s
    return cluster.nccl.host_overhead_s + alltoall_gpu_latency_s(
        cluster, P, alltoall_protocol(cluster, nbytes, P))
