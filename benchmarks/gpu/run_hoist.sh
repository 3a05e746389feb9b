#!/usr/bin/env bash
# After hoisting scalar-only expressions out of the kernels' loops: Adam fp32 and mixed at
# N = 2^28, unscheduled and fused, checked and timed per step (GPU run 15). From the repo
# root with `.whl` carried; results in $OUT/results.tgz.
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
pack_results
install_wheels || exit 1
stamp "adam"
timeout 150 python3 -m workbench.cli compile-and-measure --gpus $P --per-step --no-baselines \
  --schedule fuse-rs-c-ag --out $RES --hang-timeout 100 studies/adam.py studies/adam.py:mixed \
  --set N=2**28 --name adam-hoist-h200x$P 2> "$RES"/adam-hoist.log | tee "$RES"/adam-hoist.txt | cut -c1-150
stamp "done"
