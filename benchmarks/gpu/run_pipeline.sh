#!/usr/bin/env bash
# The pipeline-parallel step on the GPU machine (from the repo root, `.whl` carried): its GPU
# tests (both NCCL paths), then every schedule and the NCCL + torch baseline at T = 2048 and
# 8192, H = 12288. With P GPUs: 2 stages of P/2 ranks each.
#   usage: bash benchmarks/gpu/run_pipeline.sh [P]
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
pack_results
stamp "wheels"
install_wheels || exit 1
stamp "GPU tests of the pipeline"
python3 -m pytest -q -p no:cacheprovider tests/runtime/test_gpu_end_to_end.py -k pipeline \
  > "$RES"/pipeline-tests.txt 2>&1
tail -30 "$RES"/pipeline-tests.txt
stamp "pipeline: every schedule and the baseline"
python3 -m workbench.cli.main compile-and-measure studies/pipeline.py --gpus $P --out $RES \
  --hang-timeout 300 --set T=2048 --set T=8192 --set H=12288 --name pipeline-h200x$P \
  2> "$RES"/pipeline.log | tee "$RES"/pipeline.txt | cut -c1-200
tail -40 "$RES"/pipeline.log
stamp "done"
