#!/usr/bin/env bash
# Second device run: GPU tests of the current templates, then the fused collectives with 1 and
# 2 vectors per thread per iteration (--unroll). Same conventions as run_all.sh.
#   usage: bash benchmarks/gpu/run_unroll.sh [P]
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 WB_CACHE_DIR=/tmp/wb-cubin
P=${1:-2}
OUT=${OUT:-/tmp/wb-out}
RES=/tmp/wb-res
mkdir -p "$OUT" "$RES"
REPO=$(pwd)
trap 'tar czf "$OUT"/results.tgz -C "$RES" .' EXIT
t0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - t0 )) s] $*"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$REPO
stamp "GPU tests"
python3 -m pytest -q -p no:cacheprovider tests/runtime -k "dying or sgd" 2>&1 \
  | tee "$RES"/pytest.log | tail -5
WB="python3 -m workbench.cli compile-and-measure --gpus $P --out $RES --schedule fused"
for U in 1 2; do
  stamp "allreduce unroll $U"
  $WB benchmarks/gpu/allreduce.py --set N=2**26 --set N=2**28 --no-baselines --unroll $U \
    --name allreduce-u$U 2> "$RES"/allreduce-u$U.log | tee "$RES"/allreduce-u$U.txt
done
WB="python3 -m workbench.cli compile-and-measure --gpus $P --out $RES --schedule fuse-rs-c-ag"
for U in 1 2; do
  stamp "adam fp32 + mixed unroll $U"
  $WB studies/adam.py studies/adam.py:mixed --set N=2**28 --no-baselines --unroll $U \
    --name adam-u$U 2> "$RES"/adam-u$U.log | tee "$RES"/adam-u$U.txt
done
stamp done
tail -n 2 "$RES"/*.log
