"""The model-parallel study's layer (studies/model_parallel.py) as a training layer uses it:
a row-parallel MatMul, AllReduce of the partial sums, bias and residual; without the study's
dropout, whose mask is fixed by a seed in the program (the same mask every step would not be
dropout), and in the dtype of the model (fp32 by default). The schedules are the study's:
`fuse-ar-c` (the epilogue on slices inside a FusedAllReduce) and `overlap-mm-fuse-ar-c` (that,
overlapped chunk by chunk with the MatMul). wbtorch.tp.RowParallelLinear runs it."""

from studies.model_parallel import build
from workbench import float16, float32

sizes = {"T": 2048, "H": 256}

program, schedules = build(float32, dropout=None, name="tp_linear")
f16, f16_schedules = build(float16, dropout=None, name="tp_linear")
