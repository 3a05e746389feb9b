#!/usr/bin/env bash
# After hoisting scalar-only expressions out of the kernels' loops: Adam fp32 and mixed at
# N = 2^28, unscheduled and fused, checked and timed per step (GPU run 15). Then per-step
# times of the comparison's other misses: the pipeline step at T = 8192 and LAMB mixed at
# N = 2^24. From the repo root with `.whl` carried; results in $OUT/results.tgz.
#   usage: bash benchmarks/gpu/run_hoist.sh [P]
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
pack_results
install_wheels || exit 1
WB="python3 -m workbench.cli.main compile-and-measure --gpus $P --per-step --no-baselines --out $RES"
stamp "adam"
timeout 150 $WB --schedule fuse-rs-c-ag --hang-timeout 100 studies/adam.py studies/adam.py:mixed \
  --set N=2**28 --name adam-hoist-h200x$P 2> "$RES"/adam-hoist.log | tee "$RES"/adam-hoist.txt | cut -c1-150
stamp "pipeline"
timeout 120 $WB --hang-timeout 100 studies/pipeline.py --set T=8192 --set H=12288 \
  --name pipeline-steps-h200x$P 2> "$RES"/pipeline-steps.log | tee "$RES"/pipeline-steps.txt | cut -c1-150
stamp "lamb mixed"
timeout 200 $WB --hang-timeout 150 studies/lamb.py:mixed --set N=2**24 \
  --name lamb-steps-h200x$P 2> "$RES"/lamb-steps.log | tee "$RES"/lamb-steps.txt | cut -c1-150
stamp "done"
