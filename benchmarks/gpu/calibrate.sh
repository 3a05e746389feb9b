#!/usr/bin/env bash
# One calibration run on the GPU machine, from the repo root, with `.whl` carried: install the
# carried wheels, then `workbench calibrate --gpus P` (microbenchmarks only, no study), writing
# the profile and its raw measurements under $OUT (a flat folder: few files come back).
#   usage: bash benchmarks/gpu/calibrate.sh [P]
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 WB_CACHE_DIR=/tmp/wb-cubin
P=${1:-2}
OUT=${OUT:-/tmp/wb-out}
mkdir -p "$OUT"
REPO=$(pwd)
t0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - t0 )) s] $*"; }
stamp "machine"
nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, 'gpus', torch.cuda.device_count(), 'nccl', torch.cuda.nccl.version())"
stamp "wheels"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$REPO
stamp "calibrate"
python3 -m workbench.cli calibrate --gpus "$P" --out "$OUT"/profile.json 2>"$OUT"/calibrate.log
rc=$?
stamp "done rc=$rc"
tail -5 "$OUT"/calibrate.log
exit $rc
