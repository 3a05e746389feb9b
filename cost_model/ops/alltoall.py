"""AllToAll (an MoE layer's dispatch and combine) as NCCL runs it: grouped ncclSend/ncclRecv
(or ncclAlltoAll), each rank sending block j of its buffer to rank j at once.

Each rank sends (P - 1)/P of its buffer and receives as much. Inside an NVLink domain the
NVSwitch carries every pair at once, so a rank's sends share its NVLink bandwidth; across
nodes the blocks bound for the other nodes ((P - g)/P of the buffer, g GPUs per node) leave
through the rank's NIC at the same time as the rest crosses NVLink: the slower of the two sets
the time. Over one rank it is the copy NCCL makes of an out-of-place buffer.

The formulas take a rank's buffer bytes and the ranks (`alltoall_split`, `alltoall_seconds`,
`alltoall_busy`, `alltoall_latency_s`): a plan's all_to_all step (cost_model.plan_cost) and an
AllToAll statement (the `alltoall_*` of a statement, here) are priced by the same ones.
"""

from __future__ import annotations

from cost_model import collectives as coll
from cost_model.hardware import Cluster


def alltoall_split(cluster: Cluster, nbytes, P: int):
    """(bytes a rank sends inside its node, bytes it sends to other nodes, whether the group
    spans nodes) of an AllToAll of `nbytes` per rank over P ranks."""
    g = min(P, cluster.gpus_per_node) if cluster.nodes > 1 else P
    return nbytes * (g - 1) / P, nbytes * (P - g) / P, P > g


def alltoall_seconds(cluster: Cluster, nbytes, P: int, scale: float = 1.0):
    """Seconds of one AllToAll of `nbytes` per rank over P ranks on `scale` of its buffer (a
    chunk of an overlap); None over one rank (a copy)."""
    if P == 1:
        return None
    intra, inter, crosses = alltoall_split(cluster, nbytes, P)
    t = coll.p2p_time(intra * scale, cluster, False)
    if crosses:
        t = coll.smax(t, coll.p2p_time(inter * scale, cluster, True))
    return t


def alltoall_busy(cluster: Cluster, nbytes, P: int) -> dict:
    """The link time an AllToAll occupies (bandwidth only): NVLink's or the NIC's share."""
    intra, inter, crosses = alltoall_split(cluster, nbytes, P)
    busy = {"link": intra / cluster.nvlink.bandwidth_Bps}
    if crosses:
        busy["link"] = coll.smax(busy["link"], inter / cluster.nic.bandwidth_Bps)
    return busy


def alltoall_latency_s(cluster: Cluster, P: int):
    """An AllToAll's latency: its cost at no bytes (NCCL's host cost included); over one rank
    the copy's host cost and launch."""
    if P == 1:
        return cluster.nccl.host_overhead_s + cluster.gpu.launch_latency_s
    return coll.p2p_time(0.0, cluster, alltoall_split(cluster, 0, P)[2])










