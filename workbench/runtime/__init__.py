"""The GPU runtime: one process per GPU, generated kernels compiled with nvcc and launched
through pycuda on the primary context, NCCL collectives through torch.distributed, every output
checked against the reference interpreter, timed with CUDA events.

Pieces: `launcher` (P processes, each in its own session; a rank that exits non-zero or stays
silent for --hang-timeout ends them all), `worker` (one rank's job), `executor` (buffers, CUDA
IPC peer mappings, launches, NCCL steps), `compiler` (nvcc -> cubin cache keyed by kernel name),
`checks` (inputs, references, comparisons), `baselines` (NCCL + PyTorch fused optimizers),
`report` (pandas table), `cli` (`compile-and-measure`, `calibrate`).

Bootstrap: torch.distributed's TCP store (MASTER_ADDR/PORT from the launcher) sets up NCCL and
carries the CUDA IPC handles; mpi4py is not needed, which keeps the launcher's fault handling in
one place (mpirun would add its own process tree to watch).

GPU libraries (pycuda, torch) are imported inside functions only: importing this package, and
running every other workbench command, needs none of them.
"""
