#!/usr/bin/env bash
# 8 GPUs of one NVSwitch node (nvidia-h200-x8): nccl-tests' busbw of AllReduce, AllGather and
# ReduceScatter at 16 MiB .. 4 GiB, NCCL's choice and NCCL_ALGO=Ring, against the dgx-h200
# preset's model (design note 38: the ring at NCCL's 18 x 20.6 = 370.8 GB/s; NVLS stays off on
# device machines). From the repo root with `.whl` carried.
#   usage: bash benchmarks/gpu/run_nccl_busbw.sh
set -uo pipefail
source "$(dirname "$0")/env.sh"
pack_results
stamp "machine"
nvidia-smi -L
stamp "wheels"
install_wheels || exit 1
stamp "NCCL's choice (NVLS off)"
timeout 900 python3 benchmarks/gpu/nccl_busbw.py --gpus 8 --preset dgx-h200 \
  --out "$RES"/busbw-default.json 2> "$RES"/busbw-default.log | tee "$RES"/busbw-default.txt
stamp "NCCL_ALGO=Ring"
NCCL_ALGO=Ring timeout 900 python3 benchmarks/gpu/nccl_busbw.py --gpus 8 --preset dgx-h200 \
  --out "$RES"/busbw-ring.json 2> "$RES"/busbw-ring.log | tee "$RES"/busbw-ring.txt
stamp "done"
