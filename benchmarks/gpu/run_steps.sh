#!/usr/bin/env bash
# Per-step times (compile-and-measure --per-step) of the steps the comparison misses most:
# Adam fp32 and mixed (unscheduled and rs-c-ag) at N = 2^28, the model-parallel layer at
# T = 8192. From the repo root with `.whl` carried; results in $OUT/results.tgz.
#   usage: bash benchmarks/gpu/run_steps.sh [P]
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
pack_results
install_wheels || exit 1
WB="python3 -m workbench.cli.main compile-and-measure --gpus $P --per-step --no-baselines --out $RES --hang-timeout 120"
stamp "adam"
timeout 200 $WB studies/adam.py studies/adam.py:mixed --set N=2**28 --name adam-steps-h200x$P \
  2> "$RES"/adam-steps.log | tee "$RES"/adam-steps.txt | cut -c1-150
stamp "model_parallel"
timeout 100 $WB studies/model_parallel.py --set T=8192 --set H=12288 --name mp-steps-h200x$P \
  2> "$RES"/mp-steps.log | tee "$RES"/mp-steps.txt | cut -c1-150
stamp "done"
