#!/usr/bin/env bash
# One GPU (P = 1): the activation kernel of studies/activations.py (f32, f16) compiled,
# checked against the reference interpreter and timed, and the GPU tests of codegen (nvcc
# builds of every study's kernels, the math functions' kernel). From the repo root with `.whl`
# carried (the pycuda sdist is built there).
#   usage: bash benchmarks/gpu/run_activations.sh
set -uo pipefail
source "$(dirname "$0")/env.sh"
pack_results
stamp "machine"
nvidia-smi -L
stamp "wheels"
install_wheels || exit 1
ensure_pycuda || exit 1
stamp "activations, one rank"
timeout 200 python3 -m workbench.cli.main compile-and-measure --gpus 1 --no-baselines --reps 50 \
  studies/activations.py studies/activations.py:f16 --set N=2**24 \
  --set N=2**26 --out "$RES" --name activations-p1 2> "$RES"/activations.log \
  | tee "$RES"/activations.txt
tail -3 "$RES"/activations.log
stamp "math kernel compiles, GPU test of one rank"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/workbench/test_math_functions.py \
  tests/runtime/test_gpu_end_to_end.py -k "math or sgd" 2>&1 | tail -5
stamp "done"
