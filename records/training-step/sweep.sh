#!/usr/bin/env bash
# The sweep behind studies/results/training-step/README.md (no GPU; a few minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=studies/results/training-step
HW="--hardware dgx-h100 --hardware aws-p5 --hardware dgx-a100"
NODES="--nodes 1 --nodes 2 --nodes 4 --nodes 16 --nodes 64"
workbench simulate-step --d-model 1024 --layers 8 --heads 8 --batch 16 $HW $NODES \
    --csv $OUT/sweep-101m-b16.csv > $OUT/sweep-101m-b16.txt
workbench simulate-step --d-model 1024 --layers 8 --heads 8 --batch 1 $HW $NODES \
    --csv $OUT/sweep-101m-b1.csv > $OUT/sweep-101m-b1.txt
workbench simulate-step --d-model 2048 --layers 16 --heads 16 --batch 1 $HW $NODES \
    --csv $OUT/sweep-806m-b1.csv > $OUT/sweep-806m-b1.txt
workbench simulate-step --d-model 2048 --layers 16 --heads 16 --batch 16 $HW $NODES \
    --csv $OUT/sweep-806m-b16.csv > $OUT/sweep-806m-b16.txt
# the optimistic bound: a fused collective's peer traffic beside backward's kernels
workbench simulate-step --d-model 2048 --layers 16 --heads 16 --batch 1 $HW $NODES --fused beside \
    --csv $OUT/beside-806m-b1.csv > $OUT/beside-806m-b1.txt
workbench simulate-step --d-model 1024 --layers 8 --heads 8 --batch 16 $HW $NODES --fused beside \
    --csv $OUT/beside-101m-b16.csv > $OUT/beside-101m-b16.txt
# with the autotuner's candidates (hierarchical splits, the pipelined hierarchy) across nodes
workbench simulate-step --d-model 2048 --layers 16 --heads 16 --batch 1 --hardware dgx-h100 \
    --nodes 2 --nodes 16 --autotune --schedule all --csv $OUT/autotune-806m-b1.csv \
    > $OUT/autotune-806m-b1.txt
# every schedule of studies/adam.py, after and in backward, on 1 and 16 DGX H100 nodes
workbench simulate-step --d-model 2048 --layers 16 --heads 16 --batch 1 --hardware dgx-h100 \
    --nodes 1 --nodes 16 --schedule all --csv $OUT/schedules-806m-b1.csv > $OUT/schedules-806m-b1.txt
python benchmarks/training_step_summary.py $OUT > /dev/null
