"""The GPU runtime: one process per GPU, generated kernels compiled with nvcc and launched
through pycuda on the primary context, NCCL collectives through torch.distributed, every output
checked against the reference interpreter, timed with CUDA events.

GPU libraries (pycuda, torch) are imported inside functions only: importing this package, and
running every other workbench command, needs none of them.
"""
