#!/usr/bin/env bash
# Third device run: fused collectives with the reduce-scatter by peer loads (pull) against peer
# stores into staging buffers (push), N=2^26 and 2^28, every result checked.
#   usage: bash benchmarks/gpu/run_push.sh [P]
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
for M in push pull; do
  stamp "mode $M"
  python3 -m workbench.cli compile-and-measure --gpus "$P" --out "$RES" \
    --schedule fused,fuse-rs-c-ag --no-baselines --collective-mode $M \
    benchmarks/gpu/allreduce.py studies/adam.py studies/adam.py:mixed \
    --set N=2**26 --set N=2**28 --name fused-$M 2> "$RES"/fused-$M.log | tee "$RES"/fused-$M.txt
done
stamp done
tail -n 3 "$RES"/fused-push.log
