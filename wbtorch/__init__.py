"""The workbench inside PyTorch training (the `gpu` extra; design note 50): generated kernels
of a chosen schedule run on torch CUDA tensors, from a training loop, under torchrun.

- `DataParallelOptimizer` (wbtorch.optim): "DDP AllReduce + optimizer.step()" replaced by one
  generated fused kernel per gradient bucket, the schedule chosen per bucket (wbtorch.choice),
  the NCCL + torch step a candidate like any other.
- `RowParallelLinear` (wbtorch.tp): a tensor-parallel layer whose forward is a schedule of the
  model-parallel layer's program (MatMul, AllReduce, bias and residual fused).
- `wbtorch.buckets`, `wbtorch.programs`, `wbtorch.choice`: bucketing, slicing, state and the
  program's roles, without torch (tested in CI).

It lives beside the CLI, not in `workbench/` (the core may import nothing above it, and this
drives the runtime): `import wbtorch` needs neither torch nor a GPU; torch, pycuda and nccl4py
are imported when an optimizer is built.
"""

from __future__ import annotations


def __getattr__(name: str):
    # Lazy: `wbtorch.DataParallelOptimizer` imports the optimizer (and torch) on first use.
    if name == "DataParallelOptimizer":
        from wbtorch.optim import DataParallelOptimizer

        return DataParallelOptimizer
    if name == "RowParallelLinear":
        from wbtorch.tp import RowParallelLinear

        return RowParallelLinear
    raise AttributeError(f"module 'wbtorch' has no attribute {name!r}")


__all__ = ["DataParallelOptimizer", "RowParallelLinear"]
