"""CoCoNet-style workbench: a DSL for distributed ML programs whose computation and
communication are both first-class, schedule transforms over its IR, a cluster simulator,
and a CUDA/NCCL backend. `from workbench import *` gives the DSL.

The DSL's names are imported on first use (PEP 562 `__getattr__`): importing the package, as
every `workbench` command does, must not import sympy, numpy and scipy before `--help` answers.
"""

from __future__ import annotations

import importlib

# Where each public name lives; `from workbench import *` and `workbench.X` import it there.
_HOMES = {
    "workbench.dsl": (
        "AllGather", "AllReduce", "AllToAll", "Broadcast", "Cast", "Compute", "Dropout", "Gather",
        "MatMul", "Max",
        "Mean", "Min", "Norm", "Pipeline", "Prod", "Program", "Reduce", "ReduceScatter",
        "ReduceTensor", "Scalar", "Send", "Size", "Stage", "Sum", "Tensor", "TopK", "Update",
        "Variable",
        "equal", "erf", "exp", "gelu", "gelu_tanh", "greater", "greater_equal", "layer_norm",
        "less", "less_equal", "log", "maximum", "minimum", "not_equal", "rms_norm", "rsqrt",
        "sigmoid", "silu", "softmax", "sqrt", "tanh", "where",
    ),
    "workbench.errors": ("WorkbenchError",),
    "workbench.scheduling": ("schedule",),
    "workbench.types": (
        "WORLD", "Group", "Local", "OnRoot", "P", "Replicated", "Sliced", "bfloat16", "float16",
        "float32", "int32",
    ),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = sorted(_HOME_OF)


def __getattr__(name: str):
    """Import a DSL name from its module on first use and keep it on the package."""
    module = _HOME_OF.get(name)
    if module is None:  # not ours: `from workbench import ir` then imports the submodule
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
