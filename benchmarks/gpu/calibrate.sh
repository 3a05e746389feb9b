#!/usr/bin/env bash
# One calibration run on the GPU machine, from the repo root, with `.whl` carried: install the
# carried wheels, then `workbench calibrate --gpus P` (microbenchmarks only, no study), writing
# the profile and its raw measurements under $OUT (a flat folder: few files come back).
#   usage: bash benchmarks/gpu/calibrate.sh [P]
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
OUT=${OUT:-/tmp/wb-out}
mkdir -p "$OUT"
stamp "machine"
nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, 'gpus', torch.cuda.device_count(), 'nccl', torch.cuda.nccl.version())"
stamp "wheels"
install_wheels || exit 1
stamp "calibrate"
python3 -m workbench.cli.main calibrate --gpus "$P" --out "$OUT"/profile.json 2>"$OUT"/calibrate.log
rc=$?
stamp "done rc=$rc"
tail -5 "$OUT"/calibrate.log
exit $rc
