#!/usr/bin/env bash
# The model-parallel layer (CoCoNet Figure 11) on the GPU machine, from the repo root with
# `.whl` carried: the GPU end-to-end test of its schedules at small sizes, then every schedule
# and the PyTorch baselines at H=12288, T=1024..8192 (fp16). Results and logs under $OUT.
#   usage: bash benchmarks/gpu/run_layers.sh [P]
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
pack_results
stamp "machine"
nvidia-smi -L
stamp "wheels"
install_wheels || exit 1
stamp "GPU test: model-parallel schedules end to end"
python3 -m pytest -q -p no:cacheprovider tests/runtime/test_gpu_end_to_end.py \
  -k model_parallel 2>&1 | tee "$RES"/pytest-layers.log | tail -15
# The reference interpreter runs the fp32 MatMul on the CPU (T x H/P x H per rank): quiet for
# a while at T=8192, hence the longer hang timeout.
WB="python3 -m workbench.cli.main compile-and-measure --gpus $P --out $RES --hang-timeout 300"
# Tuning: blocks of the overlapped fused collective (it shares the SMs with cuBLAS).
for B in 16 33 66 132 264; do
  stamp "overlap grid: $B blocks (T=4096, 8192)"
  WB_OVERLAP_BLOCKS=$B $WB studies/model_parallel.py --set T=4096 --set T=8192 --set H=12288 \
    --schedule overlap-mm-fuse-ar-c --no-baselines --name mp-overlap-blocks$B-h200x$P \
    2> "$RES"/mp-overlap-blocks$B.log > "$RES"/mp-overlap-blocks$B.txt
  grep overlap "$RES"/mp-overlap-blocks$B.txt | cut -c1-160
done
BEST=$(python3 -c "
import glob, pandas as pd
rows = []
for f in glob.glob('$RES/mp-overlap-blocks*-h200x$P.csv'):
    d = pd.read_csv(f)
    d = d[(d.schedule == 'overlap-mm-fuse-ar-c') & d.check.str.startswith('ok')]
    rows.append((d.time_ms.sum(), int(f.split('blocks')[1].split('-')[0])))
print(min(rows)[1] if rows else 0)")
stamp "model-parallel layer, H=12288, fp16, overlap grid $BEST blocks (fastest above)"
WB_OVERLAP_BLOCKS=$BEST $WB studies/model_parallel.py --set T=1024 --set T=2048 --set T=4096 \
  --set T=8192 --set H=12288 --name model_parallel-h200x$P 2> "$RES"/model_parallel.log \
  | tee "$RES"/model_parallel.txt | cut -c1-200
stamp "done"
tail -4 "$RES"/model_parallel.log
