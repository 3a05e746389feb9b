"""Data-parallel Adam with bf16 gradients, fp32 master weights and moments, and the bf16
weights the model reads as an output (studies/adam.py's `mixed`, in bfloat16): the program
`wbtorch.DataParallelOptimizer` runs for a bf16 model (examples/train_gpt.py --precision bf16;
design note 83). Its schedules are studies/adam.py's: in `fuse-rs-c-ag` the fp32 master
weights and the moments stay sliced over the ranks and only the bf16 weights are gathered.
"""

from studies.adam import build
from workbench import bfloat16

sizes = {"N": 2**28}
program, schedules = build(grad_dtype=bfloat16)
