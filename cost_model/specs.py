"""Hardware specifications: GPUs, links, NCCL tuning constants, fabrics and clusters.

Frozen dataclasses with their own checks (each error names the field, what it must be, and
the fix). The presets built from them are in `cost_model.presets`, profile loading in
`cost_model.profiles`; `cost_model.hardware` is the public door to all three.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from cost_model import efficiency, nccl_model
from workbench.errors import HardwareError
from workbench.options import UNROLLS
from workbench.placement import Placement

# Compute capability by GPU name (NVIDIA's CUDA GPUs list, developer.nvidia.com/cuda-gpus):
# the longest matching prefix of the upper-cased name wins.
GPU_COMPUTE_CAPABILITY = (("V100", 70), ("A100", 80), ("A800", 80), ("H100", 90), ("H800", 90),
                          ("H200", 90), ("H20", 90), ("GH200", 90), ("B200", 100),
                          ("GB200", 100), ("B300", 103), ("GB300", 103))


def compute_capability_of(name: str) -> int:
    """The compute capability a GPU name has (GPU_COMPUTE_CAPABILITY), 0 if unknown."""
    upper = name.upper()
    best = max((prefix for prefix, _ in GPU_COMPUTE_CAPABILITY if upper.startswith(prefix)),
               key=len, default=None)
    return dict(GPU_COMPUTE_CAPABILITY)[best] if best else 0


def _finite(x) -> bool:
    """A real number (not bool, not NaN, not infinite)."""
    return (isinstance(x, (int, float)) and not isinstance(x, bool)
            and math.isfinite(float(x)))


def _check_gpu_counts(gpu) -> None:
    """The GPU's counts and rates: finite, positive, integers where counted; its compute
    capability one NCCL's tables know."""
    if not isinstance(gpu.sm_count, int) or isinstance(gpu.sm_count, bool) or gpu.sm_count < 1:
        raise HardwareError(f"gpu.sm_count must be a positive integer, got {gpu.sm_count!r}; "
                            "give the GPU's SM count in the profile")
    for name in ("hbm_bandwidth_Bps", "hbm_capacity_bytes"):
        value = getattr(gpu, name)
        if not (_finite(value) and value > 0):
            raise HardwareError(f"gpu.{name} must be a finite number > 0, got {value!r}; fix "
                                "the profile's gpu section")
    if not (_finite(gpu.launch_latency_s) and gpu.launch_latency_s >= 0):
        raise HardwareError(f"gpu.launch_latency_s must be a finite time >= 0, got "
                            f"{gpu.launch_latency_s!r}; fix the profile's gpu section")
    cc = gpu.compute_capability
    if not isinstance(cc, int) or isinstance(cc, bool) or cc < 0:
        raise HardwareError(f"gpu.compute_capability must be an integer (9.0 -> 90), got "
                            f"{cc!r}; e.g. 90 for Hopper, 100 for Blackwell")
    resolved = cc or compute_capability_of(gpu.name)
    if resolved < nccl_model.MIN_COMPUTE_CAPABILITY:
        known = ", ".join(f"{name} {value}" for name, value in nccl_model.GENERATIONS)
        got = f"{cc}" if cc else f"none for gpu.name {gpu.name!r}"
        raise HardwareError(f"gpu.compute_capability must be a GPU generation NCCL 2.28's "
                            f"tuning tables know ({known} and newer), got {got}; set "
                            f"gpu.compute_capability in the profile (e.g. 90), or use a preset")


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
    # CUDA compute capability as an integer (7.0 -> 70, 9.0 -> 90, 10.0 -> 100): NCCL picks
    # the rows of its tuning tables by it (Volta < 80 <= Ampere < 90 <= Hopper < 100 <=
    # Blackwell; tuning.cc compCapIndex), and NVLS needs 90 or more. 0: from the name
    # (GPU_COMPUTE_CAPABILITY); the presets give it.
    compute_capability: int = 0
    # GEMM and attention efficiency per shape (cost_model.efficiency: "gemm:bf16:MxNxK" ->
    # achieved / peak_flops), a full grid per kind and dtype, interpolated in log space; a
    # kind and dtype without entries keep the one-ratio rule (cost_model.training). Presets
    # carry cited figures, `workbench calibrate --step-table` measures one (decision 105).
    efficiency_table: tuple[tuple[str, float], ...] = ()
    # Host time to issue one kernel launch from a framework (PyTorch/Inductor through the CUDA
    # driver), without CUDA graphs: a step whose kernels are shorter than this is host-bound
    # (simulate-step, decision 105). 0: not modelled.
    host_launch_s: float = 0.0

    def __post_init__(self):
        _check_gpu_counts(self)
        efficiency.check_table(self.efficiency_table)
        if not (_finite(self.host_launch_s) and 0 <= self.host_launch_s <= 1e-3):
            raise HardwareError(f"gpu.host_launch_s must be a time in [0, 1 ms] (host seconds "
                                f"per kernel launch), got {self.host_launch_s!r}; e.g. 5e-6")
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

    @property
    def compute_capability_resolved(self) -> int:
        """The compute capability: the field, or the one the GPU's name has
        (GPU_COMPUTE_CAPABILITY); 0 when neither says."""
        if self.compute_capability:
            return self.compute_capability
        return compute_capability_of(self.name)

    @property
    def generation(self) -> str:
        """NCCL's name for this GPU's row of its tuning tables (volta, ampere, hopper,
        blackwell), as NCCL 2.28 maps compute capabilities (cost_model.nccl_model)."""
        return nccl_model.generation(self.compute_capability_resolved)

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
    # The NCCL whose algorithm choice prices collectives (cost_model.nccl_model.RELEASES):
    # "2.28", NCCL 2.28.9's tuning model; "2.6", NCCL 2.6.4's (CoCoNet's fused kernels,
    # design note 89); "2.4", NCCL 2.4.8's fixed thresholds and no LL128 (PyTorch's bundled
    # NCCL in 2019-2020: CoCoNet's baseline, design note 76).
    release: str = "2.28"

    def __post_init__(self):
        if self.release not in nccl_model.RELEASES:
            raise HardwareError(f"nccl.release must be one of {', '.join(nccl_model.RELEASES)}, "
                                f"got {self.release!r}; 2.28 is NCCL 2.28.9's tuning model, 2.6 "
                                "NCCL 2.6.4's (CoCoNet's kernels), 2.4 NCCL 2.4.8's thresholds "
                                "(no LL128, no tuning model)")

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
    bandwidth as uplinks. `switch_latency_s` is one switch hop.

    The network does not deliver its line rate, and delivers less as a collective spans more
    nodes (adaptive-routing collisions, congestion at the spine): a collective's network leg
    runs at `efficiency(nodes)` of the NICs' line rate, `efficiency` over 2 nodes, less
    `loss_per_doubling` of it for each doubling of the node count beyond 2. The presets take
    both per `transport` (infiniband, roce, efa, tcpxo) from public figures (cost_model.presets)."""

    kind: str = "rail-optimized"
    tiers: int = 3  # the default holds 65536 nodes of 64-port switches: no limit in practice
    switch_radix: int = 64
    nodes_per_leaf: int = 32
    oversubscription: float = 1.0
    switch_latency_s: float = 0.0
    transport: str = "infiniband"
    efficiency: float = 1.0
    loss_per_doubling: float = 0.0
    # The transport's own cost per network message beyond NCCL's network hop latency
    # (tuning.cc hwLatencies[NET], built on InfiniBand): added to every network hop of a
    # collective's latency. None: the transport's cited or fitted figure (MESSAGE_COST_S);
    # a transport without one (tcpx) needs it in the profile.
    message_cost_s: float | None = None

    def __post_init__(self):
        if self.kind not in FABRIC_KINDS:
            raise HardwareError(f"fabric.kind must be one of {', '.join(FABRIC_KINDS)}, got "
                                f"{self.kind!r}; rail-optimized is what DGX SuperPODs use")
        if self.transport not in TRANSPORTS:
            raise HardwareError(f"fabric.transport must be one of {', '.join(TRANSPORTS)}, got "
                                f"{self.transport!r}; fix the profile's fabric section")
        for name in ("tiers", "switch_radix", "nodes_per_leaf"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise HardwareError(f"fabric.{name} must be a positive integer, got {value!r}; "
                                    "fix the profile's fabric section")
        if not (_finite(self.oversubscription) and self.oversubscription >= 1):
            raise HardwareError(f"fabric.oversubscription must be >= 1 (downlink : uplink "
                                f"bandwidth of a leaf; 1 is non-blocking), got "
                                f"{self.oversubscription!r}; use 1 for a non-blocking fabric")
        if not (_finite(self.switch_latency_s) and self.switch_latency_s >= 0):
            raise HardwareError(f"fabric.switch_latency_s must be a time >= 0, got "
                                f"{self.switch_latency_s!r}; use 0 to leave it to NCCL's "
                                "network latency")
        if not (_finite(self.efficiency) and 0 < self.efficiency <= 1):
            raise HardwareError(f"fabric.efficiency must be in (0, 1] (the fraction of the NICs' "
                                f"line rate a collective reaches over 2 nodes), got "
                                f"{self.efficiency!r}; e.g. 0.96 for InfiniBand NDR, 1 for line "
                                "rate")
        if self.message_cost_s is None and self.transport not in MESSAGE_COST_S:
            raise HardwareError(f"fabric.message_cost_s must be given for transport "
                                f"{self.transport!r}: it has no cited per-message cost "
                                f"(known for {', '.join(MESSAGE_COST_S)}), got none; add "
                                "\"message_cost_s\" (seconds per network message, e.g. 2e-5) "
                                "to the profile's fabric section")
        if self.message_cost_s is not None and not (_finite(self.message_cost_s)
                                                    and self.message_cost_s >= 0):
            raise HardwareError(f"fabric.message_cost_s must be a time >= 0 (seconds per "
                                f"network message), got {self.message_cost_s!r}; use 0 for "
                                "InfiniBand-like transports")
        if not (_finite(self.loss_per_doubling) and 0 <= self.loss_per_doubling < 1):
            raise HardwareError(f"fabric.loss_per_doubling must be in [0, 1) (the fraction of "
                                f"the efficiency lost per doubling of nodes), got "
                                f"{self.loss_per_doubling!r}; use 0 for no loss with scale")

    @property
    def message_s(self) -> float:
        """The per-message cost of the transport (`message_cost_s`, else MESSAGE_COST_S)."""
        if self.message_cost_s is not None:
            return self.message_cost_s
        return MESSAGE_COST_S[self.transport]

    def runs_protocol(self, protocol: str) -> bool:
        """Whether the transport's software stack leaves NCCL `protocol` (LL, LL128, Simple)
        across nodes (TRANSPORT_PROTOCOLS: EFA v1 and TCPXO run Simple only)."""
        return protocol in TRANSPORT_PROTOCOLS.get(self.transport, (protocol,))

    @property
    def lone_message(self) -> tuple[float, float] | None:
        """(host cost per message in s, rate of one message in bytes/s) of a message alone
        in its channel (LONE_MESSAGE), or None where it moves as the stream does."""
        return LONE_MESSAGE.get(self.transport)

    @property
    def buffsize_bytes(self) -> int:
        """NCCL's Simple buffer per channel and peer as the transport's stack sets it
        (NCCL_BUFFSIZE; TRANSPORT_BUFFSIZE, else NCCL's default)."""
        return TRANSPORT_BUFFSIZE.get(self.transport, NCCL_DEFAULT_BUFFSIZE)

    @property
    def runs_nvls(self) -> bool:
        """Whether the transport's software stack leaves NCCL's NVLS on (NVLSTree across
        nodes; TRANSPORTS_WITHOUT_NVLS)."""
        return self.transport not in TRANSPORTS_WITHOUT_NVLS

    def efficiency_at(self, nodes: int) -> float:
        """The fraction of line rate a collective over `nodes` nodes reaches (class
        docstring): `efficiency` x (1 - `loss_per_doubling`) ^ log2(nodes / 2), 1 inside a
        node, never above `efficiency`."""
        if nodes <= 1:
            return 1.0
        doublings = max(math.log2(nodes / 2), 0.0)
        return self.efficiency * (1.0 - self.loss_per_doubling) ** doublings

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
# How the NICs carry NCCL's traffic: InfiniBand verbs, RoCE (RDMA over Ethernet), AWS EFA
# (SRD through the aws-ofi-nccl plugin: "efa" the EFAv2 and later of p5 and p6 instances,
# "efa-v1" the first generation of p4d/p4de, whose small messages measure twice as slow),
# GCP's GPUDirect-TCPX (A3, TCP with header split into GPU memory) and TCPXO (A3 Mega, the
# FasTrak net plugin's offloaded TCP).
TRANSPORTS = ("infiniband", "roce", "efa", "efa-v1", "tcpx", "tcpxo")
# Seconds a transport adds to every network message beyond NCCL's hop latency (its table is
# InfiniBand's, and RoCE runs the same verbs on the same ConnectX NICs: 0 for both).
# EFA, EFA v1 and TCPXO: fitted, one row each, on a 2-node small-buffer AllReduce of
# benchmarks/validation_nccl.py (the rows marked train there; every other row of those
# transports is held out), each the time over the 2 network hops of NCCL's 2-node tree
# beyond what the model gives without messages: 2x p5.48xlarge (EFAv2, 8 B, 69.1 us
# measured) runs the tree LL: 18.7 us per message; 2x p4de.24xlarge (EFA v1, 8 B, 164.3 us)
# and 2x a3-megagpu-8g (TCPXO, 16 B, 123.2 us) run the tree Simple, the one protocol their
# stacks leave (TRANSPORT_PROTOCOLS below): 32.7 and 12.1 us. TCPX: no public figure found,
# so a TCPX fabric must give fabric.message_cost_s itself.
MESSAGE_COST_S = {"infiniband": 0.0, "roce": 0.0, "efa": 18.7e-6, "efa-v1": 32.7e-6,
                  "tcpxo": 12.1e-6}
# The protocols the transport's own software stack leaves NCCL across nodes (NCCL's tuning.cc
# at v2.28.9-1 enables LL and LL128 on every net transport up to PXN; the vendors turn them
# off around it), and whether that stack leaves NVLS (NVLSTree across nodes) on:
# - EFA v1 (p4d, p4de): aws-ofi-nccl (src/platform-aws.cpp, configure_ep_inorder) sets
#   NCCL_PROTO=simple when the endpoint cannot deliver 128-byte aligned writes in order, which
#   the first EFA generation's SENDRECV protocol cannot ("EFA doesn't support LL and LL128
#   variants", aws/aws-ofi-nccl#76; the log line "Setting NCCL_PROTO to simple" in
#   aws/aws-ofi-nccl#715). EFA of p5 and later (RDMA writes) keeps LL and LL128
#   (aws/aws-ofi-nccl#280: "Do not force NCCL_PROTO=simple on P5").
# - TCPXO (GCP A3 Mega): GCP's environment for it sets NCCL_ALGO=Ring,Tree, NCCL_PROTO=Simple
#   and NCCL_NVLS_ENABLE=0 (GoogleCloudPlatform/cluster-toolkit, examples/machine-learning/
#   a3-megagpu-8g/nemo-framework/Dockerfile at 5417609d, the profile its NCCL runs with).
TRANSPORT_PROTOCOLS = {"efa-v1": ("Simple",), "tcpxo": ("Simple",)}
TRANSPORTS_WITHOUT_NVLS = ("tcpxo",)
# NCCL's Simple buffer (NCCL_BUFFSIZE): 4 MiB by default (src/init.cc
# DEFAULT_BUFFSIZE at v2.28.9-1); the proxy transports' stacks set 8 MiB: aws-ofi-nccl
# (src/platform-aws.cpp, platform_data_map, p4d/p4de/p5 env NCCL_BUFFSIZE=8388608, at
# 2daf7d30) and GCP's TCPXO environment (cluster-toolkit a3-megagpu-8g nemo-framework
# Dockerfile at 5417609d: NCCL_BUFFSIZE=8388608). The tree's chunk is one eighth of it
# (nccl_model.tree_chunk_bytes): 1 MiB on these transports.
NCCL_DEFAULT_BUFFSIZE = 1 << 22
TRANSPORT_BUFFSIZE = {"efa": 1 << 23, "efa-v1": 1 << 23, "tcpxo": 1 << 23}
# A lone network message on a proxy transport (nccl_model.tree_first_loop_s, decision 112):
# (host cost per message in seconds, paid one active channel after the other; the rate one
# message moves at, bytes/s). InfiniBand, RoCE and EFA of p5/p6 (RDMA writes): absent, a
# lone message moves as the stream. EFA v1 (p4d/p4de, aws-ofi-nccl's SENDRECV protocol) and
# TCPXO (GCP's FasTrak plugin, host-driven TCP flows): fitted, MESSAGE_COST_S as it was, on
# two rows each of a 2-node AllReduce table (benchmarks/validation_nccl.py, the rows marked
# train), 4 and 8 MiB: under one loop of the tree (16 channels x 1 MiB), where the whole
# buffer crosses as lone messages; 2x p4de 533.9 and 762.8 us, 2x a3-megagpu-8g 364.6 and
# 571.9 us. Every other row of these transports is held out.
LONE_MESSAGE = {"efa-v1": (4.69e-6, 2.29e9), "tcpxo": (1.14e-6, 2.53e9)}


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
    # Peer bandwidth of a fused collective kernel generated with U vectors per thread per loop
    # iteration (CodegenOptions.unroll), as a factor on the unroll 1 kernel's (unroll, as a
    # string -> factor; "1" is 1 by definition). Measured by calibration (the fused AllReduce
    # at 256 MiB generated at unroll 1, 2 and 4, full grid; design note 95); empty in the
    # presets: unroll has no effect. `cost_model.collectives.fused_unroll_factor` reads it.
    fused_unroll_bandwidth: tuple[tuple[str, float], ...] = ()
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
    # A profile sets "nvls": false for a machine that runs with NCCL_NVLS_ENABLE=0 (and
    # `workbench simulate --no-nvls` does the same); true needs compute capability >= 90.
    nvls: bool = False
    # NVLinks per GPU into the node's NVSwitches (V100 6, A100 12, H100/H200/B200 18, H800 8;
    # datasheets): NCCL's topology counts links x its per-link bandwidth of the generation
    # (topo.h SMxx_NVLINK_BW), which sets its ring and NVLS graphs inside a node. 0: from the
    # NVLink bandwidth at the generation's per-link datasheet rate (25 or 50 GB/s).
    nvlink_links: int = 0

    def __post_init__(self):
        self._check_topology()
        self._check_nvls()
        cc = self.gpu.compute_capability_resolved
        old = {"2.4": "2.4.8", "2.6": "2.6.4"}.get(self.nccl.release)
        if old and cc >= 80:  # Ampere came with NCCL 2.7
            raise HardwareError(f"nccl.release must be 2.28 for GPU {self.gpu.name} (compute "
                                f"capability {cc}): NCCL {old} predates Ampere, got release "
                                f"'{self.nccl.release}'; drop nccl.release from the profile")
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
        self._check_unroll_curve()

    def _check_unroll_curve(self) -> None:
        """The unroll curve names unrolls codegen generates, and unroll 1, its reference, at
        a factor of 1."""
        for unroll, factor in self.fused_unroll_bandwidth:
            if str(unroll) not in {str(u) for u in UNROLLS} or not factor > 0:
                raise HardwareError(f"hardware profile field fused_unroll_bandwidth must map "
                                    f"unrolls ({', '.join(map(str, UNROLLS))}) to positive "
                                    f"factors on the unroll 1 kernel's peer bandwidth, got "
                                    f"{unroll!r}: {factor!r}")
            if str(unroll) == "1" and factor != 1:
                raise HardwareError(f"hardware profile field fused_unroll_bandwidth.1 must be 1 "
                                    f"(the curve is relative to unroll 1), got {factor!r}; drop "
                                    f"it or divide every factor by it")

    def _check_topology(self) -> None:
        """Refuse a topology that cannot run anything: no GPUs, links without bandwidth, more
        nodes than the fabric holds. Each message names the field, the condition, the fix."""
        for name in ("gpus_per_node", "nodes", "nvlink_links"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (
                    0 if name == "nvlink_links" else 1):
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
        if (not isinstance(self.nics_per_node, int) or isinstance(self.nics_per_node, bool)
                or self.nics_per_node < 0):
            raise HardwareError(f"nics_per_node must be an integer >= 0 (0: one NIC per GPU), "
                                f"got {self.nics_per_node!r}; fix the profile")
        if self.nodes > self.fabric.max_nodes:
            raise HardwareError(f"fabric must hold the cluster's {self.nodes} nodes, got a "
                                f"{self.fabric.tiers}-tier fabric of {self.fabric.switch_radix}-"
                                f"port switches that holds {self.fabric.max_nodes}; use fewer "
                                "--nodes or a profile with more fabric.tiers")

    def _check_nvls(self) -> None:
        """NVLS needs NVLink SHARP: NVSwitch gen3 or newer with Hopper or newer GPUs (NCCL
        searches no NVLS graph below compute capability 90, search.cc)."""
        if not isinstance(self.nvls, bool):
            raise HardwareError(f"nvls must be true or false, got {self.nvls!r}; fix the "
                                "profile")
        cc = self.gpu.compute_capability_resolved
        if self.nvls and cc < nccl_model.NVLS_MIN_COMPUTE_CAPABILITY:
            raise HardwareError(f"nvls must be false for GPU {self.gpu.name} (compute capability "
                                f"{cc}, {self.gpu.generation}): NVLink SHARP needs compute "
                                f"capability >= {nccl_model.NVLS_MIN_COMPUTE_CAPABILITY} "
                                f"(Hopper) and an NVSwitch, got nvls: true; set \"nvls\": false "
                                "in the profile")

    @property
    def nvlink_link_count(self) -> int:
        """NVLinks per GPU (`nvlink_links`, or the NVLink bandwidth over the generation's
        per-link datasheet rate)."""
        if self.nvlink_links:
            return self.nvlink_links
        per_link = nccl_model.NVLINK_DATASHEET_LINK_GBPS[self.gpu.generation] * 1e9
        return max(1, round(self.nvlink.bandwidth_Bps / per_link))

    @property
    def nccl_nvlink_Bps(self) -> float:
        """A GPU's NVLink bandwidth as NCCL's topology counts it: links x the generation's
        per-link figure (topo.h SMxx_NVLINK_BW; NCCL 2.28.9)."""
        return self.nvlink_link_count * nccl_model.NVLINK_LINK_GBPS[self.gpu.generation] * 1e9

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
        NIC), so all of a node's NICs carry one collective, at the fabric's efficiency over
        `nodes` nodes (`Fabric.efficiency_at`); divided by the fabric's oversubscription where
        the group spans more than one leaf of its rail."""
        bw = self.gpus_per_node * self.nic_per_gpu_Bps * self.fabric.efficiency_at(nodes)
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




def _positive(x) -> bool:
    return _finite(x) and x > 0


def _non_negative(x) -> bool:
    return _finite(x) and x >= 0


