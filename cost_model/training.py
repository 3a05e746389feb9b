"""A training step of the example GPT (examples/train_gpt.py) as kernels the cost model prices
(design note 84): the model's shapes -> its parameters in registration order, the forward and
backward kernels of every layer (GEMMs by their dimensions, elementwise and attention kernels
by their HBM bytes and flops, as torch.compile's fused kernels move them), the gradient
buckets that DDP and wbtorch fill, and the optimizer kernels of torch's side.

No torch: the shapes come from `GptShape` (the example's options), so any scale can be priced
on any preset. The simulator (simulator/training.py) runs these kernels on a GPU's SMs and
its links; this module only says what each kernel does and what it costs alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost_model import efficiency
from cost_model.hardware import Cluster
from cost_model.ops.compute import Work, roofline_s
from workbench.errors import WorkbenchError

# Bytes per element of the dtypes a step may train in (the example trains in f32).
DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2}

# The fraction of a preset's datasheet peak that a large GEMM reaches: the 8192^3 torch.matmul
# that `workbench calibrate` times, on one H200 (records/calibration/h200x2-run10:
# f32 50.63 of 67 TFLOP/s with TF32 off, f16 752.9 and bf16 785.2 of 989). A calibrated
# profile's peak_flops are already such measured rates: there the efficiency is 1.
PRESET_GEMM_EFFICIENCY = {"f32": 50.63 / 67, "f16": 752.9 / 989, "bf16": 785.2 / 989}

# Output tiles of cuBLAS's GEMM kernels (its SIMT SGEMM kernels are named ..._128x128_...,
# _128x64_, _64x64_): a GEMM runs in waves of one tile per SM, and cuBLAS picks the tile that
# fills the SMs best. An assumption of this model (note 84), not a measured tile choice.
GEMM_TILES = ((128, 128), (128, 64), (64, 64))

# DDP's buckets (torch.nn.parallel.DistributedDataParallel): bucket_cap_mb = 25 MiB, and the
# first bucket (the last parameters) capped at 1 MiB (dist._DEFAULT_FIRST_BUCKET_BYTES).
DDP_BUCKET_BYTES = 25 * 2**20
DDP_FIRST_BUCKET_BYTES = 2**20

# HBM passes over the gradients, per element, that each side adds to backward: DDP copies each
# gradient into its bucket scaled by 1/P (read + write, Reducer::mark_variable_ready_dense's
# mul_out) and back after the AllReduce (read + write, gradient_as_bucket_view=False); the
# workbench copies each new gradient into its bucket view (read + write, wbtorch note 63), or,
# as GPU run 30 ran, adds it into the zeroed view (read both, write one).
WB_GRAD_PASSES = {"copy": 2, "add": 3, "lend": 2}
# wbtorch's lend_grads at P = 1 (h/train3, design note 82): a parameter of at least this many
# bytes gets a bucket of its own whose plan reads torch's .grad in place: no pass at all.
LEND_ALONE_BYTES = 4 * 2**20

# torch.optim.AdamW(fused=True) reads weights, gradients and both moments and writes weights
# and moments: 7 passes over the parameters, in one multi-tensor kernel per dtype.
ADAMW_PASSES = (4, 3)


class TrainingShapeError(WorkbenchError):
    """A model description the training step cannot be priced for."""


# Bounds of a shape (issue 40): --layers 1000000 ran for minutes and --batch 2**62 priced
# steps of 10^18 ms. Each is far past any model trained (GPT-3: 96 layers, d_model 12288).
SHAPE_MAX = {"d_model": 1 << 17, "layers": 1024, "heads": 1024, "vocab": 1 << 22,
             "seq": 1 << 20, "batch": 1 << 16}
TOKENS_MAX = 1 << 22  # batch x seq per GPU


def check_work_limits(shape: GptShape) -> None:
    """A TrainingShapeError when `shape` is past SHAPE_MAX or TOKENS_MAX: limits of the time
    and memory a prediction takes, not of what can be priced (`simulate-step --force` goes
    past them)."""
    for name, most in SHAPE_MAX.items():
        value = getattr(shape, name)
        if value > most:
            raise TrainingShapeError(f"{name} must be at most {most} (far past any trained "
                                     f"model's), got {value}; e.g. --{name.replace('_', '-')} "
                                     "8, or pass --force to run anyway")
    if shape.batch * shape.seq > TOKENS_MAX:
        raise TrainingShapeError(f"batch x seq must be at most {TOKENS_MAX} tokens per GPU, got "
                                 f"{shape.batch} x {shape.seq} = {shape.batch * shape.seq}; "
                                 "e.g. --batch 16 --seq 1024, or pass --force to run anyway")


@dataclass(frozen=True, slots=True)
class GptShape:
    """The example GPT's shape (examples/train_gpt.py's options): width, blocks, heads,
    vocabulary (91 characters of examples/data/tiny.txt), sequence length (--block), batch
    per GPU and the dtype it trains in."""

    d_model: int
    layers: int
    heads: int
    vocab: int = 91
    seq: int = 128
    batch: int = 16
    dtype: str = "f32"

    def __post_init__(self):
        for name in ("d_model", "layers", "heads", "vocab", "seq", "batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise TrainingShapeError(f"{name} must be a positive integer, got {value!r}; "
                                         f"e.g. --{name.replace('_', '-')} 8")
        if self.d_model % self.heads:
            raise TrainingShapeError(f"d_model must be a multiple of heads, got d_model "
                                     f"{self.d_model} and heads {self.heads}; pick heads that "
                                     f"divide it (e.g. {math.gcd(self.d_model, 8) or 1})")
        if self.dtype not in DTYPE_BYTES:
            raise TrainingShapeError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got "
                                     f"{self.dtype!r}; the example trains in f32")

    @property
    def tokens(self) -> int:
        """Tokens per GPU per step (batch x seq): the GEMMs' M."""
        return self.batch * self.seq

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]


def parameters(shape: GptShape) -> tuple[tuple[str, int], ...]:
    """(name, elements) of every parameter, in torch's registration order (GPT: tok, pos,
    blocks, ln, head; Block: ln1, ln2, qkv, proj, fc, out; Linear: weight, bias)."""
    d, out = shape.d_model, [("tok.weight", shape.vocab * shape.d_model),
                             ("pos.weight", shape.seq * shape.d_model)]
    linears = (("qkv", d, 3 * d), ("proj", d, d), ("fc", d, 4 * d), ("out", 4 * d, d))
    for i in range(shape.layers):
        out += [(f"blocks.{i}.{ln}.{p}", d) for ln in ("ln1", "ln2") for p in ("weight", "bias")]
        for name, k, n in linears:
            out += [(f"blocks.{i}.{name}.weight", k * n), (f"blocks.{i}.{name}.bias", n)]
    return tuple(out + [("ln.weight", d), ("ln.bias", d), ("head.weight", shape.vocab * d)])


def parameter_count(shape: GptShape) -> int:
    """Elements of all parameters (train_gpt.py's n_params)."""
    return sum(n for _, n in parameters(shape))


@dataclass(frozen=True, slots=True)
class Kernel:
    """One kernel of a step: its name, the phase it runs in, a GEMM's (m, n, k) or None, the
    Work the roofline prices (flops and HBM bytes), and the parameters whose gradients are
    complete once it has run (backward only)."""

    name: str
    phase: str
    work: Work
    gemm: tuple[int, int, int] | None = None
    grads: tuple[str, ...] = ()
    # attention's (batch, heads, seq, head_dim): its key in an efficiency table
    attention: tuple[int, int, int, int] | None = None


def _gemm(name: str, phase: str, m: int, n: int, k: int, e: int, grads=()) -> Kernel:
    """C[m, n] = A[m, k] @ B[k, n]: 2mnk flops, A, B and C through HBM once."""
    return Kernel(name, phase, Work((m * k + k * n + m * n) * e, 2 * m * n * k,
                                    write_bytes=m * n * e), (m, n, k), tuple(grads))


def _pointwise(name: str, phase: str, reads: int, writes: int, flops: int, e: int,
               grads=()) -> Kernel:
    """A fused elementwise kernel that reads and writes these many elements."""
    return Kernel(name, phase, Work((reads + writes) * e, flops, write_bytes=writes * e),
                  None, tuple(grads))


def _attention(name: str, phase: str, shape: GptShape, reads: int, writes: int,
               matmuls: int) -> Kernel:
    """Causal scaled-dot-product attention (a fused kernel: scores never reach HBM): `matmuls`
    T x T x head_dim products per head, half of them masked out and skipped."""
    flops = matmuls * shape.batch * shape.seq * shape.seq * shape.d_model  # 2 x (1/2 causal)
    t = shape.tokens * shape.d_model
    return Kernel(name, phase, Work((reads + writes) * t * shape.itemsize, flops,
                                    write_bytes=writes * t * shape.itemsize),
                  (shape.batch * shape.heads * shape.seq, shape.d_model // shape.heads,
                   shape.seq),
                  attention=(shape.batch, shape.heads, shape.seq, shape.d_model // shape.heads))


def forward_kernels(shape: GptShape) -> tuple[Kernel, ...]:
    """The forward pass as torch.compile runs it: per block the four GEMMs (bias in cuBLAS's
    epilogue), attention, and the fused pointwise kernels between them (LayerNorm; residual
    add + LayerNorm; GeLU; residual add), each reading its inputs and writing its outputs
    once. T tokens x d elements are the unit of activation traffic."""
    d, m, e, F = shape.d_model, shape.tokens, shape.itemsize, "forward"
    t = m * d
    ks = [_pointwise("embed", F, 2 * t, t, t, e)]
    for i in range(shape.layers):
        b = f"blocks.{i}"
        ks += [_pointwise(f"{b}.ln1", F, t, t, 8 * t, e),
               _gemm(f"{b}.qkv", F, m, 3 * d, d, e),
               _attention(f"{b}.attention", F, shape, 3, 1, 2),
               _gemm(f"{b}.proj", F, m, d, d, e),
               _pointwise(f"{b}.residual+ln2", F, 2 * t, 2 * t, 9 * t, e),
               _gemm(f"{b}.fc", F, m, 4 * d, d, e),
               _pointwise(f"{b}.gelu", F, 4 * t, 4 * t, 4 * 8 * t, e),
               _gemm(f"{b}.out", F, m, d, 4 * d, e),
               _pointwise(f"{b}.residual", F, 2 * t, t, t, e)]
    ks += [_pointwise("ln", F, t, t, 8 * t, e), _gemm("head", F, m, shape.vocab, d, e),
           _pointwise("cross_entropy", F, m * shape.vocab, m, 4 * m * shape.vocab, e)]
    return tuple(ks)


def _linear_backward(prefix: str, m: int, k: int, n: int, e: int) -> list[Kernel]:
    """A Linear(k -> n) on m tokens backward: the input's gradient (m x k), the weight's
    (k x n, reduced over the tokens) and the bias's (a column sum of the m x n gradient)."""
    B = "backward"
    return [_gemm(f"{prefix}.dW", B, k, n, m, e, grads=[f"{prefix}.weight"]),
            _pointwise(f"{prefix}.db", B, m * n, n, m * n, e, grads=[f"{prefix}.bias"]),
            _gemm(f"{prefix}.dX", B, m, k, n, e)]


def backward_kernels(shape: GptShape) -> tuple[Kernel, ...]:
    """Backward, last layer first: each Linear's three gradients, attention's backward (five
    T x T products: the scores recomputed, then dV, dP, dQ, dK), GeLU's and LayerNorm's
    backward fused with the residual stream's gradient add; each kernel names the
    parameters whose gradients it completes (a bucket is ready when all its are)."""
    d, m, e, B = shape.d_model, shape.tokens, shape.itemsize, "backward"
    t = m * d
    head = _linear_backward("head", m, d, shape.vocab, e)
    ks = [_pointwise("cross_entropy.backward", B, m * shape.vocab, m * shape.vocab,
                     4 * m * shape.vocab, e),
          head[0], head[2],  # the head has no bias
          _pointwise("ln.backward", B, 3 * t, t, 10 * t, e, grads=["ln.weight", "ln.bias"])]
    for i in reversed(range(shape.layers)):
        b = f"blocks.{i}"
        ks += [*_linear_backward(f"{b}.out", m, 4 * d, d, e),
               _pointwise(f"{b}.gelu.backward", B, 8 * t, 4 * t, 4 * 12 * t, e),
               *_linear_backward(f"{b}.fc", m, d, 4 * d, e),
               _pointwise(f"{b}.ln2.backward", B, 4 * t, t, 10 * t, e,
                          grads=[f"{b}.ln2.weight", f"{b}.ln2.bias"]),
               *_linear_backward(f"{b}.proj", m, d, d, e),
               _attention(f"{b}.attention.backward", B, shape, 5, 3, 5),
               *_linear_backward(f"{b}.qkv", m, d, 3 * d, e),
               _pointwise(f"{b}.ln1.backward", B, 4 * t, t, 10 * t, e,
                          grads=[f"{b}.ln1.weight", f"{b}.ln1.bias"])]
    ks.append(_pointwise("embed.backward", B, 2 * t, (shape.vocab + shape.seq) * d, t, e,
                         grads=["tok.weight", "pos.weight"]))
    return tuple(ks)


def gemm_utilization(m: int, n: int, sms: int) -> float:
    """The fraction of the SMs a GEMM with an m x n output keeps busy: it runs in waves of one
    output tile per SM, the last wave part-full; the best of cuBLAS's tiles (GEMM_TILES)."""
    best = 0.0
    for tm, tn in GEMM_TILES:
        tiles = math.ceil(m / tm) * math.ceil(n / tn)
        best = max(best, tiles / (math.ceil(tiles / sms) * sms))
    return best


def table_flops(cluster: Cluster, kernel: Kernel, dtype: str) -> float | None:
    """A GEMM's or attention's flops as the GPU's efficiency table prices them (the flops
    that at peak rate take the table's time for its shape: cost_model.efficiency), None
    where the table has no entries for its kind and dtype. Attention without attention
    entries is priced as its equivalent GEMM (batch x heads x seq, head_dim, seq)."""
    table, peak = cluster.gpu.efficiency_table, cluster.gpu.flops_for(dtype)
    if not table:
        return None
    t = None
    if kernel.attention is not None:
        t = efficiency.seconds(table, "attention", dtype, kernel.attention, kernel.work.flops,
                               peak)
    if t is None and kernel.gemm is not None:
        t = efficiency.seconds(table, "gemm", dtype, kernel.gemm, kernel.work.flops, peak)
    return None if t is None else t * peak


def kernel_s(cluster: Cluster, kernel: Kernel, dtype: str, gemm_efficiency: float,
             sm_fraction: float = 1.0) -> float:
    """One kernel on `sm_fraction` of the SMs (NCCL's channels hold the rest while a
    collective overlaps it): a launch plus its roofline (`roofline_s`), a GEMM's or
    attention's arithmetic at the GPU's efficiency table's rate for its shape
    (`table_flops`), or where the table has none for its dtype at `gemm_efficiency` of the
    GPU's peak times the waves' utilization of the SMs."""
    w = kernel.work
    flops = w.flops
    if kernel.gemm is not None:
        priced = table_flops(cluster, kernel, dtype)
        if priced is not None:
            flops = priced
        else:
            m, n, _ = kernel.gemm
            flops = flops / (gemm_efficiency * gemm_utilization(m, n, cluster.gpu.sm_count))
    return cluster.gpu.launch_latency_s + float(
        roofline_s(cluster, w.hbm_bytes, flops, dtype, sm_fraction, write_bytes=w.write_bytes))


def fill_buckets(params: tuple[tuple[str, int], ...], itemsize: int, bucket_bytes: int,
                 first_bucket_bytes: int | None = None, alone_bytes: int | None = None
                 ) -> tuple[tuple[str, ...], ...]:
    """Parameter names per bucket, filled in reverse registration order up to `bucket_bytes`
    (the first bucket up to `first_bucket_bytes`, as DDP caps it); a parameter larger than the
    cap gets a bucket of its own (DDP's and wbtorch.buckets' rule), and so does one of at least
    `alone_bytes` (wbtorch's lent gradients, h/train3), while the smaller ones go on filling
    one bucket across it."""
    if bucket_bytes < itemsize:
        raise TrainingShapeError(f"bucket size must hold one element ({itemsize} bytes), got "
                                 f"{bucket_bytes} bytes; e.g. --bucket-mb 25")
    out: list[tuple[str, ...]] = []
    current: list[str] = []
    used = 0
    for name, numel in reversed(params):
        if alone_bytes is not None and numel * itemsize >= alone_bytes:
            out.append((name,))  # its own bucket; the small ones go on filling theirs
            continue
        cap = first_bucket_bytes if first_bucket_bytes and not out else bucket_bytes
        if current and (used + numel) * itemsize > cap:
            out.append(tuple(current))
            current, used = [], 0
        current.append(name)
        used += numel
    if current:
        out.append(tuple(current))
    return tuple(out)


def passes_work(numel: int, itemsize: int, passes: tuple[int, int]) -> Work:
    """A streaming kernel over `numel` elements with (reads, writes) passes."""
    reads, writes = passes
    return Work((reads + writes) * numel * itemsize, 0, write_bytes=writes * numel * itemsize)


def adamw_s(cluster: Cluster, numel: int) -> float:
    """torch's fused AdamW over `numel` f32 parameters (fp32 state): one launch per
    multi-tensor kernel and ADAMW_PASSES over the parameters at the HBM roofline."""
    w = passes_work(numel, 4, ADAMW_PASSES)
    return cluster.gpu.launch_latency_s + float(
        roofline_s(cluster, w.hbm_bytes, 0, write_bytes=w.write_bytes))


def copy_s(cluster: Cluster, numel: int, itemsize: int, passes: tuple[int, int]) -> float:
    """A copy-like kernel (the gradient into or out of a bucket) at the HBM roofline."""
    w = passes_work(numel, itemsize, passes)
    return cluster.gpu.launch_latency_s + float(
        roofline_s(cluster, w.hbm_bytes, 0, write_bytes=w.write_bytes))
