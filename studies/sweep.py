"""The CoCoNet experiments as sweeps: which program of each study runs over which sizes.

`workbench sweep predict|measured|steps` (workbench/cli/sweep.py) runs them; this module is
data (and the labels of its sizes) only, so that the studies import nothing above the core.
"""

from __future__ import annotations

from pathlib import Path

STUDIES_DIR = Path(__file__).resolve().parent

# study label -> (program spec, list of size dicts); sizes follow CoCoNet's figures:
# data parallel (Fig. 10) sweeps the number of parameters, model and pipeline parallel
# (Figs. 11, 12) the tokens per batch at a GPT-3-like hidden size of 12288.
OPTIMIZER_SIZES = [{"N": 2**k} for k in (20, 22, 24, 26, 28)]
LAYER_SIZES = [{"T": t, "H": 12288} for t in (1024, 2048, 4096, 8192)]
# AllReduce + residual + RMSNorm: hidden 4096-16384, tokens from one per rank of 4 GPUs (T must
# divide by P; a single token is the P = 1 GPU script's case) to 8192.
RMSNORM_SIZES = [{"T": t, "H": h} for h in (4096, 8192, 16384) for t in (4, 128, 1024, 8192)]
SWEEPS = {
    "sgd": ("sgd.py", OPTIMIZER_SIZES),
    "sgd-mixed": ("sgd.py:mixed", OPTIMIZER_SIZES),
    "adam": ("adam.py", OPTIMIZER_SIZES),
    "adam-mixed": ("adam.py:mixed", OPTIMIZER_SIZES),
    "lamb": ("lamb.py", OPTIMIZER_SIZES),
    "lamb-mixed": ("lamb.py:mixed", OPTIMIZER_SIZES),
    "model_parallel": ("model_parallel.py", LAYER_SIZES),
    "pipeline": ("pipeline.py", LAYER_SIZES),
    "allreduce_rmsnorm": ("allreduce_rmsnorm.py", RMSNORM_SIZES),
    "allreduce_rmsnorm-bf16": ("allreduce_rmsnorm.py:bf16", RMSNORM_SIZES),
}


def size_label(sizes: dict) -> str:
    """{'N': 268435456} -> 'N=2^28'; powers of two are written as such, so labels sort."""
    def one(k, v):
        return f"{k}=2^{v.bit_length() - 1}" if v > 1 and v & (v - 1) == 0 else f"{k}={v}"

    return ",".join(one(k, int(v)) for k, v in sorted(sizes.items()) if k != "P")


def size_values(label: str) -> dict[str, int]:
    """'H=12288,T=2^13' -> {'H': 12288, 'T': 8192}: the inverse of size_label."""
    def value(text: str) -> int:
        base, _, exp = text.partition("^")
        return int(base) ** int(exp) if exp else int(base)

    return {k: value(v) for k, v in (item.split("=") for item in str(label).split(","))}


def size_order(label: str) -> tuple:
    """A key that sorts size labels by their numbers ('T=128' before 'T=2^10'), not as
    text."""
    return tuple(sorted(size_values(label).items()))
