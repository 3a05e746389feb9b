"""Hardware specifications: GPUs, links, NCCL tuning constants and clusters, with presets.

Every figure carries its source in a comment. Datasheet figures are peaks; where a measured
number exists (the h200x4 baselines, /work/shared/device/baselines-h200x4.md, copied into
cost_model/data/) the preset uses the measured, achievable figure, because the cost model
predicts achieved time. A profile file (JSON or YAML) replaces any field:

    {"base": "h200x4", "gpu": {"hbm_bandwidth_Bps": 3.9e12}, "nvlink": {"latency_s": 1e-6}}
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cost_model.validate import profile_text, profile_value
from workbench.errors import HardwareError
from workbench.placement import Placement

# Byte classes of a kernel with 2-byte arrays that may stream at rates of their own
# (GPU.hbm_f16_kernel_Bps): reads and writes of its 4-byte and of its 2-byte arrays.
F16_KERNEL_CLASSES = ("f32_read", "f16_read", "f32_write", "f16_write")


@dataclass(frozen=True, slots=True)
class GPU:
    """One GPU: SMs, achievable HBM bandwidth, peak arithmetic rates and kernel launch cost."""

    name: str
    sm_count: int
    hbm_bandwidth_Bps: float  # achievable streaming bandwidth, not the datasheet peak
    hbm_capacity_bytes: float
    # Peak FLOP/s per dtype name: ("f32", 67e12) is the CUDA-core rate, f16/bf16 the dense
    # tensor-core rate (MatMul uses these; elementwise kernels are memory bound anyway).
    peak_flops: tuple[tuple[str, float], ...]
    launch_latency_s: float  # gap between back-to-back kernels on one stream
    # Optional split of HBM bandwidth into a read and a write rate: an elementwise kernel that
    # reads R and writes W bytes streams for R / read + W / write seconds. Calibrated from one
    # kernel streaming k arrays (k = 2..9, 1 GiB; cost_model/calibration/): on H200 the write
    # share, not the array count, sets its bandwidth (6 in + 1 out 4.08 TB/s, 4 in + 3 out
    # 3.82, 1 in + 1 out 3.69). None (the presets): every byte at hbm_bandwidth_Bps.
    hbm_read_bandwidth_Bps: float | None = None
    hbm_write_bandwidth_Bps: float | None = None
    # Optional rates of a kernel that has 2-byte arrays (f16, bf16), per byte class (f32_read,
    # f16_read, f32_write, f16_write): such a kernel runs 8 elements per lane (codegen's vec =
    # 16 // smallest element), so an f32 array moves 32 bytes per lane in two 16-byte accesses.
    # A class not listed streams at the f32 kernels' rate above. Fitted from mixed f16/f32
    # stream kernels (cost_model/calibration/, `fit_hbm_f16_kernels`), a class only where
    # the data needs it: on 2x H200 f32 writes, at 2.43 TB/s against 3.56 in f32 kernels.
    # Empty (the presets): every kernel at the read/write split. It refines the split, so it
    # needs it.
    hbm_f16_kernel_Bps: tuple[tuple[str, float], ...] = ()
    # Time a Dropout adds per element to the kernel that computes it (the mask's integer hash
    # of the element index), on top of the element's bytes: the one per-op cost that the
    # studies meet and the roofline misses. Measured on one H200 (GPU run 17,
    # studies/elementwise_ops.py): the f16 bias + dropout + residual kernel on
    # 8192 x 12288 took 0.222 ms against 0.179 without the dropout, 0.043 ms over 100.7M
    # elements. IEEE divisions and square roots cost 0-4 % in Adam's and LAMB's updates there
    # and are left out. 0: not measured.
    dropout_element_s: float = 0.0

    def __post_init__(self):
        if not self.dropout_element_s >= 0:
            raise HardwareError(f"gpu.dropout_element_s must be a time >= 0 (seconds per "
                                f"element), got {self.dropout_element_s!r}")
        if (self.hbm_read_bandwidth_Bps is None) != (self.hbm_write_bandwidth_Bps is None):
            given = "hbm_read_bandwidth_Bps" if self.hbm_write_bandwidth_Bps is None \
                else "hbm_write_bandwidth_Bps"
            raise HardwareError(f"gpu.hbm_read_bandwidth_Bps and gpu.hbm_write_bandwidth_Bps "
                                f"must be given together, got only {given}")
        for name, rate in self.hbm_f16_kernel_Bps:
            if name not in F16_KERNEL_CLASSES or not rate > 0:
                raise HardwareError(f"gpu.hbm_f16_kernel_Bps must map byte classes "
                                    f"({', '.join(F16_KERNEL_CLASSES)}) to positive rates, got "
                                    f"{name!r}: {rate!r}")
        if self.hbm_f16_kernel_Bps and self.hbm_read_bandwidth_Bps is None:
            raise HardwareError("gpu.hbm_f16_kernel_Bps must come with gpu.hbm_read_bandwidth_Bps "
                                "and gpu.hbm_write_bandwidth_Bps (it refines that split), got no "
                                "read/write split")

    def hbm_time_s(self, hbm_bytes, write_bytes=None, f16_read_bytes=0, f16_write_bytes=0):
        """Time to stream `hbm_bytes` of which `write_bytes` are writes (None: unknown, or no
        read/write split in this spec: all at hbm_bandwidth_Bps). `f16_read_bytes` and
        `f16_write_bytes` (of the reads and of the writes) are bytes of 2-byte elements: a
        kernel with any streams at `hbm_f16_kernel_Bps` where the spec has rates there."""
        if write_bytes is None or self.hbm_read_bandwidth_Bps is None:
            return hbm_bytes / self.hbm_bandwidth_Bps
        reads = hbm_bytes - write_bytes
        if not self.hbm_f16_kernel_Bps or f16_read_bytes + f16_write_bytes == 0:
            return reads / self.hbm_read_bandwidth_Bps + write_bytes / self.hbm_write_bandwidth_Bps
        rate = {"f32_read": self.hbm_read_bandwidth_Bps, "f16_read": self.hbm_read_bandwidth_Bps,
                "f32_write": self.hbm_write_bandwidth_Bps,
                "f16_write": self.hbm_write_bandwidth_Bps, **dict(self.hbm_f16_kernel_Bps)}
        return ((reads - f16_read_bytes) / rate["f32_read"] + f16_read_bytes / rate["f16_read"]
                + (write_bytes - f16_write_bytes) / rate["f32_write"]
                + f16_write_bytes / rate["f16_write"])

    def flops_for(self, dtype_name: str) -> float:
        """Peak FLOP/s for a dtype name (f16, bf16, f32, i32); unknown names use f32's rate."""
        table = dict(self.peak_flops)
        return table.get(dtype_name, table["f32"])


@dataclass(frozen=True, slots=True)
class Link:
    """One direction of a link of one GPU: bandwidth per direction and one-hop latency."""

    name: str
    bandwidth_Bps: float
    latency_s: float


@dataclass(frozen=True, slots=True)
class Protocol:
    """An NCCL protocol (LL, LL128, Simple): fixed latency, per-step latency, and the fraction
    of link bandwidth it reaches (LL sends 8-byte flag+data words: at most half)."""

    name: str
    base_latency_s: float
    step_latency_s: float
    efficiency: float


@dataclass(frozen=True, slots=True)
class NcclTuning:
    """Constants of the NCCL collective model (alpha-beta per algorithm and protocol).

    NCCL runs a collective on `channels` rings/trees, each driven by one thread block that
    occupies one SM for the whole collective, and uses fewer channels for small buffers (at
    least `min_channel_bytes` of bus traffic per channel).
    """

    protocols: tuple[Protocol, ...]
    max_channels: int
    min_channel_bytes: float
    allreduce_bandwidth_factor: float  # AllReduce vs RS/AG bus bandwidth (calibration/nccl.py)
    host_overhead_s: float  # per-call host cost (torch.distributed + NCCL enqueue)
    # Extra fixed latency per collective kind (the reduction kernels' set-up); fitted.
    collective_latency_s: tuple[tuple[str, float], ...] = ()

    def kind_latency_s(self, kind: str) -> float:
        """The extra fixed latency of a collective kind (0 when not listed)."""
        return dict(self.collective_latency_s).get(kind, 0.0)


@dataclass(frozen=True, slots=True)
class Fabric:
    """The network between NVLink domains (nodes): a fat tree of `tiers` levels of switches
    with `switch_radix` ports each. Rail-optimized (DGX SuperPOD reference architecture): GPU
    i of every node has its NIC on rail i, and each rail is a fat tree of its own, so a ring
    or tree that joins the same GPU of several nodes stays on one rail. `nodes_per_leaf`
    nodes share a rail's leaf switch (a scalable unit); traffic between nodes of different
    leaves climbs to the spine, where a leaf has 1 / `oversubscription` of its downlink
    bandwidth as uplinks. `switch_latency_s` is one switch hop."""

    kind: str = "rail-optimized"
    tiers: int = 3  # the default holds 65536 nodes of 64-port switches: no limit in practice
    switch_radix: int = 64
    nodes_per_leaf: int = 32
    oversubscription: float = 1.0
    switch_latency_s: float = 0.0

    def __post_init__(self):
        if self.kind not in FABRIC_KINDS:
            raise HardwareError(f"fabric.kind must be one of {', '.join(FABRIC_KINDS)}, got "
                                f"{self.kind!r}; rail-optimized is what DGX SuperPODs use")
        for name in ("tiers", "switch_radix", "nodes_per_leaf"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise HardwareError(f"fabric.{name} must be a positive integer, got {value!r}; "
                                    "fix the profile's fabric section")
        if not self.oversubscription >= 1:
            raise HardwareError(f"fabric.oversubscription must be >= 1 (downlink : uplink "
                                f"bandwidth of a leaf; 1 is non-blocking), got "
                                f"{self.oversubscription!r}; use 1 for a non-blocking fabric")
        if not self.switch_latency_s >= 0:
            raise HardwareError(f"fabric.switch_latency_s must be a time >= 0, got "
                                f"{self.switch_latency_s!r}; use 0 to leave it to NCCL's "
                                "network latency")

    @property
    def max_nodes(self) -> int:
        """Nodes a fat tree of `tiers` levels of k-port switches holds per rail: 2 (k/2)^tiers
        end points (k/2 ports down and k/2 up on every switch but the top level's, which uses
        all k down; Al-Fares et al., SIGCOMM 2008, for 3 tiers: k^3 / 4)."""
        half = self.switch_radix // 2
        return 2 * half ** self.tiers if self.tiers > 1 else self.switch_radix

    def crosses_spine(self, nodes: int) -> bool:
        """Whether a group over `nodes` nodes spans more than one leaf of its rail."""
        return nodes > self.nodes_per_leaf


FABRIC_KINDS = ("rail-optimized", "fat-tree")


# Dtypes that may have NCCL constants of their own (Cluster.nccl_dtypes); f32 uses Cluster.nccl.
NCCL_DTYPES = ("f16", "bf16")


@dataclass(frozen=True, slots=True)
class Cluster:
    """`nodes` nodes of `gpus_per_node` GPUs. A node is one NVLink (NVSwitch) domain: 8 GPUs
    of a DGX, 16 of a DGX-2, 72 of a GB200 NVL72 rack. Each node has `nics_per_node` NICs
    (0: one per GPU) of `nic` bandwidth into the `fabric`."""

    name: str
    gpu: GPU
    gpus_per_node: int
    nodes: int
    nvlink: Link  # per GPU, per direction, into the node's NVSwitch domain
    nic: Link  # per GPU, per direction, into the inter-node network
    # What a kernel reaches with direct peer loads / stores over NVLink, all GPUs at once
    # (the fused kernels move data this way, not through NCCL).
    peer_load_bandwidth_Bps: float
    peer_store_bandwidth_Bps: float
    nccl: NcclTuning
    # Fixed cost of a fused collective kernel beyond the launch gap and its barriers' hop
    # latencies (grid start, flag handshakes, the first chunk's pipeline fill). 0 in the presets
    # (as before); fitted by cost_model/calibration/ from the fused AllReduce at 4 MiB..1 GiB
    # (2x H200: 33 us at 4 MiB against 19 us without it).
    fused_fixed_s: float = 0.0
    # NCCL send/recv inside a node (a pipeline's Send between stages): its fixed latency beyond
    # NCCL's per-call host cost, and its bandwidth. 0 in the presets: priced as NCCL's Simple
    # protocol over the link (Simple base latency + link latency; link bandwidth x Simple
    # efficiency). Fitted by calibration from its send/recv sweep (`p2p`; 2x H200: 369 GB/s
    # at 1 GiB, where the ring collectives' Simple efficiency gave 291 GB/s).
    p2p_latency_s: float = 0.0
    p2p_bandwidth_Bps: float = 0.0
    # NCCL constants fitted to the collectives of one dtype (f16, bf16), for collectives of
    # that dtype; a dtype not listed (f32 always) uses `nccl`. Empty in the presets; filled by
    # calibration when it measured NCCL in that dtype. A profile gives
    # {"f16": {<NcclTuning fields>}}; fields it leaves out come from `nccl`.
    nccl_dtypes: tuple[tuple[str, NcclTuning], ...] = field(
        default=(), metadata={"template": "nccl"})
    # Peer bandwidth of a fused collective kernel launched with fewer blocks, as a fraction of
    # its full grid's (block count, as a string -> fraction; the largest count is the runtime's
    # full grid, 2 blocks per SM). Measured by calibration (the fused AllReduce kernel at
    # 256 MiB with grids of 4 .. 2 x SMs blocks; 2x H200: 4 blocks 0.17, 16 0.62, 33 0.86,
    # 132 0.97); empty in the presets: bandwidth does not depend on blocks.
    # `cost_model.collectives.fused_collective_bandwidth` reads it.
    fused_block_bandwidth: tuple[tuple[str, float], ...] = ()
    # What the GPU's copy engines reach peer to peer over NVLink (cuMemcpyDtoDAsync between
    # CUDA-IPC-mapped buffers of two GPUs), per GPU per direction with every direction busy:
    # how a fused collective moved by copy engines (Fused.engine == "copy") moves its bytes.
    # 2x H200 (benchmarks/gpu/link_probe.py, GPU run 11, three machines): 389-392 GB/s both
    # ways at once, against 363-366 for SM peer stores; copy engines keep that rate beside an
    # HBM-bound kernel. 0: not known, priced at the peer store bandwidth.
    copy_engine_bandwidth_Bps: float = 0.0
    # NICs of a node into the fabric: 0 means one per GPU (DGX H100: 8 ConnectX-7 for 8 GPUs);
    # a DGX-2 has 8 for its 16 GPUs, so each GPU gets half a NIC.
    nics_per_node: int = 0
    fabric: Fabric = Fabric()
    # The node's NVSwitch reduces in the switch (NVLink SHARP): NCCL runs AllReduce inside a
    # node as NVLS (NCCL_NVLS_ENABLE's default where the switch supports it; Hopper and newer
    # with NVSwitch: DGX H100/H200). False where NVLS does not exist (no NVSwitch: the 4-GPU
    # H200 board, whose fitted constants already are what NCCL ran there) or is not modelled.
    nvls: bool = False

    def __post_init__(self):
        self._check_topology()
        for name, _ in self.nccl_dtypes:
            if name not in NCCL_DTYPES:
                raise HardwareError(f"hardware profile field nccl_dtypes must name one of "
                                    f"{', '.join(NCCL_DTYPES)} (f32 collectives use nccl), "
                                    f"got {name!r}")
        for blocks, fraction in self.fused_block_bandwidth:
            if not str(blocks).isdigit() or int(blocks) < 1 or not fraction > 0:
                raise HardwareError(f"hardware profile field fused_block_bandwidth must map "
                                    f"block counts (positive integers) to positive fractions "
                                    f"of the full grid's bandwidth, got {blocks!r}: "
                                    f"{fraction!r}")

    def _check_topology(self) -> None:
        """Refuse a topology that cannot run anything: no GPUs, links without bandwidth, more
        nodes than the fabric holds. Each message names the field, the condition, the fix."""
        for name in ("gpus_per_node", "nodes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise HardwareError(f"{name} must be a positive integer, got {value!r}; fix "
                                    "the profile (or --nodes)")
        for name in ("nvlink", "nic"):
            link = getattr(self, name)
            if not isinstance(link, Link):
                raise HardwareError(f"{name} must be a link with bandwidth_Bps and latency_s, "
                                    f"got {link!r}; give both in the profile")
            if not _positive(link.bandwidth_Bps):
                raise HardwareError(f"{name}.bandwidth_Bps must be a positive number (bytes per "
                                    f"second per direction), got {link.bandwidth_Bps!r}; give "
                                    "the link's bandwidth in the profile")
            if not _non_negative(link.latency_s):
                raise HardwareError(f"{name}.latency_s must be a time >= 0, got "
                                    f"{link.latency_s!r}; give the link's latency in seconds")
        if not isinstance(self.nics_per_node, int) or self.nics_per_node < 0:
            raise HardwareError(f"nics_per_node must be an integer >= 0 (0: one NIC per GPU), "
                                f"got {self.nics_per_node!r}; fix the profile")
        if self.nodes > self.fabric.max_nodes:
            raise HardwareError(f"fabric must hold the cluster's {self.nodes} nodes, got a "
                                f"{self.fabric.tiers}-tier fabric of {self.fabric.switch_radix}-"
                                f"port switches that holds {self.fabric.max_nodes}; use fewer "
                                "--nodes or a profile with more fabric.tiers")

    @property
    def world_size(self) -> int:
        """Number of GPUs in the cluster."""
        return self.gpus_per_node * self.nodes

    @property
    def nic_per_gpu_Bps(self) -> float:
        """Each GPU's share of its node's NIC bandwidth, per direction."""
        if not self.nics_per_node:
            return self.nic.bandwidth_Bps
        return self.nic.bandwidth_Bps * self.nics_per_node / self.gpus_per_node

    def node_injection_Bps(self, nodes: int) -> float:
        """The bus bandwidth the network gives a ring or tree over `nodes` nodes: NCCL spreads
        its channels over every NIC of a node (each channel leaves the node through its own
        NIC), so all of a node's NICs carry one collective; divided by the fabric's
        oversubscription where the group spans more than one leaf of its rail."""
        bw = self.gpus_per_node * self.nic_per_gpu_Bps
        if self.fabric.crosses_spine(nodes):
            bw /= self.fabric.oversubscription
        return bw

    def for_dtype(self, dtype: str) -> Cluster:
        """This cluster with the NCCL constants measured for collectives of `dtype` (a dtype
        name: f16, bf16, f32) where it has them, else this cluster unchanged."""
        tuning = dict(self.nccl_dtypes).get(dtype)
        return self if tuning is None else dataclasses.replace(self, nccl=tuning)

    def placement(self, sizes) -> Placement:
        """What the core's verifier and autotuner need of this cluster: its nodes of
        gpus_per_node GPUs (one NVLink domain each) and the bound sizes (`sizes`: name ->
        int, at least the group sizes such as P)."""
        return Placement.of(self.name, self.nodes, self.gpus_per_node, sizes)

    def with_nodes(self, nodes: int) -> Cluster:
        """The same cluster with `nodes` nodes (linked by each GPU's NIC)."""
        if not isinstance(nodes, int) or nodes < 1:
            raise HardwareError(f"--nodes must be a positive integer, got {nodes!r}")
        name = self.name if nodes == 1 else f"{self.name.split('*')[0]}*{nodes}"
        return dataclasses.replace(self, nodes=nodes, name=name)


# ---------------------------------------------------------------- NCCL constants

# Fitted by cost_model/calibration/nccl.py to the measured NCCL AR/RS/AG table on 4x H200
# (data/nccl_h200x4.csv): worst relative error printed by `python -m cost_model.calibration.nccl`.
# The protocol efficiencies and latencies land in the ranges NCCL's own tuning model uses
# (src/graph/tuning.cc: LL ~50% of bandwidth, LL128 ~92%, Simple the most; microsecond
# latencies), but they are fitted values, not NCCL's.
H200_NCCL = NcclTuning(
    protocols=(
        Protocol("LL", base_latency_s=9.98e-6, step_latency_s=0.43e-6, efficiency=0.20),
        Protocol("LL128", base_latency_s=12.66e-6, step_latency_s=3.77e-6, efficiency=0.536),
        Protocol("Simple", base_latency_s=0.22e-6, step_latency_s=4.10e-6, efficiency=0.685),
    ),
    max_channels=32,  # NCCL 2.28 on NVSwitch systems uses up to 32 channels (NCCL_MAX_NCHANNELS)
    # NCCL gives each channel at least ~64 KiB of bus traffic (chosen, not fitted): the number
    # of channels sets how many SMs the communication kernel holds.
    min_channel_bytes=65536,
    allreduce_bandwidth_factor=0.951,
    host_overhead_s=45.1e-6,
    collective_latency_s=(("allreduce", 6.54e-6), ("reducescatter", 6.91e-6),
                          ("allgather", 0.0), ("broadcast", 0.0), ("reduce", 6.91e-6)),
)

# ---------------------------------------------------------------- presets

# 400 Gb/s per GPU (ConnectX-7 NDR, one per GPU, as DGX H100 has) = 50 GB/s per direction.
# The issue fixes this NIC for the multi-node form of every preset. Latency: one InfiniBand
# switch hop plus the NIC, ~3 us (NVIDIA ConnectX-7 product brief gives sub-600 ns port-to-port;
# NCCL's net latency in tuning.cc is a few us).
NIC_400G = Link("nic-400G", bandwidth_Bps=50e9, latency_s=3e-6)


# GPU run 17 (one H200): 0.222 - 0.179 ms over 8192 x 12288 elements (see GPU.dropout_element_s).
H200_DROPOUT_ELEMENT_S = (0.222e-3 - 0.179e-3) / (8192 * 12288)


def _h200x4() -> Cluster:
    gpu = GPU(
        name="H200",
        sm_count=132,  # H200 SXM = GH100 with 132 SMs (NVIDIA H200 datasheet)
        # Datasheet peak is 4.8 TB/s; torch's fused Adam reached 3.46 TB/s and a copy 4.07 TB/s
        # on this machine (baselines-h200x4.md). Elementwise kernels behave like the Adam kernel.
        hbm_bandwidth_Bps=3.46e12,
        hbm_capacity_bytes=141e9,  # 141 GB HBM3e (datasheet; nvidia-smi 143771 MiB)
        # H200 SXM datasheet: FP32 67 TFLOPS, FP16/BF16 tensor 989 TFLOPS dense (1979 sparse).
        peak_flops=(("f32", 67e12), ("f16", 989e12), ("bf16", 989e12)),
        # Back-to-back launches on one stream: ~4 us (CUDA launch overhead; e.g. NVIDIA's
        # "CUDA Graphs" blog measures 2-4 us per kernel without graphs).
        launch_latency_s=4e-6,
        dropout_element_s=H200_DROPOUT_ELEMENT_S,
    )
    return Cluster(
        name="h200x4",
        gpu=gpu,
        gpus_per_node=4,
        nodes=1,
        # NV18: 18 links x 26.562 GB/s = 478 GB/s per direction (nvidia-smi nvlink -s on the
        # machine, baselines-h200x4.md). Latency ~1 us per NVSwitch hop (NVLink4 whitepaper).
        nvlink=Link("nvlink4-nv18", bandwidth_Bps=478e9, latency_s=1e-6),
        nic=NIC_400G,
        # A grid-stride kernel with float4 peer loads over NVLink, all 4 GPUs at once: 327 GB/s
        # inbound; with float4 peer stores: 358 GB/s outbound (baselines-h200x4.md).
        peer_load_bandwidth_Bps=327e9,
        peer_store_bandwidth_Bps=358e9,
        nccl=H200_NCCL,
        # Copy engines both ways at once between two H200s of one HGX board (NV18 through its
        # NVSwitches, as here): 391 GB/s per direction (link probe, GPU run 11).
        copy_engine_bandwidth_Bps=391e9,
    )


def _h100x8() -> Cluster:
    gpu = GPU(
        name="H100",
        sm_count=132,  # H100 SXM5: 132 SMs (NVIDIA H100 datasheet / Hopper whitepaper)
        # Datasheet 3.35 TB/s HBM3; scaled by the achieved/peak ratio measured on H200
        # (3.46 / 4.8 = 0.72), since no H100 measurement is at hand.
        hbm_bandwidth_Bps=3.35e12 * 0.72,
        hbm_capacity_bytes=80e9,
        # H100 SXM5 datasheet: FP32 67 TFLOPS, FP16/BF16 tensor 989 TFLOPS dense.
        peak_flops=(("f32", 67e12), ("f16", 989e12), ("bf16", 989e12)),
        launch_latency_s=4e-6,
        # The H200's: the same GH100 chip, SM count and clocks (not measured on an H100).
        dropout_element_s=H200_DROPOUT_ELEMENT_S,
    )
    return Cluster(
        name="h100x8",
        gpu=gpu,
        gpus_per_node=8,  # DGX H100: 8 GPUs, 4 NVSwitch gen3 chips (DGX H100 user guide)
        nodes=1,
        # NVLink4, 18 links: 900 GB/s bidirectional = 450 GB/s per direction (datasheet).
        nvlink=Link("nvlink4", bandwidth_Bps=450e9, latency_s=1e-6),
        nic=NIC_400G,  # DGX H100: 8x ConnectX-7 400 Gb/s, one per GPU
        # Peer load/store efficiency as measured on H200 (327/478, 358/478), applied to 450.
        peer_load_bandwidth_Bps=450e9 * 327 / 478,
        peer_store_bandwidth_Bps=450e9 * 358 / 478,
        copy_engine_bandwidth_Bps=450e9 * 391 / 478,  # H200's copy-engine efficiency
        nccl=H200_NCCL,  # same NVLink4/NVSwitch generation as the calibrated h200x4
    )


def _a100x8() -> Cluster:
    gpu = GPU(
        name="A100",
        sm_count=108,  # A100 SXM4: 108 SMs (Ampere GA100 whitepaper)
        hbm_bandwidth_Bps=2.039e12 * 0.72,  # 80 GB HBM2e 2,039 GB/s (datasheet), x 0.72 as H200
        hbm_capacity_bytes=80e9,
        # A100 datasheet: FP32 19.5 TFLOPS, FP16/BF16 tensor 312 TFLOPS dense.
        peak_flops=(("f32", 19.5e12), ("f16", 312e12), ("bf16", 312e12)),
        launch_latency_s=4e-6,
    )
    return Cluster(
        name="a100x8",
        gpu=gpu,
        gpus_per_node=8,  # DGX A100: 8 GPUs, 6 NVSwitch gen2 (DGX A100 user guide)
        nodes=1,
        # NVLink3: 12 links x 25 GB/s = 300 GB/s per direction (600 GB/s bidirectional, datasheet)
        nvlink=Link("nvlink3", bandwidth_Bps=300e9, latency_s=1e-6),
        nic=NIC_400G,
        peer_load_bandwidth_Bps=300e9 * 327 / 478,
        peer_store_bandwidth_Bps=300e9 * 358 / 478,
        copy_engine_bandwidth_Bps=300e9 * 391 / 478,  # H200's copy-engine efficiency
        nccl=H200_NCCL,
    )


def _v100x16() -> Cluster:
    gpu = GPU(
        name="V100",
        sm_count=80,  # V100 SXM3: 80 SMs (Volta whitepaper)
        hbm_bandwidth_Bps=900e9 * 0.72,  # 32 GB HBM2, 900 GB/s (datasheet), x 0.72 as H200
        hbm_capacity_bytes=32e9,
        # V100 SXM3 (DGX-2) datasheet: FP32 15.7 TFLOPS, FP16 tensor 125 TFLOPS; no bf16 units.
        peak_flops=(("f32", 15.7e12), ("f16", 125e12), ("bf16", 15.7e12)),
        launch_latency_s=5e-6,
    )
    return Cluster(
        name="v100x16",
        gpu=gpu,
        gpus_per_node=16,  # DGX-2: 16 V100 on 12 NVSwitches (the CoCoNet paper's machine)
        nodes=1,
        # NVLink2: 6 links x 25 GB/s = 150 GB/s per direction per GPU (DGX-2 datasheet).
        nvlink=Link("nvlink2", bandwidth_Bps=150e9, latency_s=1.5e-6),
        nic=NIC_400G,  # the multi-node form (the real DGX-2 had 8x 100 Gb/s EDR)
        peer_load_bandwidth_Bps=150e9 * 327 / 478,
        peer_store_bandwidth_Bps=150e9 * 358 / 478,
        copy_engine_bandwidth_Bps=150e9 * 391 / 478,  # H200's copy-engine efficiency
        nccl=H200_NCCL,
    )


# ---------------------------------------------------------------- cluster presets
#
# Machines as users have them, many nodes on a fabric. One node of each is an NVLink domain;
# `--nodes K` sets how many. NCCL inside a node keeps the constants fitted on 4x H200
# (H200_NCCL); across nodes cost_model.nccl_model prices NCCL as its own tuning model does.

# DGX SuperPOD (H100) reference architecture (NVIDIA RA-11333): rail-optimized InfiniBand NDR
# fat tree of QM9700 switches (64 ports of 400 Gb/s), scalable units of 32 DGX nodes with one
# leaf per rail, non-blocking (1:1). Three tiers hold 2 x 32^3 = 65536 nodes per rail.
NDR_RAIL_FABRIC = Fabric(kind="rail-optimized", tiers=3, switch_radix=64, nodes_per_leaf=32,
                         oversubscription=1.0)


def _nvswitch_nccl(tuning: NcclTuning, nvlink_Bps: float) -> NcclTuning:
    """NCCL's constants for an 8-GPU NVSwitch node of Hopper GPUs, from the 4-GPU H200 fit:
    the ring's Simple bandwidth is what NCCL's topology gives a GPU there, 18 NVLinks x 20.6
    GB/s (NVIDIA/nccl src/graph/topo.h SM90_NVLINK_BW) = 370.8 GB/s, which NCCL's maintainers
    give as the effective bus bandwidth of 8x H100 for every ring collective, AllReduce
    included (NVIDIA/nccl-tests#212: "NCCL can get an effective NVLink bandwidth of 370GB/s,
    which you can observe as BusBw when running non-allreduce operations, or when running
    with NCCL_ALGO=RING"). The fit's 0.685 x 450 = 308 GB/s (and AllReduce x 0.951) came from
    the 4-GPU board, whose rings use fewer links. LL128 carries 120 of each 128 bytes: NCCL
    models it at 0.92 of Simple (tuning.cc), where the board's fit had 0.78; LL keeps the fit
    (0.2 x 450 = 90 GB/s, NCCL's llMaxBws Hopper cap 87.7). Design note 38."""
    simple = NVSWITCH_RING_BPS / nvlink_Bps  # of the preset's NVLink bandwidth
    eff = {"Simple": simple, "LL128": 0.92 * simple}
    protocols = tuple(dataclasses.replace(p, efficiency=eff[p.name]) if p.name in eff else p
                      for p in tuning.protocols)
    return dataclasses.replace(tuning, protocols=protocols, allreduce_bandwidth_factor=1.0)


NVSWITCH_RING_BPS = 18 * 20.6e9


def _dgx_h100() -> Cluster:
    # DGX H100 user guide: 8x H100 SXM5 80 GB on 4 NVSwitch gen3 chips; 8 single-port
    # ConnectX-7 400 Gb/s InfiniBand NICs for the compute fabric, one per GPU. NVSwitch gen3
    # reduces in the switch (NVLS); NCCL's ring constants for an NVSwitch node.
    base = _h100x8()
    return dataclasses.replace(base, name="dgx-h100", nic=NIC_400G, nics_per_node=8,
                               fabric=NDR_RAIL_FABRIC, nvls=True,
                               nccl=_nvswitch_nccl(base.nccl, base.nvlink.bandwidth_Bps))


def _dgx_h200() -> Cluster:
    base = _h200x4()
    # DGX H200 datasheet: 8x H200 141 GB, NVLink 900 GB/s bidirectional per GPU (450 GB/s per
    # direction; the h200x4 machine's NV18 reads 478: nvidia-smi counts 26.56 GB/s lanes),
    # 4 NVSwitch, 8x ConnectX-7 400 Gb/s (8 single-port OSFP) for the compute fabric.
    # (NVLink of 450 GB/s per direction like H100's: the same NVSwitch node constants.)
    return dataclasses.replace(base, name="dgx-h200", gpus_per_node=8, nic=NIC_400G,
                               nics_per_node=8, fabric=NDR_RAIL_FABRIC, nvls=True,
                               nccl=_nvswitch_nccl(base.nccl, base.nvlink.bandwidth_Bps))


def _gb200_nvl72() -> Cluster:
    gpu = GPU(
        name="B200",
        # GB200's Blackwell GPU: 148 SMs (NVIDIA Blackwell architecture technical brief).
        sm_count=148,
        # GB200 NVL72 datasheet: 576 TB/s HBM3e over 72 GPUs = 8 TB/s each; x 0.72, the
        # achieved/peak ratio measured on H200 (no Blackwell measurement at hand).
        hbm_bandwidth_Bps=8e12 * 0.72,
        # GB200 NVL72 datasheet: 13.4 TB HBM3e over 72 GPUs = 186 GB each.
        hbm_capacity_bytes=13.4e12 / 72,
        # GB200 NVL72 datasheet (dense = half the sparse figures): FP32 5,760 TFLOPS / 72 = 80
        # TFLOPS per GPU; FP16/BF16 tensor 360 PFLOPS sparse / 72 / 2 = 2.5 PFLOPS dense.
        peak_flops=(("f32", 80e12), ("f16", 2.5e15), ("bf16", 2.5e15)),
        launch_latency_s=4e-6,  # as H200 (not measured on Blackwell)
    )
    # NVLink 5: 1.8 TB/s bidirectional per GPU = 900 GB/s per direction, every one of the 72
    # GPUs of the rack on the NVLink switch trays (GB200 NVL72 datasheet): one domain of 72.
    nvlink_Bps = 900e9
    return Cluster(
        name="gb200-nvl72",
        gpu=gpu,
        gpus_per_node=72,  # a node here is the NVLink domain: the whole rack
        nodes=1,
        nvlink=Link("nvlink5", bandwidth_Bps=nvlink_Bps, latency_s=1e-6),
        # GB200 NVL72 datasheet: 72 single-port OSFP ConnectX-7 400 Gb/s InfiniBand, one per GPU.
        nic=NIC_400G,
        nics_per_node=72,
        fabric=NDR_RAIL_FABRIC,
        # Peer load/store and copy-engine efficiency as measured on H200, applied to NVLink 5.
        peer_load_bandwidth_Bps=nvlink_Bps * 327 / 478,
        peer_store_bandwidth_Bps=nvlink_Bps * 358 / 478,
        copy_engine_bandwidth_Bps=nvlink_Bps * 391 / 478,
        nccl=H200_NCCL,
    )


def _dgx_a100() -> Cluster:
    # DGX A100 user guide: 8x A100 SXM4 80 GB, 6 NVSwitch gen2, 8 single-port ConnectX-6
    # HDR 200 Gb/s InfiniBand NICs for the compute fabric (= 25 GB/s per direction), one per GPU.
    # DGX SuperPOD (A100) reference architecture: rail-optimized HDR fat tree of QM8790
    # switches (40 ports), scalable units of 20 nodes, non-blocking.
    nic = Link("nic-200G", bandwidth_Bps=25e9, latency_s=NIC_400G.latency_s)
    fabric = Fabric(kind="rail-optimized", tiers=3, switch_radix=40, nodes_per_leaf=20,
                    oversubscription=1.0)
    return dataclasses.replace(_a100x8(), name="dgx-a100", nic=nic, nics_per_node=8,
                               fabric=fabric)


def _dgx2_v100() -> Cluster:
    # CoCoNet's cluster (Jangda et al., ASPLOS 2022, section 6): 16 NVIDIA DGX-2 nodes of 16
    # V100 32 GB on NVSwitch, linked by 8 non-blocking EDR InfiniBand (100 Gb/s = 12.5 GB/s
    # per direction) NICs per node: half a NIC per GPU. A two-tier EDR fat tree of 36-port
    # switches (Mellanox SB7800) holds 2 x 18^2 = 648 nodes.
    nic = Link("nic-100G-edr", bandwidth_Bps=12.5e9, latency_s=NIC_400G.latency_s)
    fabric = Fabric(kind="fat-tree", tiers=2, switch_radix=36, nodes_per_leaf=18,
                    oversubscription=1.0)
    return dataclasses.replace(_v100x16(), name="dgx2-v100", nic=nic, nics_per_node=8,
                               fabric=fabric)


PRESETS = {"h200x4": _h200x4, "h100x8": _h100x8, "a100x8": _a100x8, "v100x16": _v100x16,
           "dgx-h100": _dgx_h100, "dgx-h200": _dgx_h200, "gb200-nvl72": _gb200_nvl72,
           "dgx-a100": _dgx_a100, "dgx2-v100": _dgx2_v100}
# The first four are single machines (their names, sorted, lead the unknown-preset message).
MACHINE_PRESETS = ("a100x8", "h100x8", "h200x4", "v100x16")


def preset(name: str, nodes: int = 1) -> Cluster:
    """A preset cluster by name, with `nodes` nodes."""
    if name not in PRESETS:
        clusters = sorted(set(PRESETS) - set(MACHINE_PRESETS))
        raise HardwareError(f"hardware preset must be one of {', '.join(MACHINE_PRESETS)} or "
                            f"the cluster presets {', '.join(clusters)}, got {name!r}; or pass a "
                            "profile file (.json, .yaml)")
    return PRESETS[name]().with_nodes(nodes)


def load_hardware(spec: str, nodes: int = 1) -> Cluster:
    """A preset name or a profile file path (JSON or YAML) -> Cluster with `nodes` nodes."""
    path = Path(spec)
    if path.suffix.lower() in (".json", ".yaml", ".yml"):
        return load_profile(path).with_nodes(nodes) if nodes != 1 else load_profile(path)
    return preset(spec, nodes)


def load_profile(path: Path) -> Cluster:
    """Read a profile file: {"base": PRESET, <field>: value or {<subfield>: value}}."""
    if not path.is_file():
        raise HardwareError(f"hardware profile must be an existing file, got {path}")
    text = profile_text(path)
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as e:  # json and yaml raise different error types; both mean malformed
        raise HardwareError(f"hardware profile {path} must be valid "
                            f"{path.suffix.lstrip('.').upper()}, got {type(e).__name__}: {e}"
                            ) from None
    if not isinstance(data, dict):
        raise HardwareError(f"hardware profile {path} must hold a mapping of fields, got "
                            f"{type(data).__name__}")
    if not data:
        raise HardwareError(f"hardware profile {path} must set at least one field (e.g. "
                            f'{{"base": "h100x8"}}), got an empty mapping; to use a preset, pass '
                            f"its name: --hardware {', '.join(PRESETS)}")
    data = dict(data)
    base = data.pop("base", "h200x4")
    cluster = preset(str(base))
    return override(cluster, data, prefix="")


def override(obj: Any, changes: dict, prefix: str) -> Any:
    """`obj` (a frozen dataclass) with fields replaced from `changes`, recursively; a wrong
    field name or type raises HardwareError naming the field."""
    fields = {f.name: f for f in dataclasses.fields(obj)}
    new = {}
    # Tables of a field's per-name variants (metadata "template": Cluster.nccl_dtypes) come
    # last, so that their entries start from the field as this profile changed it.
    last = [k for k in changes if k in fields and fields[k].metadata.get("template")]
    for key in [k for k in changes if k not in last] + last:
        value = changes[key]
        where = f"{prefix}{key}"
        if key not in fields:
            raise HardwareError(f"hardware profile field {where} must be one of "
                                f"{', '.join(sorted(fields))}, got unknown field {key!r}")
        old = getattr(obj, key)
        template = fields[key].metadata.get("template")
        if template:
            base = new.get(template, getattr(obj, template))
            new[key] = _override_variants(old, value, where, base)
        elif dataclasses.is_dataclass(old):
            if not isinstance(value, dict):
                raise HardwareError(f"hardware profile field {where} must be a mapping of "
                                    f"{type(old).__name__} fields, got {value!r}")
            new[key] = override(old, value, f"{where}.")
        elif isinstance(old, tuple):
            new[key] = _override_tuple(old, value, where)
        elif isinstance(old, str):
            if not isinstance(value, str):
                raise HardwareError(f"hardware profile field {where} must be a string, got "
                                    f"{value!r}")
            new[key] = value
        elif isinstance(old, bool):
            if not isinstance(value, bool):
                raise HardwareError(f"hardware profile field {where} must be true or false, "
                                    f"got {value!r}")
            new[key] = value
        else:
            new[key] = profile_value(where, key, value, allow_zero=fields[key].default == 0)
    return dataclasses.replace(obj, **new)


def _override_variants(old: tuple, value: Any, where: str, base: Any) -> tuple:
    """A (name, dataclass) table from a mapping name -> {field: value}: a name already in
    the table changes its entry, a new name starts from `base` (e.g. nccl_dtypes from nccl)."""
    if not isinstance(value, dict):
        raise HardwareError(f"hardware profile field {where} must be a mapping by name, got "
                            f"{value!r}")
    table = dict(old)
    for name, sub in value.items():
        if not isinstance(sub, dict):
            raise HardwareError(f"hardware profile field {where}.{name} must be a mapping of "
                                f"{type(base).__name__} fields, got {sub!r}")
        table[str(name)] = override(table.get(str(name), base), sub, f"{where}.{name}.")
    return tuple(table.items())


def _override_tuple(old: tuple, value: Any, where: str) -> tuple:
    """Tuples in specs are (name, number) tables or tuples of named dataclasses; a profile
    gives a mapping name -> number or name -> {field: value}."""
    if not isinstance(value, dict):
        raise HardwareError(f"hardware profile field {where} must be a mapping by name, got "
                            f"{value!r}")
    if old and dataclasses.is_dataclass(old[0]):
        by_name = {item.name: item for item in old}
        for name, sub in value.items():
            if name not in by_name:
                raise HardwareError(f"hardware profile field {where}.{name} must name one of "
                                    f"{', '.join(by_name)}, got {name!r}")
            if not isinstance(sub, dict):
                raise HardwareError(f"hardware profile field {where}.{name} must be a mapping, "
                                    f"got {sub!r}")
            by_name[name] = override(by_name[name], sub, f"{where}.{name}.")
        return tuple(by_name.values())
    table = dict(old)
    for name, number in value.items():
        table[str(name)] = profile_value(f"{where}.{name}", where.rsplit(".", 1)[-1], number)
    return tuple(table.items())


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


def _non_negative(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0
