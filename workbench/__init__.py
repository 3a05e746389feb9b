"""CoCoNet-style workbench: a DSL for distributed ML programs whose computation and
communication are both first-class, schedule transforms over its IR, a cluster simulator,
and a CUDA/NCCL backend. `from workbench import *` gives the DSL."""

from workbench.dsl import (
    AllGather,
    AllReduce,
    Broadcast,
    Cast,
    Compute,
    Dropout,
    MatMul,
    Max,
    Min,
    Norm,
    Pipeline,
    Prod,
    Program,
    Reduce,
    ReduceScatter,
    ReduceTensor,
    Scalar,
    Send,
    Size,
    Stage,
    Sum,
    Tensor,
    Update,
    Variable,
    erf,
    exp,
    gelu,
    gelu_tanh,
    log,
    maximum,
    minimum,
    rsqrt,
    sigmoid,
    silu,
    sqrt,
    tanh,
)
from workbench.errors import WorkbenchError
from workbench.scheduling import schedule
from workbench.types import (
    WORLD,
    Group,
    Local,
    P,
    Replicated,
    Sliced,
    bfloat16,
    float16,
    float32,
    int32,
)

__all__ = [
    "AllGather", "AllReduce", "Broadcast", "Cast", "Compute", "Dropout", "Group", "Local",
    "MatMul", "Max", "Min", "Norm", "P", "Pipeline", "Prod", "Program", "Reduce", "ReduceScatter",
    "ReduceTensor", "Replicated", "Scalar", "Send", "Size", "Sliced", "Stage", "Sum", "Tensor",
    "Update", "Variable", "WORLD", "WorkbenchError", "bfloat16", "erf", "exp", "float16",
    "float32", "gelu", "gelu_tanh", "int32", "log", "maximum", "minimum", "rsqrt", "schedule",
    "sigmoid", "silu", "sqrt", "tanh",
]

