"""Layers written in the DSL's ops, as torch.nn.functional names them: activations and the
normalisations (each a few statements: reductions over an axis and elementwise arithmetic)."""

from __future__ import annotations

from workbench.dsl.ops import Cast, Mean, ReduceTensor, erf, exp, rsqrt, sigmoid, tanh
from workbench.ir import ReduceOp
from workbench.types import float32


def silu(x):
    """SiLU (swish): x * sigmoid(x)."""
    return x * sigmoid(x)


def gelu(x):
    """GeLU, exact (erf) form: 0.5 x (1 + erf(x / sqrt 2)), as torch.nn.functional.gelu."""
    return 0.5 * x * (1.0 + erf(x * 0.7071067811865476))


def gelu_tanh(x):
    """GeLU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as torch's
    gelu(approximate="tanh")."""
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def rms_norm(x, weight, eps: float = 1e-6, axis: int = -1):
    """RMSNorm over `axis`: x * rsqrt(mean(x^2) + eps) * weight, the statistic in f32 and the
    result in x's dtype (as torch.nn.functional.rms_norm computes it)."""
    x32 = Cast(float32, x)
    return Cast(x.type.dtype, x32 * rsqrt(Mean(x32 * x32, axis) + eps) * weight)


def layer_norm(x, weight, bias, eps: float = 1e-5, axis: int = -1):
    """LayerNorm over `axis`: (x - mean) * rsqrt(var + eps) * weight + bias, the statistics in
    f32 and the result in x's dtype (torch.nn.functional.layer_norm, biased variance)."""
    x32 = Cast(float32, x)
    mu = Mean(x32, axis)
    return Cast(x.type.dtype, (x32 - mu) * rsqrt(Mean((x32 - mu) * (x32 - mu), axis) + eps)
                * weight + bias)


def softmax(x, axis: int = -1):
    """Softmax over `axis`, max-subtracted: exp(x - max) / sum(exp(x - max)), in f32 and
    returned in x's dtype."""
    x32 = Cast(float32, x)
    shifted = x32 - ReduceTensor(ReduceOp.Max, x32, axis=axis)
    return Cast(x.type.dtype, exp(shifted) / ReduceTensor(ReduceOp.Sum, exp(shifted),
                                                          axis=axis))
