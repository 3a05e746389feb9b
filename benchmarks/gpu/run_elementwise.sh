#!/usr/bin/env bash
# What arithmetic costs inside memory-bound kernels, on one GPU (GPU run 17): the kernels of
# studies/elementwise_ops.py (equal bytes, different arithmetic) at N = 2^24 and 2^28,
# the f16 epilogue with and without dropout; then the unscheduled Adam fp32 and mixed at 2^28
# and LAMB mixed at 2^24 per step on one rank (is the mixed w1 / LAMB u gap of run 15 there
# without peers?). SM and memory clocks and power are logged throughout, and the SASS
# instruction count of every kernel is listed. From the repo root with `.whl` carried;
# results in $OUT/results.tgz.
#   usage: bash benchmarks/gpu/run_elementwise.sh ops|steps
set -uo pipefail
source "$(dirname "$0")/env.sh"
PART=${1:-ops}
pack_results
install_wheels || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv \
  > "$RES"/gpu.csv
REASONS=clocks_event_reasons.active
nvidia-smi --query-gpu=$REASONS --format=csv > /dev/null 2>&1 || REASONS=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$REASONS \
  --format=csv,nounits -lms 100 > "$RES"/clocks-$PART.csv 2>&1 &
SMI=$!
trap 'kill $SMI 2>/dev/null; tar czf "$OUT"/results.tgz -C "$RES" .' EXIT
WB="python3 -m workbench.cli.main compile-and-measure --gpus 1 --no-baselines --reps 50 --out $RES"
OPS=studies/elementwise_ops.py
if [ "$PART" = ops ]; then
stamp "fp32 ops"
timeout 330 $WB $OPS:muls $OPS:div $OPS:sqrt_ $OPS:adam_w1 $OPS:lamb_u $OPS:divs8 $OPS:sqrts8 \
  --set N=2**24 --set N=2**28 --name ops-fp32-h200 2> "$RES"/ops-fp32.log \
  | tee "$RES"/ops-fp32.txt | cut -c1-150
tail -3 "$RES"/ops-fp32.log
stamp "f16 epilogues"
timeout 100 $WB $OPS:bias_residual $OPS:bias_dropout_residual --set T=8192 --set H=12288 \
  --name ops-f16-h200 2> "$RES"/ops-f16.log | tee "$RES"/ops-f16.txt | cut -c1-150
tail -3 "$RES"/ops-f16.log
else
stamp "adam, one rank"
timeout 250 $WB --per-step --schedule unscheduled studies/adam.py studies/adam.py:mixed \
  --set N=2**28 --name adam-steps-h200 2> "$RES"/adam-steps.log \
  | tee "$RES"/adam-steps.txt | cut -c1-150
tail -3 "$RES"/adam-steps.log
stamp "lamb mixed, one rank"
timeout 100 $WB --per-step --schedule unscheduled studies/lamb.py:mixed --set N=2**24 \
  --name lamb-steps-h200 2> "$RES"/lamb-steps.log | tee "$RES"/lamb-steps.txt | cut -c1-150
tail -3 "$RES"/lamb-steps.log
fi
stamp "sass"
CUOBJDUMP=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
for f in "$WB_CACHE_DIR"/wb_elementwise*.cubin; do
  echo "$(basename "$f") $("$CUOBJDUMP" -sass "$f" | grep -cE '^\s+/\*[0-9a-f]{4}\*/')"
done > "$RES"/sass-counts-$PART.txt
for f in "$WB_CACHE_DIR"/wb_elementwise*.cubin; do
  echo "== $(basename "$f")"; "$CUOBJDUMP" -sass "$f" | grep -E '^\s+/\*[0-9a-f]{4}\*/'
done > "$RES"/sass-$PART.txt
wc -l "$RES"/sass-counts-$PART.txt
stamp "done"
