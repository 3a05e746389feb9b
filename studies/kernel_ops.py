"""Issue 15's new kernels and library calls, one GPU each (P = 1), for
`harness.py replay-kernel-ops`: a benchmark program file for compile-and-measure, not a study.

    workbench compile-and-measure studies/kernel_ops.py:<name> --gpus 1 --no-baselines

- `program` (where_sizes): where, comparisons and sizes as numbers in one f16 kernel.
- `epilogue_f16`, `epilogue_bf16`, `epilogue_f32`: y = gelu_tanh(x @ w + b); its schedule
  `fuse-mm-epilogue` runs the epilogue in the GEMM (cuBLASLt's GELU_BIAS through torch's
  _addmm_activation), the program as written is the GEMM and one elementwise kernel.
- `epilogue_erf_f16`: h = gelu(x @ w + b), y = h * s (erf form: no library epilogue), two
  statements; fused: the GEMM and one generated epilogue kernel (a single statement that no
  library runs is one kernel already, and fusing it is refused).
- `mlp`: the Megatron MLP in f16 (two MatMuls, GeLU, bias; the row-parallel AllReduce is a
  copy at P = 1) at sizes whose random inputs overflowed f16 before weights were scaled by
  1/sqrt(K) (design note 47); `fuse-mm-epilogue` fuses the first GEMM with its GeLU.
- `reductions`: Reduce (NCCL's reduce to rank 0) and ReduceTensor (sum, max) of an f32 tensor.
- `broadcast`: compute + Broadcast (NCCL's broadcast from rank 0) of an f16 tensor.
"""

import sympy

from workbench import (
    AllReduce,
    Broadcast,
    Compute,
    Local,
    MatMul,
    Max,
    P,
    Program,
    Reduce,
    ReduceTensor,
    Replicated,
    Size,
    Sliced,
    Sum,
    Tensor,
    Variable,
    bfloat16,
    float16,
    float32,
    gelu,
    gelu_tanh,
    less,
    maximum,
    schedule,
    sqrt,
    where,
)

T, H, F = Size("T", multiple_of=P), Size("H", multiple_of=P), Size("F", multiple_of=P)
N = Size("N", multiple_of=P)
# No file-wide `sizes`: its programs have different sizes (T, H, F or N), and a file's `sizes`
# must name sizes of the program loaded (`workbench check` refuses it otherwise). Every size is
# given by --set (`harness.py replay-kernel-ops`).


def where_sizes():
    x = Tensor(float16, [T, H], Replicated, "x")
    b = Tensor(float16, [H], Replicated, "b")
    y = Compute(where(x > b, x / H, x * (1 / sympy.sqrt(H)))
                + maximum(x, 0.0) * less(x, 1.0) + sqrt(F) * (x <= 0), name="y")
    return Program(inputs=[x, b], outputs=[y], name="where_sizes")


def epilogue(dtype, fn=gelu_tanh, name="epilogue"):
    x = Tensor(dtype, [T, H], Replicated, "x")
    w = Tensor(dtype, [H, F], Replicated, "w")
    b = Tensor(dtype, [F], Replicated, "b")
    mm = MatMul(x, w, name="mm")
    y = Compute(fn(mm + b), name="y")
    program = Program(inputs=[x, w, b], outputs=[y], name=name)

    @schedule(program)
    def fuse_mm_epilogue(s):
        """The epilogue in (or right after) the GEMM."""
        s.fuse(mm, y)

    return program, [fuse_mm_epilogue]


def erf_epilogue(dtype, name="epilogue_erf_f16"):
    x = Tensor(dtype, [T, H], Replicated, "x")
    w = Tensor(dtype, [H, F], Replicated, "w")
    b = Tensor(dtype, [F], Replicated, "b")
    mm = MatMul(x, w, name="mm")
    h = Compute(gelu(mm + b), name="h")
    y = Compute(h * 1.5, name="y")
    program = Program(inputs=[x, w, b], outputs=[y], name=name)

    @schedule(program)
    def fuse_mm_epilogue(s):
        """Both epilogue statements as one kernel right after the GEMM."""
        s.fuse(mm, h, y)

    return program, [fuse_mm_epilogue]


def mlp(dtype=float16):
    x = Tensor(dtype, [T, H], Replicated, "x")
    w1 = Tensor(dtype, [H, F], Sliced(1), "w1")
    b1 = Tensor(dtype, [F], Sliced(0), "b1")
    w2 = Tensor(dtype, [F, H], Sliced(0), "w2")
    b2 = Tensor(dtype, [H], Replicated, "b2")
    mm1 = MatMul(x, w1, name="mm1")
    h = Compute(gelu_tanh(mm1 + b1), name="h")
    y = AllReduce(Sum, MatMul(h, w2, name="mm2"), name="y")
    out = Compute(y + b2, name="out")
    program = Program(inputs=[x, w1, b1, w2, b2], outputs=[out], name="mlp")

    @schedule(program)
    def fuse_mm_epilogue(s):
        """The first GEMM with its bias + GeLU (cuBLASLt's GELU_BIAS)."""
        s.fuse(mm1, h)

    return program, [fuse_mm_epilogue]


def reductions():
    g = Tensor(float32, [N], Local, "g")
    x = Tensor(float32, [N], Replicated, "x")
    total = Reduce(Sum, g, root=0, name="total")
    s = ReduceTensor(Sum, x, name="s")
    m = ReduceTensor(Max, x, name="m")
    return Program(inputs=[g, x], outputs=[total, s, m], name="reductions")


def broadcast():
    x = Tensor(float16, [N], Local, "x")
    a = Variable(float32, "a")
    y = Broadcast(Compute(x * a + 1.0, name="y0"), root=0, name="y")
    return Program(inputs=[x, a], outputs=[y], name="broadcast")


program = where_sizes()
epilogue_f16, epilogue_f16_schedules = epilogue(float16, name="epilogue_f16")
epilogue_bf16, epilogue_bf16_schedules = epilogue(bfloat16, name="epilogue_bf16")
epilogue_f32, epilogue_f32_schedules = epilogue(float32, name="epilogue_f32")
epilogue_erf_f16, epilogue_erf_schedules = erf_epilogue(float16)
mlp, mlp_schedules = mlp()
reductions = reductions()
broadcast = broadcast()
