#!/usr/bin/env bash
# Fused collectives moved by copy engines (schedule fuse-rs-c-ag-ce) against the same fused
# collective on the SMs (fuse-rs-c-ag), checked and timed, per step too: Adam fp32 (with the
# NCCL + torch._fused_adam_ baselines) and mixed, N = 2^24 .. 2^28, then SGD at 2^28. From the
# repo root with `.whl` carried; results in $OUT/results.tgz. Part `chunks`: Adam fp32 at 2^28
# with 4, 8, 16 and 32 pieces per slice (benchmarks/gpu/copy_engine_chunks.py).
#   usage: bash benchmarks/gpu/run_copy_engines.sh [P] [all|chunks]
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
PART=${2:-all}
pack_results
install_wheels || exit 1
WB="python3 -m workbench.cli.main compile-and-measure --gpus $P --per-step --out $RES --hang-timeout 120"
N="--set N=2**24 --set N=2**26 --set N=2**28"
if [ "$PART" = chunks ]; then
  stamp "pieces per slice"
  timeout 200 $WB --no-baselines --set N=2**28 benchmarks/gpu/copy_engine_chunks.py \
    --schedule fuse-rs-c-ag,fuse-rs-c-ag-ce,fuse-rs-c-ag-ce4,fuse-rs-c-ag-ce16,fuse-rs-c-ag-ce32 \
    --name ce-chunks-h200x$P 2> "$RES"/ce-chunks.log | tee "$RES"/ce-chunks.txt | cut -c1-150
  tail -3 "$RES"/ce-chunks.log
  stamp "done"
  exit 0
fi
stamp "adam"
timeout 300 $WB --schedule fuse-rs-c-ag,fuse-rs-c-ag-ce studies/adam.py $N \
  --name adam-ce-h200x$P 2> "$RES"/adam-ce.log | tee "$RES"/adam-ce.txt | cut -c1-150
tail -3 "$RES"/adam-ce.log
stamp "adam mixed, sgd"
timeout 200 $WB --no-baselines --schedule fuse-rs-c-ag,fuse-rs-c-ag-ce studies/adam.py:mixed \
  studies/sgd.py --set N=2**28 --name opt-ce-h200x$P 2> "$RES"/opt-ce.log \
  | tee "$RES"/opt-ce.txt | cut -c1-150
tail -3 "$RES"/opt-ce.log
stamp "done"
