"""A training step of a GPT under tensor, pipeline and data parallelism as Megatron-LM runs it
(Narayanan et al. 2021, arXiv 2104.04473): what one GPU of the slowest pipeline stage does,
priced kernel by kernel with cost_model.training's kernels and cost_model.collectives' NCCL
model (decision 105). The validation of simulate-step against published step times
(benchmarks/validation_step.py) prices the model-parallel rows with it.

Per GPU and microbatch: the stage's layers (layers / pp) with every GEMM split over the tp
ranks as Megatron splits them (QKV and fc by output columns, proj and out by input rows),
attention over heads / tp, LayerNorms and residuals whole on every rank; the head's GEMM and
cross-entropy split over the vocabulary (the last stage holds them, and the last stage's
time sets the pipeline's pace); two AllReduces of the microbatch's activations per layer in
forward and two in backward over the tp ranks (NVLink), and with full activation
recomputation the forward again in backward. The step is 1F1B's (m + pp - 1) microbatch
slots (m = global batch / (dp x microbatch)), each the stage's forward and backward plus the
activations' send to the next stage, then the gradients' AllReduce over the dp ranks (not
overlapped, as Megatron-LM's 2021 DDP ran it) and Adam over the GPU's parameters.

Attention is `flash` (one fused kernel, cost_model.training._attention) or `unfused`
(Megatron-LM 2021: the scores written to HBM by a batched GEMM, the fused scale-mask-softmax
and dropout kernels reading and writing them, a second batched GEMM reading them; no
skipping of masked blocks).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from cost_model import training as ct
from cost_model.collectives import choose_plan
from cost_model.hardware import Cluster

ATTENTION_KINDS = ("flash", "unfused")


class ParallelLayoutError(ct.TrainingShapeError):
    """A parallel layout the step cannot be priced for."""


@dataclass(frozen=True, slots=True)
class Layout:
    """How the GPUs split the model and the batch: tensor-parallel size `tp` (inside a node),
    pipeline stages `pp`, data-parallel replicas `dp`; `microbatch` sequences per microbatch,
    `global_batch` sequences per step; `recompute`: full activation recomputation;
    `attention`: flash or unfused (module docstring); `grad_bytes`: bytes per gradient element
    in the data-parallel AllReduce (4: Megatron's fp32 main gradients)."""

    tp: int
    pp: int
    dp: int
    microbatch: int
    global_batch: int
    recompute: bool = True
    attention: str = "unfused"
    grad_bytes: int = 4

    def __post_init__(self):
        for name in ("tp", "pp", "dp", "microbatch", "global_batch", "grad_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ParallelLayoutError(f"layout.{name} must be a positive integer, got "
                                          f"{value!r}; e.g. 1")
        if self.global_batch % (self.dp * self.microbatch):
            raise ParallelLayoutError(
                f"layout.global_batch must be a multiple of dp x microbatch = "
                f"{self.dp * self.microbatch}, got {self.global_batch}; pick a global batch "
                "that splits into whole microbatches")
        if self.attention not in ATTENTION_KINDS:
            raise ParallelLayoutError(f"layout.attention must be one of "
                                      f"{', '.join(ATTENTION_KINDS)}, got {self.attention!r}")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def microbatches(self) -> int:
        """Microbatches per pipeline per step."""
        return self.global_batch // (self.dp * self.microbatch)


@dataclass(frozen=True, slots=True)
class ParallelStep:
    """The priced step (seconds): the stage's forward and backward per microbatch (with their
    tp AllReduces and the activation send), the pipeline's slots, the dp AllReduce, Adam."""

    forward_s: float
    backward_s: float
    tp_comm_s: float  # per microbatch, inside forward_s + backward_s
    slots: int
    dp_allreduce_s: float
    optimizer_s: float

    @property
    def step_s(self) -> float:
        return self.slots * (self.forward_s + self.backward_s) + self.dp_allreduce_s \
            + self.optimizer_s


def _unfused_attention(prefix: str, phase: str, b: int, heads: int, s: int, dh: int, e: int,
                       backward: bool) -> list[ct.Kernel]:
    """Attention with the scores in HBM: batched GEMMs of (b heads s) x s x dh, the
    scale-mask-softmax and dropout kernels over the b heads s^2 scores."""
    n = b * heads * s * s  # score elements
    rows = b * heads * s
    if not backward:
        return [ct._gemm(f"{prefix}.qk", phase, rows, s, dh, e),
                ct._pointwise(f"{prefix}.softmax", phase, n, n, 5 * n, e),
                ct._pointwise(f"{prefix}.dropout", phase, n, n, 2 * n, e),
                ct._gemm(f"{prefix}.pv", phase, rows, dh, s, e)]
    return [ct._gemm(f"{prefix}.dv", phase, rows, dh, s, e),  # P^T dO
            ct._gemm(f"{prefix}.dp", phase, rows, s, dh, e),  # dO V^T
            ct._pointwise(f"{prefix}.dropout.backward", phase, 2 * n, n, n, e),
            ct._pointwise(f"{prefix}.softmax.backward", phase, 2 * n, n, 4 * n, e),
            ct._gemm(f"{prefix}.dq", phase, rows, dh, s, e),  # dS K
            ct._gemm(f"{prefix}.dk", phase, rows, dh, s, e)]  # dS^T Q


def layer_kernels(shape: ct.GptShape, tp: int, attention: str, backward: bool
                  ) -> list[ct.Kernel]:
    """One transformer layer's kernels on one of `tp` ranks for one microbatch (`shape.batch`
    sequences): forward, or backward (without the recomputed forward)."""
    d, m, e = shape.d_model, shape.tokens, shape.itemsize
    t, heads, dh = m * d, shape.heads // tp, shape.d_model // shape.heads
    phase = "backward" if backward else "forward"
    local = dataclasses.replace(shape, heads=heads, d_model=heads * dh)
    if attention == "flash":
        attn = [ct._attention("attention", phase, local, 5 if backward else 3,
                              3 if backward else 1, 5 if backward else 2)]
    else:
        attn = _unfused_attention("attention", phase, shape.batch, heads, shape.seq, dh, e,
                                  backward)
    if not backward:
        return [ct._pointwise("ln1", phase, t, t, 8 * t, e),
                ct._gemm("qkv", phase, m, 3 * d // tp, d, e), *attn,
                ct._gemm("proj", phase, m, d, d // tp, e),
                ct._pointwise("residual+ln2", phase, 2 * t, 2 * t, 9 * t, e),
                ct._gemm("fc", phase, m, 4 * d // tp, d, e),
                ct._pointwise("gelu", phase, 4 * t // tp, 4 * t // tp, 32 * t // tp, e),
                ct._gemm("out", phase, m, d, 4 * d // tp, e),
                ct._pointwise("residual", phase, 2 * t, t, t, e)]
    return [*ct._linear_backward("out", m, 4 * d // tp, d, e),
            ct._pointwise("gelu.backward", phase, 8 * t // tp, 4 * t // tp, 48 * t // tp, e),
            *ct._linear_backward("fc", m, d, 4 * d // tp, e),
            ct._pointwise("ln2.backward", phase, 4 * t, t, 10 * t, e),
            *ct._linear_backward("proj", m, d // tp, d, e), *attn,
            *ct._linear_backward("qkv", m, d, 3 * d // tp, e),
            ct._pointwise("ln1.backward", phase, 4 * t, t, 10 * t, e)]


def head_kernels(shape: ct.GptShape, tp: int, backward: bool) -> list[ct.Kernel]:
    """The last stage's vocabulary-parallel head and cross-entropy on one of `tp` ranks."""
    d, m, e, v = shape.d_model, shape.tokens, shape.itemsize, shape.vocab // tp
    if not backward:
        return [ct._pointwise("ln", "forward", m * d, m * d, 8 * m * d, e),
                ct._gemm("head", "forward", m, v, d, e),
                ct._pointwise("cross_entropy", "forward", m * v, m, 4 * m * v, e)]
    head = ct._linear_backward("head", m, d, v, e)
    return [ct._pointwise("cross_entropy.backward", "backward", m * v, m * v, 4 * m * v, e),
            head[0], head[2]]


def _kernels_s(cluster: Cluster, kernels, dtype: str) -> float:
    eff = ct.PRESET_GEMM_EFFICIENCY[dtype]
    return sum(ct.kernel_s(cluster, k, dtype, eff) for k in kernels)


def dp_cluster(cluster: Cluster, layout: Layout) -> tuple[Cluster, bool]:
    """The cluster a data-parallel group's AllReduce runs on and whether its ranks are one per
    node (a model replica of tp x pp >= a node's GPUs puts each dp rank in its own node)."""
    per_node = cluster.gpus_per_node
    replica = layout.tp * layout.pp
    if replica >= per_node:
        return cluster.with_nodes(layout.dp), True
    in_node = per_node // replica
    return cluster.with_nodes(max(1, math.ceil(layout.dp / in_node))), False


def parallel_step(shape: ct.GptShape, cluster: Cluster, layout: Layout) -> ParallelStep:
    """One step of `shape` (its batch: the microbatch; its layers: the whole model's) on
    `layout.gpus` GPUs of `cluster` (nodes of cluster.gpus_per_node GPUs)."""
    if shape.batch != layout.microbatch:
        raise ParallelLayoutError(f"shape.batch must be the layout's microbatch "
                                  f"{layout.microbatch}, got {shape.batch}; build the shape "
                                  "with batch=microbatch")
    if layout.tp > cluster.gpus_per_node or shape.heads % layout.tp:
        raise ParallelLayoutError(f"layout.tp must divide the heads ({shape.heads}) and fit "
                                  f"a node ({cluster.gpus_per_node} GPUs), got {layout.tp}")
    if layout.pp > shape.layers:
        raise ParallelLayoutError(f"layout.pp must be at most the layers ({shape.layers}), "
                                  f"got {layout.pp}")
    layers = math.ceil(shape.layers / layout.pp)
    dtype, tp = shape.dtype, layout.tp
    fwd = layers * _kernels_s(cluster, layer_kernels(shape, tp, layout.attention, False), dtype) \
        + _kernels_s(cluster, head_kernels(shape, tp, False), dtype)
    bwd = layers * _kernels_s(cluster, layer_kernels(shape, tp, layout.attention, True), dtype) \
        + _kernels_s(cluster, head_kernels(shape, tp, True), dtype)
    act_bytes = shape.tokens * shape.d_model * shape.itemsize
    node = cluster.with_nodes(1)
    ar = float(choose_plan("allreduce", act_bytes, tp, node, tp).time_s) if tp > 1 else 0.0
    fwd_ars, bwd_ars = 2 * layers, 2 * layers + (2 * layers if layout.recompute else 0)
    if layout.recompute:
        bwd += fwd - _kernels_s(cluster, head_kernels(shape, tp, False), dtype)
    send = 0.0
    if layout.pp > 1:  # the activations to the next stage, split over the tp ranks' NICs
        send = cluster.nic.latency_s + act_bytes / tp / cluster.nic.bandwidth_Bps
    forward_s, backward_s = fwd + fwd_ars * ar + send, bwd + bwd_ars * ar + send
    params = ct.parameter_count(shape) / (tp * layout.pp)
    dp_s = 0.0
    if layout.dp > 1:
        group, one_per_node = dp_cluster(cluster, layout)
        dp_s = float(choose_plan("allreduce", params * layout.grad_bytes, layout.dp, group,
                                 layout.dp, one_per_node).time_s)
    return ParallelStep(forward_s, backward_s, (fwd_ars + bwd_ars) * ar,
                        layout.microbatches + layout.pp - 1, dp_s,
                        ct.adamw_s(cluster, int(params)))
