#!/usr/bin/env bash
# One GPU (P = 1): the row kernels of axis reductions (design notes 40-44).
#  1. checks: every kernel of studies/rmsnorm.py (axis sum/max/min/mean/norm, RMSNorm,
#     LayerNorm, softmax, residual + RMSNorm; as written and fused) and of
#     studies/allreduce_rmsnorm.py (the fused AllReduce + residual + RMSNorm at P = 1) in f16,
#     bf16 and f32, compiled, run on fresh random inputs into poisoned outputs and checked
#     against the reference interpreter (interpreter.RTOL: f32 1e-5, f16 5e-3, bf16 4e-2), at
#     T in {1, 37} x H in {1000, 16384} (a partial block of columns; the largest row cache);
#  2. timing (`time`): the fused residual + RMSNorm kernel at H in {4096, 8192, 16384} x
#     T in {1, 128, 8192}, f16 and bf16, CUDA events, 20 warm-up, 100 reps, median, once per
#     row-kernel variant: b1, b2, b3 = WB_ROW_MIN_BLOCKS 1, 2, 3 (__launch_bounds__(512, b):
#     b blocks of 512 threads resident per SM; b2 is the default, b1 GPU run 24's bound) and
#     b2p = b2 with WB_ROW_PREFETCH=1 (each block prefetches its next row into L2; design
#     note 44); then torch.compile of the same computation on the same GPU, timed once per size
#     (benchmarks/gpu/rmsnorm_vs_torch.py): every variant beside torch (ratio, achieved GB/s,
#     HBM peak fraction) and the fastest variant of each size;
#  3. `study`: the study's schedules (unscheduled, rs-c-ag, fuse-rs-c-ag at P = 1) at the
#     same sizes, f16 and bf16, default variant;
#  4. the nvcc builds of the new kernels (tests/codegen/test_nvcc_compile.py -k rmsnorm).
# Results: $RES (packed as $OUT/results.tgz): rmsnorm-check-*.csv/.json/.txt,
# rmsnorm-time-<dt>-<variant>.csv/.json/.txt, rmsnorm-study-*.csv, rmsnorm-vs-torch.csv/.md, logs.
# From the repo root with `.whl` carried (the pycuda sdist is built there). Each part fits one
# 10-minute device call: `check` (1 and 4, ~5 min), `time` (2, ~8 min), `study` (3, ~4 min);
# `all` runs the three.
#   usage: bash benchmarks/gpu/run_rmsnorm.sh [all|check|time|study]
set -uo pipefail
PART=${1:-all}
case "$PART" in all|check|time|study) ;; *) echo "usage: $0 [all|check|time|study], got $PART"; exit 2;; esac
source "$(dirname "$0")/env.sh"
pack_results
stamp "machine"
nvidia-smi -L
stamp "wheels"
install_wheels || exit 1
ensure_pycuda || exit 1
B=studies/rmsnorm.py
S=studies/allreduce_rmsnorm.py
if [ "$PART" = all ] || [ "$PART" = check ]; then
for dt in f16 bf16 f32; do
  stamp "checks, $dt"
  specs="$B:axis_$dt $B:rmsnorm_$dt $B:layernorm_$dt $B:softmax_$dt $B:residual_$dt"
  [ "$dt" = f16 ] && specs="$specs $S"
  [ "$dt" = bf16 ] && specs="$specs $S:bf16"
  # shellcheck disable=SC2086
  timeout 200 python3 -m workbench.cli.main compile-and-measure --gpus 1 --no-baselines --reps 20 \
    $specs --set T=1 --set T=37 --set H=1000 --set H=16384 \
    --out "$RES" --name "rmsnorm-check-$dt" 2> "$RES/rmsnorm-check-$dt.log" \
    | tee "$RES/rmsnorm-check-$dt.txt"
  tail -3 "$RES/rmsnorm-check-$dt.log"
done
stamp "check summary (rows whose check is not ok)"
grep -h -v ",ok" "$RES"/rmsnorm-check-*.csv | grep -v "^spec," || echo "every check ok"
stamp "nvcc builds of the row kernels"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/codegen/test_nvcc_compile.py \
  -k "rmsnorm or rows" 2>&1 | tail -5
fi
if [ "$PART" = all ] || [ "$PART" = time ]; then
# Variant label: b<min blocks a SM>, "p" when each block prefetches its next row into L2.
# RMS_VARIANTS="b2 b2p" times fewer (each variant is ~50 s of the call's 10 minutes).
VARIANTS=${RMS_VARIANTS:-b1 b2 b3 b2p}
wb_csvs=""
for dt in f16 bf16; do
  for b in $VARIANTS; do
    blocks=${b#b}; blocks=${blocks%p}; pf=0; [ "${b%p}" != "$b" ] && pf=1
    stamp "timing, $dt, $b: WB_ROW_MIN_BLOCKS=$blocks WB_ROW_PREFETCH=$pf"
    # Exported to the ranks too (-x): the variant is mangled into the kernels' names.
    WB_ROW_MIN_BLOCKS=$blocks WB_ROW_PREFETCH=$pf \
      WB_MPIRUN_ARGS="${WB_MPIRUN_ARGS:-} -x WB_ROW_MIN_BLOCKS -x WB_ROW_PREFETCH" \
      timeout 120 python3 -m workbench.cli.main compile-and-measure --gpus 1 \
      --no-baselines --warmup 20 --reps 100 "$B:residual_$dt" --set H=4096 --set H=8192 \
      --set H=16384 --set T=1 --set T=128 --set T=8192 --out "$RES" \
      --name "rmsnorm-time-$dt-$b" 2> "$RES/rmsnorm-time-$dt-$b.log" \
      | tee "$RES/rmsnorm-time-$dt-$b.txt"
    tail -2 "$RES/rmsnorm-time-$dt-$b.log"
    wb_csvs="$wb_csvs $b=$RES/rmsnorm-time-$dt-$b.csv"
  done
done
stamp "torch.compile residual + RMSNorm, same GPU, beside every variant"
# shellcheck disable=SC2086
timeout 200 python3 benchmarks/gpu/rmsnorm_vs_torch.py --warmup 20 --reps 100 --out "$RES" \
  --workbench $wb_csvs 2> "$RES/rmsnorm-vs-torch.log" | tee "$RES/rmsnorm-vs-torch.txt"
tail -3 "$RES/rmsnorm-vs-torch.log"
fi
if [ "$PART" = all ] || [ "$PART" = study ]; then
for dt in f16 bf16; do
  stamp "study schedules, $dt (default row-kernel variant)"
  study="$S"
  [ "$dt" = bf16 ] && study="$S:bf16"
  timeout 240 python3 -m workbench.cli.main compile-and-measure --gpus 1 --no-baselines --warmup 20 \
    --reps 100 "$study" --set H=4096 --set H=8192 --set H=16384 --set T=1 \
    --set T=128 --set T=8192 --out "$RES" --name "rmsnorm-study-$dt" \
    2> "$RES/rmsnorm-study-$dt.log" | tee "$RES/rmsnorm-study-$dt.txt"
  tail -3 "$RES/rmsnorm-study-$dt.log"
done
fi
stamp "done"
