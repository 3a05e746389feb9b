"""Preset clusters: the machines users have, each figure with its source in a comment.

Datasheet figures are peaks; where a measured number exists (the h200x4 baselines,
/work/shared/device/baselines-h200x4.md, copied into cost_model/data/) the preset uses the
measured, achievable figure, because the cost model predicts achieved time.
"""

from __future__ import annotations

import dataclasses

from cost_model import nccl_model
from cost_model.specs import GPU, Cluster, Fabric, Link, NcclTuning, Protocol
from workbench.errors import HardwareError

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


# Host time per kernel launch from PyTorch without CUDA graphs (GPU.host_launch_s): the low
# end of the 5-20 us per launch that host-side launch costs run to (NVIDIA's CUDA Graph best
# practice guide, https://docs.nvidia.com/dl-cuda-graph/latest, names this overhead as what
# graphs remove; https://devbytes.co.in/news/reducing-cuda-kernel-launch-overhead gives
# 5-20 us; a direct cuLaunchKernel on B200 measured about 5 us of dispatch,
# https://dogacel.github.io/my-agent-blog/performance/2026/03/14/four-counter-intuitive-lessons-from-deep-diving-gpu-kernel-dispatch-overhead).
# A cited assumption for the H100 and A100 presets, whose validation rows ran on other hosts.
HOST_LAUNCH_S = 5e-6
# Measured on the H200 machines this project rents (GPU run 39 call 7, commit in
# records/gpu/run39-h200x2-pipelined/call7/: benchmarks/gpu/launch_host.py, 2000
# eager torch.add launches, median of 7 loops, torch 2.11): 9.55 us per launch from Python;
# replaying them as one CUDA graph costs 0.015 us per kernel.
H200_HOST_LAUNCH_S = 9.55e-6


def _cited_gemm_table(csv_name: str, peak_flops: float, dtype: str = "bf16") -> tuple:
    """A GPU's efficiency_table from a cited per-shape GEMM rate file in cost_model/data
    (M, N, K, TFLOP/s; '#' lines are its source): each rate over the GPU's peak."""
    import csv
    from importlib import resources

    from cost_model.efficiency import entry_key

    text = resources.files("cost_model").joinpath("data", csv_name).read_text()
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return tuple((entry_key("gemm", dtype, (r["M"], r["N"], r["K"])),
                  float(r["tflops"]) * 1e12 / peak_flops) for r in rows)


# H100 SXM's bf16 GEMM rates per shape (XLA's measured sm_90 table, data/gemm_h100_xla.csv):
# 783 TFLOP/s at 4096^3 = 0.79 of 989, 6.5 TFLOP/s at 256^3. The H200 is the same GH100 chip
# at the same clocks: its table is the H100's (this project's own H200 run 10 timed 785
# TFLOP/s at 8192^3, records/calibration/h200x2-run10, against the table's 783 at
# its largest shape).
def _hopper_gemm_table() -> tuple:
    return _cited_gemm_table("gemm_h100_xla.csv", 989e12)


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
        efficiency_table=_hopper_gemm_table(),
        host_launch_s=H200_HOST_LAUNCH_S,
        dropout_element_s=H200_DROPOUT_ELEMENT_S,
        compute_capability=90,  # Hopper (CUDA GPUs list: H200 9.0)
    )
    return Cluster(
        name="h200x4",
        fabric=NDR_RAIL_FABRIC,  # the multi-node form (--nodes K): as the DGX SuperPOD's
        gpu=gpu,
        gpus_per_node=4,
        nodes=1,
        # NV18: 18 links x 26.562 GB/s = 478 GB/s per direction (nvidia-smi nvlink -s on the
        # machine, baselines-h200x4.md). Latency ~1 us per NVSwitch hop (NVLink4 whitepaper).
        nvlink=Link("nvlink4-nv18", bandwidth_Bps=478e9, latency_s=1e-6),
        nvlink_links=18,
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
        efficiency_table=_hopper_gemm_table(),
        host_launch_s=HOST_LAUNCH_S,
        # The H200's: the same GH100 chip, SM count and clocks (not measured on an H100).
        dropout_element_s=H200_DROPOUT_ELEMENT_S,
        compute_capability=90,  # Hopper (CUDA GPUs list: H100 9.0)
    )
    return Cluster(
        name="h100x8",
        fabric=NDR_RAIL_FABRIC,  # the multi-node form (--nodes K): as the DGX SuperPOD's
        gpu=gpu,
        gpus_per_node=8,  # DGX H100: 8 GPUs, 4 NVSwitch gen3 chips (DGX H100 user guide)
        nodes=1,
        # NVLink4, 18 links: 900 GB/s bidirectional = 450 GB/s per direction (datasheet).
        nvlink=Link("nvlink4", bandwidth_Bps=450e9, latency_s=1e-6),
        nvlink_links=18,
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
        host_launch_s=HOST_LAUNCH_S,  # no per-shape GEMM table cited for A100 yet
        compute_capability=80,  # Ampere (CUDA GPUs list: A100 8.0)
    )
    return Cluster(
        name="a100x8",
        fabric=NDR_RAIL_FABRIC,  # the multi-node form (--nodes K): as the DGX SuperPOD's
        gpu=gpu,
        gpus_per_node=8,  # DGX A100: 8 GPUs, 6 NVSwitch gen2 (DGX A100 user guide)
        nodes=1,
        # NVLink3: 12 links x 25 GB/s = 300 GB/s per direction (600 GB/s bidirectional, datasheet)
        nvlink=Link("nvlink3", bandwidth_Bps=300e9, latency_s=1e-6),
        nvlink_links=12,
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
        # V100 SXM3 32 GB datasheet: 900 GB/s HBM2. Sustained: 790 GB/s (0.88 of peak), the
        # top of what Apex FusedAdam reached on CoCoNet's 128 V100s (740-790 GB/s over the
        # sizes of parasailteam/coconet examples/pytorch-optimizers-results-128-gpus-all-algos,
        # as issue 23 reads them): a streaming kernel reached it, so the GPU sustains it. The
        # H200 ratio (x 0.72 = 648 GB/s) was below what an optimizer kernel ran at.
        hbm_bandwidth_Bps=790e9,
        hbm_capacity_bytes=32e9,
        # V100 SXM3 (DGX-2) datasheet: FP32 15.7 TFLOPS, FP16 tensor 125 TFLOPS; no bf16 units.
        peak_flops=(("f32", 15.7e12), ("f16", 125e12), ("bf16", 15.7e12)),
        launch_latency_s=5e-6,
        compute_capability=70,  # Volta (CUDA GPUs list: V100 7.0)
    )
    return Cluster(
        name="v100x16",
        fabric=NDR_RAIL_FABRIC,  # the multi-node form (--nodes K): as the DGX SuperPOD's
        gpu=gpu,
        gpus_per_node=16,  # DGX-2: 16 V100 on 12 NVSwitches (the CoCoNet paper's machine)
        nodes=1,
        # NVLink2: 6 links x 25 GB/s = 150 GB/s per direction per GPU (DGX-2 datasheet).
        nvlink=Link("nvlink2", bandwidth_Bps=150e9, latency_s=1.5e-6),
        nvlink_links=6,
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

# What a collective's network leg reaches of the NICs' line rate, per transport
# (Fabric.efficiency over 2 nodes, Fabric.loss_per_doubling per doubling of nodes beyond):
# - InfiniBand: NCCL's maintainers give 46-49 GB/s per 400 Gb/s NDR NIC (NVIDIA/nccl-tests
#   #290: "For NDR @ 400Gbps you should see 46-48GB/s per NIC"; #267: "up to 48-49GB/s per
#   NIC") and 24 of 25 GB/s per 200 Gb/s HDR NIC "on perfect setups" (nccl-tests#160):
#   0.96. Loss with scale: NVIDIA/nccl#1229's H100 cluster loses 345 -> 260 GB/s of
#   ReduceScatter busbw from 8 to 128 nodes (4 doublings), 6 % per doubling; the only
#   public series over that range found, so those rows of the validation are not independent.
# - RoCE: the same ConnectX NICs deliver less over Ethernet: NVIDIA/nccl#1221's 2 DGX H100 on
#   8x 400 Gb/s RoCE reach 330 GB/s ring busbw with NVLS off ("from 330GB to 430GB"), where
#   the ring is bound by the NICs (NVLink carries 370): 330 / (8 x 50) = 0.825 (that row of
#   the validation is not independent; its 4- and 32-node RoCE rows test it, design note
#   77). No series over node counts was found, so InfiniBand's loss per doubling.
# - EFA (aws-ofi-nccl over SRD): fitted on one row of benchmarks/validation_nccl.py (marked
#   train; issue 37): 2x p4de.24xlarge (4x 100 Gb/s EFA, a current stack: aws-samples/
#   awsome-distributed-training micro-benchmarks/nccl-tests/README.md, commit 0162aacd, row
#   "2147483648 536870912 float sum -1 51406 41.78 78.33") reach 78.33 GB/s busbw on NCCL's
#   2-node tree, which the model gives at 0.85 of line rate (decision 112: the tree's
#   stream on this transport at what the fabric delivers, after its first loop of lone
#   messages; 0.91 when the tree was priced at NCCL's estimate). The 0.61 of NVIDIA/nccl#527
#   (p4dn, NCCL 2.9.9 in 2022, a thread titled "Slow bus bandwidth") is an older stack; its
#   rows stay in the validation, held out (benchmarks/README.md). Per doubling as InfiniBand
#   (no EFA series over node counts found). That row is EFA v1 (p4de); the later EFA of p5
#   and p6 keeps 0.91, that row's earlier fit: its large-buffer rows (2x p5, 1 and 16 GiB)
#   sit at NCCL's NVLSTree cap and do not constrain it.
# - TCPXO (GCP A3 Mega): fitted on the 8 GiB row of a 2-node A3 Mega all_reduce_perf
#   (lessizzmore/create-a3mega-ztan-fork, ztan-NCCL-test-result: 338.82 GB/s): 0.92, with the
#   tree's stream at what the fabric delivers (decision 112; under NCCL's per-channel tree
#   cap, 309 GB/s, it was 0.9). TCPX (A3): no public figure found; not in this table (a
#   profile gives it).
NETWORK_EFFICIENCY = {"infiniband": (0.96, 0.06), "roce": (0.825, 0.06), "efa": (0.91, 0.06),
                      "efa-v1": (0.85, 0.06), "tcpxo": (0.92, 0.06)}
# One switch hop (port to port, cut-through). Quantum-2 NDR: vendor and reseller figures
# range 150-400 ns (router-switch.com "under 150 nanoseconds", yobitel.com "~330 ns"):
# 300 ns. Quantum HDR (QM8790): 130 ns (NVIDIA QM8700/QM8790 datasheet). Switch-IB 2 EDR
# (SB7800): 90 ns (Mellanox SB7800 datasheet). Ethernet (RoCE) and AWS's EFA fabric publish
# none: 600 ns and 1 us, assumptions of the workbench, not measured.
SWITCH_LATENCY_S = {"ndr": 300e-9, "hdr": 130e-9, "edr": 90e-9, "roce": 600e-9,
                    "efa": 1e-6}


def _fabric(transport: str, switch: str, **shape) -> Fabric:
    """A fabric of `transport` with its efficiency (NETWORK_EFFICIENCY) and `switch`'s hop
    latency (SWITCH_LATENCY_S); `shape`: kind, tiers, switch_radix, nodes_per_leaf."""
    efficiency, loss = NETWORK_EFFICIENCY[transport]
    return Fabric(transport=transport, efficiency=efficiency, loss_per_doubling=loss,
                  switch_latency_s=SWITCH_LATENCY_S[switch], **shape)


# DGX SuperPOD (H100) reference architecture (NVIDIA RA-11333): rail-optimized InfiniBand NDR
# fat tree of QM9700 switches (64 ports of 400 Gb/s), scalable units of 32 DGX nodes with one
# leaf per rail, non-blocking (1:1). Three tiers hold 2 x 32^3 = 65536 nodes per rail.
NDR_RAIL_FABRIC = _fabric("infiniband", "ndr", kind="rail-optimized", tiers=3, switch_radix=64,
                          nodes_per_leaf=32, oversubscription=1.0)


def _nvswitch_nccl(cluster: Cluster) -> NcclTuning:
    """NCCL's constants for an NVSwitch node, from the 4-GPU H200 fit: the ring's Simple
    bandwidth is what NCCL's topology gives a GPU there, its NVLinks x its per-link figure
    (`Cluster.nccl_nvlink_Bps`; Hopper 18 x 20.6 GB/s = 370.8, topo.h SM90_NVLINK_BW), which
    NCCL's maintainers give as the effective bus bandwidth of 8x H100 for every ring
    collective, AllReduce included (NVIDIA/nccl-tests#212: "NCCL can get an effective NVLink
    bandwidth of 370GB/s, which you can observe as BusBw when running non-allreduce
    operations, or when running with NCCL_ALGO=RING"). The fit's 0.685 x 450 = 308 GB/s (and
    AllReduce x 0.951) came from the 4-GPU board, whose rings use fewer links. LL128 carries
    120 of each 128 bytes: NCCL models it at 0.92 of Simple (tuning.cc), where the board's
    fit had 0.78; LL at half of Simple, capped by NCCL 2.28.9's one-node LL ceiling of the
    generation (tuning.cc llMaxBws N1: Hopper 141 GB/s, where the board's fit had 90).
    Design note 38."""
    nvlink_Bps = cluster.nvlink.bandwidth_Bps
    simple = cluster.nccl_nvlink_Bps / nvlink_Bps
    ll_Bps = min(0.5 * cluster.nccl_nvlink_Bps,
                 nccl_model.LL_MAX_ONE_NODE_GBPS[cluster.gpu.generation] * 1e9)
    eff = {"Simple": simple, "LL128": 0.92 * simple, "LL": ll_Bps / nvlink_Bps}
    protocols = tuple(dataclasses.replace(p, efficiency=eff[p.name]) if p.name in eff else p
                      for p in cluster.nccl.protocols)
    return dataclasses.replace(cluster.nccl, protocols=protocols, allreduce_bandwidth_factor=1.0)


def _nvswitch_node(cluster: Cluster, **changes) -> Cluster:
    """`cluster` changed by `changes`, as an NVSwitch node: NCCL's ring constants for it."""
    node = dataclasses.replace(cluster, **changes)
    return dataclasses.replace(node, nccl=_nvswitch_nccl(node))


def _dgx_h100() -> Cluster:
    # DGX H100 user guide: 8x H100 SXM5 80 GB on 4 NVSwitch gen3 chips; 8 single-port
    # ConnectX-7 400 Gb/s InfiniBand NICs for the compute fabric, one per GPU. NVSwitch gen3
    # reduces in the switch (NVLS).
    return _nvswitch_node(_h100x8(), name="dgx-h100", nic=NIC_400G, nics_per_node=8,
                          fabric=NDR_RAIL_FABRIC, nvls=True)


def _dgx_h200() -> Cluster:
    # DGX H200 datasheet: 8x H200 141 GB, NVLink 900 GB/s bidirectional per GPU (450 GB/s per
    # direction; the h200x4 machine's NV18 reads 478: nvidia-smi counts 26.56 GB/s lanes),
    # 4 NVSwitch, 8x ConnectX-7 400 Gb/s (8 single-port OSFP) for the compute fabric.
    return _nvswitch_node(_h200x4(), name="dgx-h200", gpus_per_node=8, nic=NIC_400G,
                          nics_per_node=8, fabric=NDR_RAIL_FABRIC, nvls=True)


def _dgx_h800() -> Cluster:
    # H800 SXM5: the H100 chip with 8 NVLinks (NVLink 400 GB/s bidirectional = 200 GB/s per
    # direction, NVIDIA H800 datasheet), HBM3 80 GB at 3.35 TB/s as H100. HGX H800 nodes as
    # DeepSeek-V3's report describes them (arXiv 2412.19437, 3.1: 8 GPUs on NVLink/NVSwitch,
    # one 400 Gb/s InfiniBand CX7 NIC per GPU, a multi-plane fat tree). NVSwitch gen3: NVLS.
    base = _h100x8()
    gpu = dataclasses.replace(base.gpu, name="H800")
    nvlink_Bps = 200e9
    return _nvswitch_node(
        base, name="dgx-h800", gpu=gpu, nvlink=Link("nvlink4-8", bandwidth_Bps=nvlink_Bps,
                                                    latency_s=1e-6),
        nvlink_links=8, peer_load_bandwidth_Bps=nvlink_Bps * 327 / 478,
        peer_store_bandwidth_Bps=nvlink_Bps * 358 / 478,
        copy_engine_bandwidth_Bps=nvlink_Bps * 391 / 478, nic=NIC_400G, nics_per_node=8,
        fabric=NDR_RAIL_FABRIC, nvls=True)


def _b200(name: str, hbm_Bps: float, hbm_bytes: float, flops: tuple) -> GPU:
    return GPU(
        name=name,
        # Blackwell GPU: 148 SMs (NVIDIA Blackwell architecture technical brief).
        sm_count=148,
        # x 0.72, the achieved/peak ratio measured on H200 (no Blackwell measurement at hand).
        hbm_bandwidth_Bps=hbm_Bps * 0.72,
        hbm_capacity_bytes=hbm_bytes,
        peak_flops=flops,
        launch_latency_s=4e-6,  # as H200 (not measured on Blackwell)
        compute_capability=100,  # Blackwell (CUDA GPUs list: B200, GB200 10.0)
    )


def _blackwell_node(name: str, gpu: GPU, gpus: int) -> Cluster:
    # NVLink 5: 1.8 TB/s bidirectional per GPU = 900 GB/s per direction, 18 links (DGX B200
    # and GB200 NVL72 datasheets). Peer load/store and copy-engine efficiency as measured on
    # H200, applied to NVLink 5. One 400 Gb/s ConnectX-7 per GPU (both datasheets).
    nvlink_Bps = 900e9
    node = Cluster(
        name=name, gpu=gpu, gpus_per_node=gpus, nodes=1,
        nvlink=Link("nvlink5", bandwidth_Bps=nvlink_Bps, latency_s=1e-6), nvlink_links=18,
        nic=NIC_400G, nics_per_node=gpus, fabric=NDR_RAIL_FABRIC,
        peer_load_bandwidth_Bps=nvlink_Bps * 327 / 478,
        peer_store_bandwidth_Bps=nvlink_Bps * 358 / 478,
        copy_engine_bandwidth_Bps=nvlink_Bps * 391 / 478,
        nccl=H200_NCCL, nvls=True)
    return _nvswitch_node(node)


def _gb200_nvl72() -> Cluster:
    # GB200 NVL72 datasheet: 576 TB/s HBM3e over 72 GPUs = 8 TB/s each, 13.4 TB over 72 =
    # 186 GB each; FP32 5,760 TFLOPS / 72 = 80 TFLOPS per GPU; FP16/BF16 tensor 360 PFLOPS
    # sparse / 72 / 2 = 2.5 PFLOPS dense. A node here is the NVLink domain: the whole rack,
    # its NVLink switch trays reducing in the switch (NVLS).
    gpu = _b200("B200", 8e12, 13.4e12 / 72, (("f32", 80e12), ("f16", 2.5e15), ("bf16", 2.5e15)))
    return _blackwell_node("gb200-nvl72", gpu, 72)


def _dgx_b200() -> Cluster:
    # DGX B200 datasheet: 8x B200, 1,440 GB HBM3e in all (180 GB each) at 64 TB/s (8 TB/s
    # each); FP8 training 72 PFLOPS = 9 per GPU, so FP16/BF16 dense 4.5 / 2 = 2.25 PFLOPS;
    # 2 NVSwitch chips (NVLink 5); 8 single-port ConnectX-7 400 Gb/s for the compute fabric.
    # HGX B200 (the board of the cloud machines) is the same node. FP32: 75 TFLOPS (HGX B200
    # datasheet, 600 TFLOPS over 8).
    gpu = _b200("B200", 8e12, 180e9, (("f32", 75e12), ("f16", 2.25e15), ("bf16", 2.25e15)))
    return _blackwell_node("dgx-b200", gpu, 8)


def _dgx_a100() -> Cluster:
    # DGX A100 user guide: 8x A100 SXM4 80 GB, 6 NVSwitch gen2, 8 single-port ConnectX-6
    # HDR 200 Gb/s InfiniBand NICs for the compute fabric (= 25 GB/s per direction), one per GPU.
    # DGX SuperPOD (A100) reference architecture: rail-optimized HDR fat tree of QM8790
    # switches (40 ports), scalable units of 20 nodes, non-blocking.
    nic = Link("nic-200G", bandwidth_Bps=25e9, latency_s=NIC_400G.latency_s)
    fabric = _fabric("infiniband", "hdr", kind="rail-optimized", tiers=3, switch_radix=40,
                     nodes_per_leaf=20, oversubscription=1.0)
    return _nvswitch_node(_a100x8(), name="dgx-a100", nic=nic, nics_per_node=8, fabric=fabric)


def _aws_p4d() -> Cluster:
    # AWS p4d.24xlarge (EC2 accelerated computing instance specs): 8x A100 40 GB on NVSwitch
    # (600 GB/s bidirectional NVLink), 400 Gb/s of EFA networking as 4x 100 Gb/s EFA NICs:
    # 50 GB/s a node, half a 100 Gb/s NIC per GPU. A100 40 GB: HBM2 1,555 GB/s (datasheet).
    # EC2 UltraClusters: a non-blocking petabit-scale fabric; its switch tiers are not
    # published: a 3-tier fat tree of 64-port switches, 16 nodes per leaf, is the model's.
    base = _a100x8()
    gpu = dataclasses.replace(base.gpu, hbm_capacity_bytes=40e9, hbm_bandwidth_Bps=1.555e12 * 0.72)
    nic = Link("efa-100G", bandwidth_Bps=12.5e9, latency_s=NIC_400G.latency_s)
    fabric = _fabric("efa-v1", "efa", kind="fat-tree", tiers=3, switch_radix=64,
                     nodes_per_leaf=16, oversubscription=1.0)
    return _nvswitch_node(base, name="aws-p4d", gpu=gpu, nic=nic, nics_per_node=4,
                          fabric=fabric)


def _aws_p5() -> Cluster:
    # AWS p5.48xlarge (EC2 accelerated computing instance specs): 8x H100 80 GB on NVSwitch
    # (900 GB/s bidirectional NVLink), 3,200 Gb/s of EFAv2 networking: 32 EFA interfaces of
    # 100 Gb/s, 4 per GPU; aws-ofi-nccl presents each GPU's four as one 400 Gb/s NIC, so the
    # model has 8 NICs of 400 Gb/s. Fabric as aws-p4d's. NVSwitch gen3: NVLS.
    fabric = _fabric("efa", "efa", kind="fat-tree", tiers=3, switch_radix=64, nodes_per_leaf=16,
                     oversubscription=1.0)
    nic = Link("efa-4x100G", bandwidth_Bps=50e9, latency_s=NIC_400G.latency_s)
    return _nvswitch_node(_h100x8(), name="aws-p5", nic=nic, nics_per_node=8, fabric=fabric,
                          nvls=True)


def _dgx2_v100() -> Cluster:
    # CoCoNet's cluster (Jangda et al., ASPLOS 2022, section 6): 16 NVIDIA DGX-2 nodes of 16
    # V100 32 GB on NVSwitch, linked by 8 non-blocking EDR InfiniBand (100 Gb/s = 12.5 GB/s
    # per direction) NICs per node: half a NIC per GPU. A two-tier EDR fat tree of 36-port
    # switches (Mellanox SB7800) holds 2 x 18^2 = 648 nodes.
    nic = Link("nic-100G-edr", bandwidth_Bps=12.5e9, latency_s=NIC_400G.latency_s)
    fabric = _fabric("infiniband", "edr", kind="fat-tree", tiers=2, switch_radix=36,
                     nodes_per_leaf=18, oversubscription=1.0)
    return _nvswitch_node(_v100x16(), name="dgx2-v100", nic=nic, nics_per_node=8,
                          fabric=fabric)


PRESETS = {"h200x4": _h200x4, "h100x8": _h100x8, "a100x8": _a100x8, "v100x16": _v100x16,
           "dgx-h100": _dgx_h100, "dgx-h200": _dgx_h200, "dgx-h800": _dgx_h800,
           "dgx-b200": _dgx_b200, "gb200-nvl72": _gb200_nvl72, "dgx-a100": _dgx_a100,
           "aws-p4d": _aws_p4d, "aws-p5": _aws_p5, "dgx2-v100": _dgx2_v100}
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

