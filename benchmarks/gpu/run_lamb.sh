#!/usr/bin/env bash
# LAMB on the GPU machine (from the repo root, `.whl` carried): fp32 with the fused schedule
# and the PyTorch/NCCL baselines, then mixed precision with every schedule, N = 2^24..2^28.
# Results go under $OUT as each program finishes (two result sets).
#   usage: bash benchmarks/gpu/run_lamb.sh [P]
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
pack_results
stamp "wheels"
install_wheels || exit 1
WB="python3 -m workbench.cli.main compile-and-measure --gpus $P --out $RES"
SIZES="--set N=2**24 --set N=2**26 --set N=2**28"
stamp "LAMB fp32: unscheduled, fused, baselines"
$WB studies/lamb.py $SIZES --schedule fuse-rs-c-ag --name lamb-h200x$P 2> "$RES"/lamb.log \
  | tee "$RES"/lamb.txt | cut -c1-200
stamp "LAMB mixed: every schedule, baselines"
$WB studies/lamb.py:mixed $SIZES --name lamb-mixed-h200x$P 2> "$RES"/lamb-mixed.log \
  | tee "$RES"/lamb-mixed.txt | cut -c1-200
stamp "done"
