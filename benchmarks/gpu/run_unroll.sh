#!/usr/bin/env bash
# Second device run: GPU tests of the current templates, then the fused collectives with 1 and
# 2 vectors per thread per iteration (--unroll). Same conventions as run_all.sh.
#   usage: bash benchmarks/gpu/run_unroll.sh [P]
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
pack_results
install_wheels || exit 1
stamp "GPU tests"
python3 -m pytest -q -p no:cacheprovider tests/runtime -k "dying or sgd" 2>&1 \
  | tee "$RES"/pytest.log | tail -5
WB="python3 -m workbench.cli.main compile-and-measure --gpus $P --out $RES --schedule fused"
for U in 1 2; do
  stamp "allreduce unroll $U"
  $WB studies/allreduce.py --set N=2**26 --set N=2**28 --no-baselines --unroll $U \
    --name allreduce-u$U 2> "$RES"/allreduce-u$U.log | tee "$RES"/allreduce-u$U.txt
done
WB="python3 -m workbench.cli.main compile-and-measure --gpus $P --out $RES --schedule fuse-rs-c-ag"
for U in 1 2; do
  stamp "adam fp32 + mixed unroll $U"
  $WB studies/adam.py studies/adam.py:mixed --set N=2**28 --no-baselines --unroll $U \
    --name adam-u$U 2> "$RES"/adam-u$U.log | tee "$RES"/adam-u$U.txt
done
stamp done
tail -n 2 "$RES"/*.log
