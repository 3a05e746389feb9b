#!/usr/bin/env bash
# Every study's schedules and baselines with the current runtime (mpirun where present,
# NCCL through nccl4py), for the predicted-vs-measured comparison. Three parts, each meant to
# fit the device's 10-minute limit (2x H200, run 10: part a took 320 s; LAMB alone ran past
# 580 s, before the output checks got faster):
#   bash benchmarks/gpu/run_studies.sh P a   SGD, Adam (fp32 and mixed), model-parallel layer
#   bash benchmarks/gpu/run_studies.sh P b   LAMB (fp32 and mixed)
#   bash benchmarks/gpu/run_studies.sh P c   pipeline step
# Sizes are the sweeps' (studies/sweep.py): N = 2^24, 2^26, 2^28; T = 1024 .. 8192, H = 12288.
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
PART=${2:-a}
pack_results
stamp "wheels"
install_wheels || exit 1
# --per-step: each step of every schedule timed too, in as many more runs (NAME.steps.csv)
WB="python3 -m workbench.cli.main compile-and-measure --gpus $P --out $RES --hang-timeout 300 --per-step"
N="--set N=2**24 --set N=2**26 --set N=2**28"
T="--set T=1024 --set T=2048 --set T=4096 --set T=8192 --set H=12288"
run() {  # name, then the compile-and-measure arguments
  local name=$1; shift
  stamp "$name"
  $WB "$@" --name $name-h200x$P 2> "$RES"/$name.log | tee "$RES"/$name.txt | cut -c1-160
  tail -2 "$RES"/$name.log
}
if [ "$PART" = a ]; then
  run sgd studies/sgd.py studies/sgd.py:mixed $N
  run adam studies/adam.py studies/adam.py:mixed $N
  run model_parallel studies/model_parallel.py $T
elif [ "$PART" = b ]; then
  run lamb studies/lamb.py studies/lamb.py:mixed $N
else
  run pipeline studies/pipeline.py $T
fi
stamp "done"
