#!/usr/bin/env bash
# Why Adam's w1 update (and LAMB's u) take up to 60 % longer on two ranks than alone on one
# GPU (GPU runs 15 and 17), per step, with both GPUs' SM clocks, power and clock-event
# reasons logged every 50 ms (GPU run 18):
#   1. studies/elementwise_ops.py's kernels on two ranks, no NCCL (is it the machine?);
#   2. the unscheduled Adam fp32 and mixed programs, as in run 15;
#   3. studies/after_allreduce.py: w1 straight after the AllReduce, and the mixed
#      program with w1's division and square root replaced by multiplies.
# From the repo root with `.whl` carried; results in $OUT/results.tgz.
#   usage: bash benchmarks/gpu/run_rank_effects.sh [P]
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
pack_results
install_wheels || exit 1
nvidia-smi --query-gpu=index,name,clocks.max.sm,clocks.applications.graphics,power.limit \
  --format=csv > "$RES"/gpu.csv
REASONS=clocks_event_reasons.active
nvidia-smi --query-gpu=$REASONS --format=csv > /dev/null 2>&1 || REASONS=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,$REASONS \
  --format=csv,nounits -lms 50 > "$RES"/clocks.csv 2>&1 &
SMI=$!
trap 'kill $SMI 2>/dev/null; tar czf "$OUT"/results.tgz -C "$RES" .' EXIT
WB="python3 -m workbench.cli.main compile-and-measure --gpus $P --no-baselines --reps 100 --out $RES"
OPS=studies/elementwise_ops.py
AAR=studies/after_allreduce.py
stamp "ops on $P ranks"
timeout 150 $WB $OPS:muls $OPS:adam_w1 $OPS:sqrts8 --set N=2**28 --name ops-h200x$P \
  2> "$RES"/ops.log | tee "$RES"/ops.txt | cut -c1-150
tail -2 "$RES"/ops.log
stamp "adam unscheduled"
timeout 200 $WB --per-step --schedule unscheduled studies/adam.py studies/adam.py:mixed \
  --set N=2**28 --name adam-steps-h200x$P 2> "$RES"/adam-steps.log \
  | tee "$RES"/adam-steps.txt | cut -c1-150
tail -2 "$RES"/adam-steps.log
stamp "after allreduce"
timeout 150 $WB --per-step $AAR:w1_first $AAR:muls_third --set N=2**28 \
  --name after-ar-h200x$P 2> "$RES"/after-ar.log | tee "$RES"/after-ar.txt | cut -c1-150
tail -2 "$RES"/after-ar.log
stamp "done"
