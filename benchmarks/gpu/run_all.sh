#!/usr/bin/env bash
# One device run on the 2x (or 4x) H200 machine, from the repo root, with `.whl` carried:
# install the carried wheels, build pycuda if no wheel of it was carried, run the GPU tests,
# then measure every study schedule and the baselines. Results and logs go under $OUT; the
# result tables are printed last.
#   usage: bash benchmarks/gpu/run_all.sh [P] [quick]
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
MODE=${2:-full}
pack_results

stamp "machine"
nvidia-smi -L
nvidia-smi topo -m 2>&1 | head -4
python3 -c "import torch; print('torch', torch.__version__, 'gpus', torch.cuda.device_count(), 'nccl', torch.cuda.nccl.version())"

stamp "wheels"
install_wheels || exit 1
ensure_pycuda || exit 1
python3 -c "import pycuda, pycuda.driver as d; d.init(); print('pycuda', pycuda.VERSION_TEXT, d.Device(0).name())"

stamp "tests (CPU parts, nvcc compile, GPU end to end, dying rank)"
python3 -m pytest -q -p no:cacheprovider tests/codegen tests/runtime \
  -k "not every_schedule or sgd" 2>&1 | tee "$RES"/pytest.log | tail -12
stamp "no worker left: $(pgrep -fc workbench.runtime.worker || true)"

WB="python3 -m workbench.cli.main compile-and-measure --gpus $P --out $RES"
if [ "$MODE" = quick ]; then
  SIZES="--set N=2**24 --set N=2**28"
else
  SIZES="--set N=2**24 --set N=2**26 --set N=2**28"
fi
stamp "fused AllReduce vs NCCL all_reduce"
$WB studies/allreduce.py --set N=2**24 --set N=2**26 --set N=2**28 \
  --name allreduce-h200x$P 2> "$RES"/allreduce.log | tee "$RES"/allreduce.txt
stamp "tuning: fused AllReduce with 1 block per SM instead of 2"
WB_COLLECTIVE_BLOCKS_PER_SM=1 $WB studies/allreduce.py --set N=2**26 --set N=2**28 \
  --no-baselines --name allreduce-1blk-h200x$P 2> "$RES"/allreduce-1blk.log \
  | tee "$RES"/allreduce-1blk.txt
stamp "SGD fp32 and mixed"
$WB studies/sgd.py studies/sgd.py:mixed $SIZES --name sgd-h200x$P 2> "$RES"/sgd.log \
  | tee "$RES"/sgd.txt
stamp "Adam fp32 and mixed, LAMB"
$WB studies/adam.py studies/adam.py:mixed studies/lamb.py $SIZES --name adam-lamb-h200x$P \
  2> "$RES"/adam.log | tee "$RES"/adam.txt
stamp "done"
for f in allreduce sgd adam; do
  tail -3 "$RES"/$f.log
done
cut -c1-220 "$RES"/allreduce.txt "$RES"/allreduce-1blk.txt "$RES"/sgd.txt "$RES"/adam.txt
