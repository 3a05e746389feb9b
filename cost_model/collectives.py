"""Alpha-beta cost of NCCL collectives per algorithm (ring, tree) and protocol (LL, LL128,
Simple), and the peer-load/store data movement of the workbench's fused kernels.

Every function takes sizes either as numbers (the simulator's fast path) or as sympy
expressions (`workbench simulate --symbolic`), and returns the same kind.

The model, per algorithm a and protocol p (NCCL's own tuning model has this shape,
src/graph/tuning.cc):

    t = host_overhead + kind_latency + base_latency[p] + steps(a, P) * (step_latency[p] + hop)
        + bus_bytes(a, S, P) / (link_bandwidth * efficiency[p])

and NCCL picks the (a, p) of least time. The channel count (one SM each) grows with the
buffer; it decides how many SMs the collective takes from concurrent kernels.

Inside one node (one NVLink domain) the constants are those fitted on real GPUs (the
cluster's NcclTuning). A group that spans nodes is priced by NCCL's own tuning model
(cost_model.nccl_model: ring and double binary tree, network latency only on the steps that
cross nodes) over the bus bandwidth the topology gives it (`group_path`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import sympy

from cost_model import nccl_model, nccl_v26
from cost_model.hardware import Cluster, Protocol
from workbench import ir
from workbench.errors import NotOnThisCluster

# The kinds priced here as NCCL's ring, tree and NVLS collectives, from the one name table
# (ir.COLLECTIVES; an AllToAll is NCCL's grouped sends: cost_model.ops.alltoall).
COLLECTIVES = tuple(c.kind for c in ir.COLLECTIVES if c.op is not ir.AllToAll)


# ---------------------------------------------------------------- numeric/symbolic helpers


def is_number(*xs) -> bool:
    """True when every argument is a plain Python/numpy number (not a sympy expression)."""
    return all(not isinstance(x, sympy.Basic) or x.is_Number for x in xs)


def smin(*xs):
    """min for numbers, sympy.Min for expressions."""
    return min(float(x) for x in xs) if is_number(*xs) else sympy.Min(*xs)


def smax(*xs):
    """max for numbers, sympy.Max for expressions."""
    return max(float(x) for x in xs) if is_number(*xs) else sympy.Max(*xs)


def sceil(x):
    """ceil for numbers, sympy.ceiling for expressions."""
    return math.ceil(float(x)) if is_number(x) else sympy.ceiling(x)


def slog2(x):
    """ceil(log2(x)) for numbers, its sympy form for expressions."""
    return math.ceil(math.log2(float(x))) if is_number(x) else sympy.ceiling(sympy.log(x, 2))


# ---------------------------------------------------------------- topology


@dataclass(frozen=True, slots=True)
class Path_:
    """The links a collective of a group runs over: per-GPU bandwidth and per-hop latency."""

    link: str  # the bottleneck resource name: "nvlink" or "nic"
    bandwidth_Bps: float
    hop_latency_s: float
    nodes: int  # nodes the group spans


def group_path(cluster: Cluster, group_size: int | None) -> Path_:
    """Where a group of `group_size` ranks runs: within one NVLink domain (a node) when it
    fits in a node, else across nodes. Across nodes NCCL spreads its channels over every NIC
    of a node (each channel crosses the node boundary through its own NIC), so a ring's
    per-GPU bus bandwidth is min(NVLink, the node's NIC bandwidth per GPU of the ring,
    `Cluster.node_injection_Bps`: all NICs of the node, over the fabric's oversubscription
    where the group spans leaves)."""
    g = cluster.gpus_per_node
    if group_size is None:
        group_size = cluster.world_size
    if group_size <= g or cluster.nodes == 1:
        # The fitted NCCL step latencies already include the NVLink hop: no extra hop latency.
        return Path_("nvlink", cluster.nvlink.bandwidth_Bps, 0.0, 1)
    nodes = math.ceil(group_size / g)
    nic_bw = cluster.node_injection_Bps(nodes)
    if nic_bw < cluster.nvlink.bandwidth_Bps:
        return Path_("nic", nic_bw, cluster.nic.latency_s, nodes)
    return Path_("nvlink", cluster.nvlink.bandwidth_Bps, cluster.nic.latency_s, nodes)


def node_axis_path(cluster: Cluster, nodes: int) -> Path_:
    """Where a collective over one GPU per node runs (the AllReduce across nodes of a
    hierarchical split, design note 35): every local rank's sub-group runs at once, each
    through the NIC of its rail, so one gets a GPU's share of the node's NICs, at the
    fabric's efficiency over `nodes` nodes (over its oversubscription where it spans
    leaves)."""
    bw = cluster.nic_per_gpu_Bps * cluster.fabric.efficiency_at(nodes)
    if cluster.fabric.crosses_spine(nodes):
        bw /= cluster.fabric.oversubscription
    return Path_("nic", bw, cluster.nic.latency_s, nodes)


def network_channels(cluster: Cluster, one_per_node: bool = False) -> int:
    """The channels of NCCL's graph across nodes, which its per-channel bandwidth caps
    multiply (tuning.cc: nChannels x perChMax...): one per NIC of the node (search.cc gives
    each channel its own NIC: 8 channels at 45 GB/s on a DGX H100, no duplication since
    45 < 50 GB/s with more than 4 channels), and 2 at one GPU per node (one channel at
    48 GB/s, duplicated into 2 at 24). Not NCCL's channel maximum (32), which made the
    caps never bind. A reading of search.cc (design note 38)."""
    if one_per_node or cluster.gpus_per_node == 1:
        return 2
    return cluster.nics_per_node or cluster.gpus_per_node


def fabric_hop_s(cluster: Cluster, nodes: int) -> float:
    """Latency a network hop adds beyond NCCL's table for a group over `nodes` nodes: the
    switch hops up to the spine and back (2 per tier above the leaf) where it spans leaves."""
    fabric = cluster.fabric
    if not fabric.crosses_spine(nodes):
        return 0.0
    return 2 * (fabric.tiers - 1) * fabric.switch_latency_s


# ---------------------------------------------------------------- plans


@dataclass(frozen=True, slots=True)
class Plan:
    """How NCCL runs one collective: `steps` chunk steps of `step_bytes` each, one after the
    other on `link`, after a fixed cost. time_s = fixed_s + steps * step_s."""

    kind: str
    algorithm: str
    protocol: str
    channels: object
    steps: object
    step_bytes: object
    step_s: object
    fixed_s: object
    link: str
    bus_bytes: object
    # The part of time_s that NCCL's own estimate does not see (NVLSTree's pipeline fill,
    # nccl_model.nvls_tree_fill_s): NCCL chooses its algorithm without it, and then runs it.
    unseen_s: object = 0.0

    @property
    def time_s(self):
        return self.fixed_s + self.steps * self.step_s

    @property
    def nccl_estimate_s(self):
        """The time NCCL's tuning model gives this plan, by which it chooses."""
        return self.time_s - self.unseen_s


def _ring_shape(kind: str, nbytes, P):
    """(steps, bus bytes per GPU) of a ring collective on a buffer of `nbytes` (nccl-tests'
    convention: the input of ReduceScatter, the output of AllGather)."""
    if kind == "allreduce":
        return 2 * (P - 1), 2 * (P - 1) * nbytes / P
    if kind in ("reducescatter", "allgather"):
        return P - 1, (P - 1) * nbytes / P
    if kind in ("broadcast", "reduce"):
        return P - 1, nbytes  # pipelined chain: every GPU forwards the whole buffer
    raise ValueError(f"collective kind must be one of {COLLECTIVES}, got {kind!r}")


def bus_factor(kind: str, P) -> float:
    """nccl-tests' busbw / algbw for a collective over P ranks: the bytes a ring moves per GPU
    per byte of buffer, 2(P-1)/P for AllReduce, (P-1)/P for ReduceScatter and AllGather, 1
    for Broadcast and Reduce (nccl-tests' doc/PERFORMANCE.md)."""
    return _ring_shape(kind, 1, P)[1]


def _plan(kind, algorithm, proto: Protocol, nbytes, P, cluster: Cluster, path: Path_) -> Plan:
    nccl = cluster.nccl
    if algorithm == "ring":
        steps, bus_bytes = _ring_shape(kind, nbytes, P)
        tree_factor = 1.0
    else:  # double binary tree across nodes, chain inside a node (NCCL's tree, AllReduce only)
        g = cluster.gpus_per_node
        steps = 2 * (slog2(path.nodes) + g - 1)
        bus_bytes = nbytes
        # NCCL discounts tree bandwidth against ring (treeCorrectionFactor in tuning.cc);
        # 0.6 is a mid value of its table, not a measured one.
        tree_factor = 0.6
    channels = smax(1, smin(nccl.max_channels, sceil(bus_bytes / nccl.min_channel_bytes)))
    factor = nccl.allreduce_bandwidth_factor if kind == "allreduce" else 1.0
    bandwidth = path.bandwidth_Bps * factor * tree_factor * proto.efficiency
    step_s = proto.step_latency_s + path.hop_latency_s + bus_bytes / steps / bandwidth
    fixed_s = nccl.host_overhead_s + nccl.kind_latency_s(kind) + proto.base_latency_s
    return Plan(kind, algorithm, proto.name, channels, steps, bus_bytes / steps, step_s,
                fixed_s, path.link, bus_bytes)


def _network_plan(kind, algorithm, proto: Protocol, nbytes, P, cluster: Cluster,
                  path: Path_, one_per_node: bool = False) -> Plan:
    """A plan across nodes. Its latency is NCCL's tuning model's (cost_model.nccl_model:
    network hops only on the steps that cross nodes). Its bandwidth is that of the slower of
    its legs: the inter-node leg as NCCL's model gives it per protocol over the node's NICs
    (`Cluster.node_injection_Bps`), the intra-node NVLink leg as measured inside a node (the
    fitted protocol efficiency, as a single-node plan). Sizes may be symbolic; then the
    large-buffer form is used (no tree correction, the ring plateau applied)."""
    nccl = cluster.nccl
    protocol = proto.name
    ranks, nodes = int(P), path.nodes
    gen = cluster.gpu.generation
    numeric = is_number(nbytes)
    lat = nccl_model.latency_s(kind, algorithm, protocol, ranks, nodes,
                               fabric_hop_s(cluster, nodes), cluster.fabric.message_s)
    bw, link = _network_bandwidth(kind, algorithm, proto, P, cluster, path, one_per_node)
    stream_bw = bw  # before the tree's size correction
    if algorithm == "tree":
        if numeric:
            bw *= nccl_model.tree_correction(protocol, float(nbytes))
        # reduce up the tree, broadcast down: the whole buffer each way
        bus_bytes = 2 * nbytes
        steps = 2 * (math.floor(math.log2(nodes)) + ranks // nodes - 1)
    else:
        steps, bus_bytes = _ring_shape(kind, nbytes, P)
        steps = int(steps)
    channels = smax(1, smin(nccl.max_channels, sceil(bus_bytes / nccl.min_channel_bytes)))
    lat *= (nccl_model.plateau(kind, algorithm, protocol, float(nbytes), ranks,
                               nccl.max_channels, gen) if numeric
            else nccl_model.plateau(kind, algorithm, protocol, math.inf, ranks, 1, gen))
    base = nccl_model.BASE_LATENCY_US[(algorithm, protocol)] * 1e-6
    # the hop latencies ride on the steps, the base latency and the host cost are fixed
    step_s = (lat - base) / steps + bus_bytes / steps / bw
    fill = 0.0
    if ((algorithm, protocol) == ("tree", "Simple") and not one_per_node
            and cluster.fabric.lone_message is not None):
        stream_bw, _ = _network_bandwidth(kind, algorithm, proto, P, cluster, path, False,
                                          estimate=False)
        fill = _tree_first_loop_s(nbytes, bus_bytes, nodes, cluster, stream_bw, bw)
    if ((algorithm, protocol) == ("ring", "Simple") and not one_per_node
            and cluster.fabric.lone_message is not None):
        size = float(nbytes) if numeric else math.inf
        fill = nccl_model.ring_first_post_s(size, tree_channels(cluster),
                                            nccl_model.ring_steps(kind, ranks, nodes)[1],
                                            cluster.fabric.lone_message[0])
    if (algorithm, protocol) == ("tree", "LL128"):
        fill = _tree_ll128_forward_s(nbytes, ranks, nodes, cluster, stream_bw, one_per_node)
    fixed_s = nccl.host_overhead_s + nccl.kind_latency_s(kind) + base + fill
    return Plan(kind, algorithm, protocol, channels, steps, bus_bytes / steps, step_s,
                fixed_s, link, bus_bytes, fill)


def _tree_ll128_forward_s(nbytes, ranks: int, nodes: int, cluster: Cluster,
                          stream_Bps: float, one_per_node: bool) -> float:
    """The tree LL128's chunk stored whole at each network stage (decision 116,
    nccl_model.tree_ll128_forward_s) on `tree_channels` (one GPU per node of a hierarchical
    split: its own communicator's 2), up at the network leg's rate `stream_Bps` (before the
    tree's size correction, NCCL's reading of the ramp) over the channels. Symbolic sizes: a
    full chunk."""
    size = float(nbytes) if is_number(nbytes) else math.inf
    channels = network_channels(cluster, True) if one_per_node else tree_channels(cluster)
    return nccl_model.tree_ll128_forward_s(size, nodes, ranks // nodes, channels,
                                           stream_Bps / channels)


def tree_channels(cluster: Cluster) -> int:
    """The channels NCCL runs a tree on across nodes: its search's one per GPU of the node,
    doubled by connect.cc (ncclTopoPostset, v2.28.9-1: "nChannels = comm->nChannels =
    std::min(MAXCHANNELS, nChannels*2)"): 16 on 8-GPU nodes. A reading of the source that
    the proxy transports' rows confirm: their tree's rate changes where the buffer passes
    16 channels x 1 MiB (decision 112). At most NCCL's MAXCHANNELS."""
    return min(nccl_model.MAX_CHANNELS, 2 * cluster.gpus_per_node)


def _tree_first_loop_s(nbytes, bus_bytes, nodes: int, cluster: Cluster, stream_Bps: float,
                       estimate_Bps: float) -> float:
    """The Simple tree's time beyond NCCL's estimate on a transport whose lone messages are
    slow (`Fabric.lone_message`): its first loop (nccl_model.tree_first_loop_s) and the rest of the
    buffer at the stream rate `stream_Bps` (what the fabric delivers), where NCCL's estimate
    takes the whole buffer at `estimate_Bps` (its tree factors, caps and size correction:
    its own reading of the ramp that the pipeline prices here, and a cap the proxy
    transports' large buffers pass: decision 112). Symbolic sizes: a full loop."""
    lone = cluster.fabric.lone_message
    size = float(nbytes) if is_number(nbytes) else math.inf
    first = nccl_model.tree_first_loop_s(
        size, nodes, tree_channels(cluster),
        nccl_model.tree_chunk_bytes(cluster.fabric.buffsize_bytes), *lone, stream_Bps)
    return first + bus_bytes / stream_Bps - bus_bytes / estimate_Bps


def _network_bandwidth(kind, algorithm, proto: Protocol, P, cluster: Cluster, path: Path_,
                       one_per_node: bool, estimate: bool = True) -> tuple[float, str]:
    """(bus bandwidth, bottleneck link) of a ring or tree plan across nodes, before the
    tree's size correction: the slower of the NICs' leg as NCCL's model gives it per protocol
    and the NVLink leg at the fitted protocol efficiency. `estimate` False: the NICs' leg
    as the fabric delivers it, without NCCL's per-protocol factors and per-channel caps (the
    stream of a tree on a lone-message transport, `_tree_first_loop_s`)."""
    nccl = cluster.nccl
    protocol = proto.name
    ranks, nodes = int(P), path.nodes
    gen = cluster.gpu.generation
    injection = path.bandwidth_Bps if one_per_node else cluster.node_injection_Bps(nodes)
    if algorithm == "tree" and nodes == 2:
        # NCCL's tree over 2 nodes: every node is the root of one tree and a leaf of the
        # other, so each NIC carries the buffer once; NCCL models it with a tree graph whose
        # bwIntra its search raises to twice bwInter (search.cc pass 2, "increase bwIntra for
        # trees (2 nodes or collnet)", tuning.cc: bw = bwIntra at <= 2 nodes), as far as the
        # node's NVLink carries it
        injection = min(2 * injection, cluster.nccl_nvlink_Bps) if not one_per_node \
            else 2 * injection
    nic_bw = (nccl_model.bus_bandwidth_Bps(kind, algorithm, protocol, injection, ranks, nodes,
                                           network_channels(cluster, one_per_node), gen)
              if estimate else injection)
    factor = nccl.allreduce_bandwidth_factor if kind == "allreduce" else 1.0
    nvlink_bw = cluster.nvlink.bandwidth_Bps * proto.efficiency * factor
    return (nic_bw, "nic") if nic_bw <= nvlink_bw else (nvlink_bw, "nvlink")


def _group_path(P, cluster: Cluster, group_size: int | None, one_per_node: bool) -> Path_:
    """The path of a collective over P ranks (`plans`)."""
    if one_per_node:
        return node_axis_path(cluster, group_size)
    return group_path(cluster, group_size if group_size is not None else
                      (int(P) if is_number(P) else None))


def plans(kind: str, nbytes, P, cluster: Cluster, group_size: int | None = None,
          one_per_node: bool = False) -> list[Plan]:
    """Every (algorithm, protocol) plan NCCL could pick for this collective; `one_per_node`:
    its `group_size` ranks are one GPU on each of as many nodes (`node_axis_path`)."""
    path = _group_path(P, cluster, group_size, one_per_node)
    if cluster.nccl.release == "2.4":
        return _v24_plans(kind, nbytes, P, cluster, path, one_per_node)
    if cluster.nccl.release == "2.6" and path.nodes > 1 and is_number(P):
        return [_v26_plan(kind, a, p, nbytes, int(P), cluster, path, one_per_node)
                for a in nccl_model.ALGORITHMS[kind] for p in cluster.nccl.protocols]
    if path.nodes > 1 and is_number(P):
        fabric = cluster.fabric  # its stack may leave NCCL fewer protocols and no NVLS
        out = [_network_plan(kind, a, p, nbytes, P, cluster, path, one_per_node)
               for a in nccl_model.ALGORITHMS[kind] for p in cluster.nccl.protocols
               if fabric.runs_protocol(p.name)]
        if kind in ("allgather", "reducescatter") and int(P) == path.nodes:
            out.append(_pat_plan(kind, nbytes, int(P), cluster, path, one_per_node))
        gen = cluster.gpu.generation
        if (kind == "allreduce" and cluster.nvls and fabric.runs_nvls and not one_per_node
                and int(P) > path.nodes
                and gen in nccl_model.NVLS_TREE_PER_CHANNEL_GBPS):
            out.append(_nvls_tree_plan(nbytes, int(P), cluster, path))
        return out
    if (kind in NVLS_KINDS and path.nodes == 1 and cluster.nvls
            and cluster.gpu.generation in nccl_model.NVLS_EFFICIENCY):
        gpus = group_size if group_size is not None else (int(P) if is_number(P) else None)
        if gpus is not None and gpus > 1:
            return ([_plan(kind, "ring", p, nbytes, P, cluster, path)
                     for p in cluster.nccl.protocols]
                    + [_nvls_plan(kind, nbytes, P, gpus, cluster)])
    algorithms = ["ring"] + (["tree"] if kind == "allreduce" and path.nodes > 1 else [])
    return [_plan(kind, a, p, nbytes, P, cluster, path)
            for a in algorithms for p in cluster.nccl.protocols]


def _v24_plans(kind, nbytes, P, cluster: Cluster, path: Path_, one_per_node: bool
               ) -> list[Plan]:
    """The plans of NCCL 2.4.8 (`nccl.release` "2.4", cost_model.nccl_model): ring and (for
    AllReduce across nodes) tree, LL and Simple, no LL128, NVLS or PAT; its Simple tree is
    NCCL 2.4.8's pipeline (numeric sizes). Which one runs is its thresholds' choice
    (`choose_plan`), not the least time."""
    protocols = [p for p in cluster.nccl.protocols if p.name != "LL128"]
    algorithms = ["ring"] + (["tree"] if kind == "allreduce" and path.nodes > 1 else [])
    out = []
    for a in algorithms:
        for p in protocols:
            if (a, p.name) == ("tree", "Simple") and is_number(nbytes, P):
                out.append(_v24_tree_simple_plan(nbytes, int(P), cluster, path, one_per_node))
            elif path.nodes > 1 and is_number(P):
                out.append(_network_plan(kind, a, p, nbytes, P, cluster, path, one_per_node))
            else:
                out.append(_plan(kind, a, p, nbytes, P, cluster, path))
    return out


def _v24_tree_simple_plan(nbytes, P: int, cluster: Cluster, path: Path_,
                          one_per_node: bool) -> Plan:
    """NCCL 2.4.8's Simple tree AllReduce across nodes: a pipeline of chunk steps
    (cost_model.nccl_model.v24_tree_simple) at 3/4 of the ring's bandwidth on this path."""
    nccl = cluster.nccl
    simple = next(p for p in nccl.protocols if p.name == "Simple")
    ring_bus_Bps, link = _network_bandwidth("allreduce", "ring", simple, P, cluster, path,
                                            one_per_node)
    steps, chunk, step_s = nccl_model.v24_tree_simple(float(nbytes), P, path.nodes,
                                                      nccl_model.V24_MAX_CHANNELS,
                                                      ring_bus_Bps * P / (2 * (P - 1)))
    base = nccl_model.BASE_LATENCY_US[("tree", "Simple")] * 1e-6
    fixed_s = nccl.host_overhead_s + nccl.kind_latency_s("allreduce") + base
    return Plan("allreduce", "tree", "Simple", nccl_model.V24_MAX_CHANNELS, steps, chunk,
                step_s, fixed_s, link, 2 * nbytes)


def _v26_plan(kind, algorithm, proto: Protocol, nbytes, P: int, cluster: Cluster,
              path: Path_, one_per_node: bool) -> Plan:
    """A plan across nodes as NCCL 2.6.4's tuning model prices it (`nccl.release` "2.6",
    cost_model.nccl_v26): its latencies, its graph's channels x speed refined per algorithm
    and protocol, its tree correction; at most what the topology delivers (the fabric's
    efficiency) and the NVLink leg at the fitted protocol efficiency, as `_network_plan`."""
    nccl = cluster.nccl
    nodes = path.nodes
    protocol = proto.name
    injection = path.bandwidth_Bps if one_per_node else cluster.node_injection_Bps(nodes)
    speed = nccl_v26.channel_speed_GBps(cluster.nic.bandwidth_Bps)
    if algorithm == "tree" and nodes <= 2:
        # search.cc pass 2 raises a tree's speedIntra up to twice speedInter, which 2.6.4's
        # model uses at <= 2 nodes (each NIC carries the buffer once: as `_network_bandwidth`)
        speed *= 2
        injection = 2 * injection if one_per_node else min(2 * injection,
                                                           cluster.nccl_nvlink_Bps)
    bw = nccl_v26.bus_bandwidth_Bps(kind, algorithm, protocol, injection, nodes,
                                    network_channels(cluster, one_per_node), speed)
    factor = nccl.allreduce_bandwidth_factor if kind == "allreduce" else 1.0
    nvlink_bw = cluster.nvlink.bandwidth_Bps * proto.efficiency * factor
    bw, link = (bw, "nic") if bw <= nvlink_bw else (nvlink_bw, "nvlink")
    lat = nccl_v26.latency_s(kind, algorithm, protocol, P, nodes, fabric_hop_s(cluster, nodes))
    if algorithm == "tree":
        if is_number(nbytes):
            bw *= nccl_v26.tree_correction(protocol, float(nbytes))
        bus_bytes = 2 * nbytes
        steps = 2 * ((nodes.bit_length() - 1) + P // nodes - 1)
    else:
        steps, bus_bytes = _ring_shape(kind, nbytes, P)
        steps = int(steps)
    base = nccl_v26.BASE_LATENCY_US[(algorithm, protocol)] * 1e-6
    channels = smax(1, smin(nccl.max_channels, sceil(bus_bytes / nccl.min_channel_bytes)))
    step_s = (lat - base) / steps + bus_bytes / steps / bw
    fixed_s = nccl.host_overhead_s + nccl.kind_latency_s(kind) + base
    return Plan(kind, algorithm, protocol, channels, steps, bus_bytes / steps, step_s,
                fixed_s, link, bus_bytes)


# The collectives NCCL runs as NVLS inside one NVSwitch node (tuning.cc 2.28.9: AllReduce,
# and AllGather/ReduceScatter, which NVLS serves across nodes only with CollNet).
NVLS_KINDS = ("allreduce", "allgather", "reducescatter")


def _nvls_plan(kind, nbytes, P, gpus: int, cluster: Cluster) -> Plan:
    """NVLS inside one NVSwitch node (cost_model.nccl_model, NCCL 2.28.9's model): one pass
    at the algorithm bandwidth after NVLS's latency; one channel (SM) per GPU. The NVLink
    bandwidth is the profile's, as NCCL's topology counts it (`Cluster.nccl_nvlink_Bps`)."""
    nccl = cluster.nccl
    gen = cluster.gpu.generation
    time_s = nccl_model.nvls_time_s(kind, 1.0, gpus, cluster.nccl_nvlink_Bps / 1e9, gen)
    per_byte_s = time_s - nccl_model.NVLS_LATENCY_US * 1e-6
    # NCCL's NVLS latency (25 us) is the whole GPU-side latency; the fitted per-kind set-up
    # (kind_latency_s) belongs to the ring kernels it was measured on
    fixed_s = nccl.host_overhead_s + nccl_model.NVLS_LATENCY_US * 1e-6
    _, bus_bytes = _ring_shape(kind, nbytes, P)
    return Plan(kind, "nvls", "Simple", nccl_model.nvls_channels(gpus), 1, nbytes,
                nbytes * per_byte_s, fixed_s, "nvlink", bus_bytes)


def _nvls_tree_plan(nbytes, P: int, cluster: Cluster, path: Path_) -> Plan:
    """NVLSTree AllReduce across NVSwitch nodes (cost_model.nccl_model, NCCL 2.28.9's model):
    NVLS inside each node, a tree over the nodes' NIC heads; one pass at the algorithm
    bandwidth after its latency."""
    nccl = cluster.nccl
    gen = cluster.gpu.generation
    heads = min(cluster.nics_per_node or cluster.gpus_per_node, cluster.gpus_per_node)
    line_Bps = cluster.gpus_per_node * cluster.nic_per_gpu_Bps / heads
    delivered_Bps = cluster.node_injection_Bps(path.nodes) / heads
    bus = nccl_model.nvls_tree_bus_Bps(heads, path.nodes, line_Bps, gen, delivered_Bps)
    alg_Bps = bus * P / (2 * (P - 1))
    lat = nccl_model.nvls_tree_latency_s(path.nodes, fabric_hop_s(cluster, path.nodes),
                                         cluster.fabric.message_s)
    # the pipeline's fill (nccl_model.nvls_tree_fill_s; symbolic sizes: a full chunk each)
    fill = nccl_model.nvls_tree_fill_s(float(nbytes) if is_number(nbytes) else math.inf,
                                       alg_Bps, heads, path.nodes, gen)
    return Plan("allreduce", "nvlstree", "Simple", heads, 1, nbytes, nbytes / alg_Bps,
                nccl.host_overhead_s + lat + fill, "nic", 2 * (P - 1) * nbytes / P, fill)


def _pat_plan(kind, nbytes, P: int, cluster: Cluster, path: Path_, one_per_node: bool) -> Plan:
    """PAT AllGather/ReduceScatter over one GPU per node (cost_model.nccl_model, NCCL
    2.28.9's model): log2(nodes) network latencies and a linear part, the whole buffer at
    0.75 of the bus bandwidth; Simple protocol only."""
    nccl = cluster.nccl
    injection = path.bandwidth_Bps if one_per_node else cluster.node_injection_Bps(path.nodes)
    bw = nccl_model.pat_bandwidth_Bps(injection)
    lat = nccl_model.pat_latency_s(P, path.nodes, fabric_hop_s(cluster, path.nodes),
                                   cluster.fabric.message_s)
    channels = smax(1, smin(nccl.max_channels, sceil(nbytes / nccl.min_channel_bytes)))
    fixed_s = nccl.host_overhead_s + nccl.kind_latency_s(kind) + lat
    return Plan(kind, "pat", "Simple", channels, 1, nbytes, nbytes / bw, fixed_s, "nic",
                (P - 1) * nbytes / P)


def choose_plan(kind: str, nbytes: float, P: int, cluster: Cluster,
                group_size: int | None = None, one_per_node: bool = False) -> Plan:
    """The plan NCCL picks (least time by NCCL's own estimate, `Plan.nccl_estimate_s`) for
    numeric sizes."""
    if P == 1:
        nccl = cluster.nccl
        return Plan(kind, "none", "none", 0, 0, 0.0, 0.0, nccl.host_overhead_s, "nvlink", 0.0)
    options = plans(kind, nbytes, P, cluster, group_size, one_per_node)
    if cluster.nccl.release == "2.4":  # NCCL 2.4.8 picks by thresholds, not by time
        nodes = _group_path(P, cluster, group_size, one_per_node).nodes
        chosen = nccl_model.v24_choice(kind, nbytes, int(P), nodes)
        return next(p for p in options if (p.algorithm, p.protocol) == chosen)
    # NCCL picks by its own estimate (least modelled time, without what it does not model)
    return min(options, key=lambda p: float(p.nccl_estimate_s))


def collective_time(kind: str, nbytes, P, cluster: Cluster, group_size: int | None = None,
                    one_per_node: bool = False):
    """Predicted time (s) of an NCCL collective: the least time over algorithms and protocols."""
    if is_number(nbytes, P):
        return float(choose_plan(kind, float(nbytes), int(P), cluster, group_size,
                                 one_per_node).time_s)
    return smin(*(p.time_s for p in plans(kind, nbytes, P, cluster, group_size,
                                          one_per_node)))


def collective_bus_bytes(kind: str, nbytes, P):
    """Bytes each GPU must send (and receive) for a collective, whatever the algorithm: the
    bandwidth lower bound (ring is optimal for these collectives)."""
    if is_number(P) and int(P) == 1:
        return 0
    return _ring_shape(kind, nbytes, P)[1]


def p2p_time(nbytes, cluster: Cluster, crosses_nodes: bool):
    """A Send to the same rank of the next stage: one NCCL send/recv. Inside a node at the
    cluster's calibrated send/recv latency and bandwidth where it has them, else (and across
    nodes) as the Simple protocol over the link."""
    if not crosses_nodes and cluster.p2p_bandwidth_Bps:
        return (cluster.nccl.host_overhead_s + cluster.p2p_latency_s
                + nbytes / cluster.p2p_bandwidth_Bps)
    simple = cluster.nccl.protocols[-1]
    link = cluster.nic if crosses_nodes else cluster.nvlink
    return (cluster.nccl.host_overhead_s + simple.base_latency_s + link.latency_s
            + nbytes / (link.bandwidth_Bps * simple.efficiency))


# ---------------------------------------------------------------- fused kernels


def fused_block_fraction(cluster: Cluster, blocks: float) -> float:
    """The fraction of its full grid's peer bandwidth that a fused collective kernel reaches
    with `blocks` thread blocks, from the calibrated curve (`Cluster.fused_block_bandwidth`).

    Linear between measured block counts; below the smallest, in proportion to the blocks
    (each block keeps a bounded number of loads in flight); at or above the largest (the
    full grid), that count's fraction. 1 without a curve (the presets): the model has always
    priced the peer bandwidth independently of the grid."""
    curve = sorted((int(b), float(f)) for b, f in cluster.fused_block_bandwidth)
    if not curve:
        return 1.0
    if blocks <= curve[0][0]:
        return curve[0][1] * max(float(blocks), 0.0) / curve[0][0]
    for (b0, f0), (b1, f1) in zip(curve, curve[1:]):
        if blocks <= b1:
            return f0 + (f1 - f0) * (blocks - b0) / (b1 - b0)
    return curve[-1][1]


def fused_unroll_factor(cluster: Cluster, unroll: int) -> float:
    """The factor on its unroll 1 peer bandwidth that a fused collective kernel generated
    with `unroll` vectors per thread per loop iteration reaches, from the calibrated curve
    (`Cluster.fused_unroll_bandwidth`, design note 95): the curve's factor for that unroll,
    linear between the unrolls it names (with unroll 1 at 1) and the largest's beyond them.
    1 without a curve (the presets): unroll then has no modelled effect."""
    curve = sorted({1: 1.0, **{int(u): float(f) for u, f in cluster.fused_unroll_bandwidth}}
                   .items())
    for (u0, f0), (u1, f1) in zip(curve, curve[1:]):
        if unroll <= u1:
            return f0 + (f1 - f0) * (max(unroll, u0) - u0) / (u1 - u0)
    return curve[-1][1]


def fused_blocks_on(cluster: Cluster, sms: float) -> float:
    """Thread blocks of a fused collective kernel that holds `sms` SMs: the full grid's
    blocks per SM (the curve's largest count / sm_count; the runtime launches 2 per SM) on
    each. Without a curve: 2 per SM (only the fraction, 1 then, is ever used)."""
    curve = [int(b) for b, _ in cluster.fused_block_bandwidth]
    per_sm = max(curve) / cluster.gpu.sm_count if curve else 2.0
    return sms * per_sm


def fused_collective_bandwidth(cluster: Cluster, blocks: float,
                               group_size: int | None = None) -> tuple[float, float]:
    """(load, store) peer bandwidth of a fused collective kernel launched with `blocks`
    thread blocks (see `fused_block_fraction`); across nodes still capped by the NICs."""
    load, store, _ = fused_link_bandwidths(cluster, group_size, blocks)
    return load, store


def fused_link_bandwidths(cluster: Cluster, group_size, blocks: float | None = None,
                          unroll: int = 1) -> tuple[float, float, str]:
    """(load, store) bandwidth of a fused kernel's peer accesses and the link they use.

    Inside a node the generated kernels load and store peer memory over NVLink directly, at
    the rates measured for such kernels (scaled by `fused_block_fraction` when the kernel runs
    `blocks` blocks, None: its full grid; and by `fused_unroll_factor` for its unroll: the
    two calibrated curves are taken as independent); across nodes they are limited like a
    ring by gpus_per_node NICs."""
    path = group_path(cluster, group_size)
    scale = 1.0 if blocks is None else fused_block_fraction(cluster, blocks)
    if unroll != 1:
        scale *= fused_unroll_factor(cluster, unroll)
    load = cluster.peer_load_bandwidth_Bps * scale
    store = cluster.peer_store_bandwidth_Bps * scale
    if path.link == "nic":
        return min(load, path.bandwidth_Bps), min(store, path.bandwidth_Bps), "nic"
    return load, store, "nvlink"


def fused_comm_time(rs_nbytes, ag_nbytes, P, cluster: Cluster, group_size=None,
                    blocks: float | None = None, push: bool = False, unroll: int = 1):
    """Link time of a fused kernel's communication: a reduce-scatter by peer loads of
    `rs_nbytes` (by peer stores into the owners' staging buffers when `push`, the codegen
    option collective_mode) and all-gathers by peer stores of `ag_nbytes` (total gathered
    buffer sizes), by a kernel of `blocks` thread blocks (None: its full grid) generated with
    `unroll` vectors per thread per iteration.

    Loads of my slice from peers use my inbound and their outbound directions, stores the
    reverse, so both phases occupy both directions and add up."""
    load_bw, store_bw, _ = fused_link_bandwidths(cluster, group_size if group_size is not None
                                                 else (int(P) if is_number(P) else None),
                                                 blocks, unroll)
    rs_bw = store_bw if push else load_bw
    return (P - 1) * rs_nbytes / P / rs_bw + (P - 1) * ag_nbytes / P / store_bw


def copy_engine_comm_time(rs_nbytes, ag_nbytes, P, cluster: Cluster, group_size=None):
    """Link time of a fused collective whose bytes copy engines move (ir.Fused.engine ==
    "copy"): every rank pulls its slice's pieces from the P - 1 others and pushes its
    result's slice to them, all over the node's NVLink at the copy engines' rate
    (`Cluster.copy_engine_bandwidth_Bps`; the peer store rate where it is not known). Pulls
    and pushes both load every direction, so they add up. Copy engines reach peers of the
    node only (CUDA IPC): a group across nodes is an error."""
    path = group_path(cluster, group_size if group_size is not None
                      else (int(P) if is_number(P) else None))
    if path.link == "nic":
        raise NotOnThisCluster(f"copy engines move data between GPUs of one node, got a group of "
                             f"{group_size} GPUs on nodes of {cluster.gpus_per_node}; keep a "
                             "fused collective across nodes on the SMs (drop copy_engines)")
    bw = cluster.copy_engine_bandwidth_Bps or cluster.peer_store_bandwidth_Bps
    return (P - 1) * (rs_nbytes + ag_nbytes) / P / bw


def fused_latency_s(cluster: Cluster, group_size=None):
    """Fixed cost of a fused collective kernel: launch, the two barriers of a symmetric
    window (each one flag round trip over the link), and the cluster's measured fixed cost of
    such a kernel beyond those (`Cluster.fused_fixed_s`, 0 unless calibrated)."""
    path = group_path(cluster, group_size)
    return cluster.gpu.launch_latency_s + 4 * path.hop_latency_s + cluster.fused_fixed_s
