"""The GPU runtime: one process per GPU, generated kernels compiled with nvcc and launched
through pycuda on the primary context, cuBLAS MatMuls through torch, NCCL collectives through
nccl4py (torch.distributed where nccl4py is missing), every output checked against the
reference interpreter, timed with CUDA events.

Pieces: `launcher` (the ranks under mpirun, or spawned one per session where there is no MPI;
a rank that exits non-zero or stays silent for --hang-timeout ends them all), `comm` (the host
exchange through mpi4py or torch.distributed's store, the NCCL communicator), `worker` (one
rank's job; rank 0 rewrites its results after every record), `job` (P ranks of one job launched
and their results read back), `gpu` (a rank's device, context, NCCL calls, kernels, GEMMs),
`executor` (PlanRun: buffers, CUDA IPC peer mappings, launches, timing), `chunked` (overlapped
chunks on two streams, copy-engine pieces), `compiler` (nvcc -> cubin cache keyed by kernel
name), `checks` (inputs, references, comparisons), `baselines` (what users run: NCCL + PyTorch
optimizers, cuBLAS + NCCL + torch epilogues), `calibrate` and `calibrate_*` (the calibration
runs). The commands that drive them are in `workbench/cli/measure.py`.

GPU libraries (pycuda, torch, mpi4py, nccl4py) are imported inside functions only: importing
this package, and running every other workbench command, needs none of them.
"""
