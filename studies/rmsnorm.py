"""Row kernels on one GPU (P = 1), checked against the reference interpreter and timed by
`harness.py replay-rmsnorm`: the axis reductions (sum, max, min, mean, norm over the last
axis), RMSNorm, LayerNorm and softmax (each as written, and fused into one row kernel), and
residual + RMSNorm (h = x + r; out = rms_norm(h, g)) fused into one kernel returning both, the
kernel timed against a torch.compile'd residual + RMSNorm (benchmarks/gpu/rmsnorm_vs_torch.py).

Programs: `program` (residual + RMSNorm, f16), and NAME_DTYPE for NAME in residual, axis,
rmsnorm, layernorm, softmax and DTYPE in f16, bf16, f32 (e.g. `rmsnorm.py:softmax_bf16`).
"""

from workbench import (
    Compute,
    Max,
    Mean,
    Min,
    Norm,
    Program,
    ReduceTensor,
    Replicated,
    Size,
    Sum,
    Tensor,
    bfloat16,
    float16,
    float32,
    ir,
    layer_norm,
    rms_norm,
    schedule,
    softmax,
)

T = Size("T")  # rows (tokens)
H = Size("H")  # the reduced axis (hidden size)
sizes = {"T": 128, "H": 4096}
EPS = 1e-6


def _stats(program) -> list[str]:
    """The axis-reduction statements of a program (the helpers name them t0, t1, ...)."""
    return [s.out.name for s in program.stmts if isinstance(s.op, ir.ReduceAxis)]


def residual(dtype):
    """h = x + r; out = RMSNorm(h) * g; returns (out, h). Schedule `fused`: one row kernel."""
    x = Tensor(dtype, [T, H], Replicated, "x")
    r = Tensor(dtype, [T, H], Replicated, "r")
    g = Tensor(dtype, [H], Replicated, "g")
    h = Compute(x + r)
    out = Compute(rms_norm(h, g, EPS))
    program = Program(inputs=[x, r, g], outputs=[out, h], name=f"residual_rmsnorm_{dtype}")

    @schedule(program)
    def fused(s):
        """residual add, mean of squares and normalization in one row kernel"""
        s.fuse(h, *_stats(program), out)

    return program, [fused]


def axis(dtype):
    """Sum, max, min, mean and L2 norm of every row; `fused`: all five in one pass."""
    x = Tensor(dtype, [T, H], Replicated, "x")
    outs = [ReduceTensor(Sum, x, axis=-1, name="rsum"), ReduceTensor(Max, x, axis=-1, name="rmax"),
            ReduceTensor(Min, x, axis=1, name="rmin"), Mean(x, -1, name="rmean"),
            Norm(x, axis=-1, name="rnorm")]
    program = Program(inputs=[x], outputs=outs, name=f"axis_{dtype}")

    @schedule(program)
    def fused(s):
        """the five reductions in one row kernel"""
        s.fuse(*_stats(program))

    return program, [fused]


def _normalization(kind: str, dtype):
    x = Tensor(dtype, [T, H], Replicated, "x")
    g = Tensor(dtype, [H], Replicated, "g")
    b = Tensor(dtype, [H], Replicated, "b")
    if kind == "rmsnorm":
        out, inputs = Compute(rms_norm(x, g, EPS), name="out"), [x, g]
    elif kind == "layernorm":
        out, inputs = Compute(layer_norm(x, g, b), name="out"), [x, g, b]
    else:
        out, inputs = Compute(softmax(x), name="out"), [x]
    program = Program(inputs=inputs, outputs=[out], name=f"{kind}_{dtype}")

    @schedule(program)
    def fused(s):
        """the statistics and the normalization in one row kernel"""
        s.fuse(*_stats(program), "out")

    return program, [fused]


program, schedules = residual(float16)
_DTYPES = {"f16": float16, "bf16": bfloat16, "f32": float32}
residual_f16, residual_f16_schedules = program, schedules
residual_bf16, residual_bf16_schedules = residual(bfloat16)
residual_f32, residual_f32_schedules = residual(float32)
axis_f16, axis_f16_schedules = axis(float16)
axis_bf16, axis_bf16_schedules = axis(bfloat16)
axis_f32, axis_f32_schedules = axis(float32)
rmsnorm_f16, rmsnorm_f16_schedules = _normalization("rmsnorm", float16)
rmsnorm_bf16, rmsnorm_bf16_schedules = _normalization("rmsnorm", bfloat16)
rmsnorm_f32, rmsnorm_f32_schedules = _normalization("rmsnorm", float32)
layernorm_f16, layernorm_f16_schedules = _normalization("layernorm", float16)
layernorm_bf16, layernorm_bf16_schedules = _normalization("layernorm", bfloat16)
layernorm_f32, layernorm_f32_schedules = _normalization("layernorm", float32)
softmax_f16, softmax_f16_schedules = _normalization("softmax", float16)
softmax_bf16, softmax_bf16_schedules = _normalization("softmax", bfloat16)
softmax_f32, softmax_f32_schedules = _normalization("softmax", float32)
