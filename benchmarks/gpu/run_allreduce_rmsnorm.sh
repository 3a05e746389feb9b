#!/usr/bin/env bash
# AllReduce + residual + RMSNorm (studies/allreduce_rmsnorm.py; issues 25 and 27): every
# schedule of the study (unscheduled = NCCL AllReduce + row kernel, rs-c-ag, fuse-rs-c-ag, and
# the whole AllReduce fused with the epilogue: fuse-ar-c two-shot, fuse-ar-c-oneshot,
# fuse-ar-c-lamport), eager and captured in a CUDA graph (--graph: rows "NAME (cuda graph)"),
# beside every baseline (NCCL all_reduce + eager / torch.compile(fullgraph=True) epilogue,
# eager and CUDA-graphed; torch symmetric-memory one_shot_all_reduce / two_shot_all_reduce_ +
# the compiled epilogue, eager and graphed, where the torch build and dtype have them), fp16
# and bf16, on all GPUs of the machine (P = nvidia-smi's count, or WB_GPUS).
#  1. `check`: every schedule compiled, run on fresh random inputs into poisoned (NaN) outputs,
#     checked against the reference interpreter (f16 5e-3, bf16 4e-2 relative), eagerly and
#     again on the outputs the graph replays leave (the launch counters, barriers and Lamport
#     buffer rotation across replays), at T in {P, 37 P} x H in {1000 (the scalar path), 16384
#     (the largest row cache)};
#  2. `time`: the same schedules and the baselines, CUDA events, warm-up, median of the reps,
#     at H in AR_H (default 4096 8192 16384) x T in AR_T (default 1 128 1024 8192; a T below P
#     is raised to P: T must divide by P), each dtype; then a summary table per size: every
#     schedule eager and graphed, the fastest baseline, the ratio.
# At P = 1 the collectives are degenerate (no NVLink traffic): the run checks the kernels and
# times the epilogue forms against the compiled torch baseline; it is not the target
# measurement, which is P = 2 (issue 27).
# Results: $RES (packed as $OUT/results.tgz): ar-rmsnorm-check-<dt>.*, ar-rmsnorm-time-<dt>.*,
# ar-rmsnorm-summary.md, logs. From the repo root with `.whl` carried (pycuda is built there
# from its sdist unless a wheel is carried).
# Device time (one H100, P = 1, run h100x1-llm-allreduce-rmsnorm-p1): pycuda build ~90 s
# unless its wheel is carried in .whl, `check` ~50 s per dtype, `time` ~20 s per size and
# dtype (torch.compile of the epilogue per size included). The default grid (12 sizes x 2
# dtypes) does not fit one 10-minute call: run `check`, then `time` once per dtype
# (AR_DTYPES=f16, AR_DTYPES=bf16), or fewer sizes (AR_H, AR_T).
#   usage: bash benchmarks/gpu/run_allreduce_rmsnorm.sh [all|check|time]
#   knobs: AR_H, AR_T (sizes), AR_DTYPES (default "f16 bf16"), AR_REPS (50), AR_WARMUP (10),
#          AR_TIME_LIMIT (seconds per dtype's timing command, default 300), AR_CHECK_LIMIT
#          (seconds per dtype's checks, default 240)
set -uo pipefail
PART=${1:-all}
case "$PART" in all|check|time) ;; *) echo "usage: $0 [all|check|time], got $PART"; exit 2;; esac
source "$(dirname "$0")/env.sh"
pack_results
stamp "machine"
nvidia-smi -L
P=${WB_GPUS:-$(nvidia-smi -L | grep -c "^GPU ")}
stamp "P = $P"
stamp "wheels"
install_wheels || exit 1
ensure_pycuda || exit 1
S=studies/allreduce_rmsnorm.py
DTYPES=${AR_DTYPES:-f16 bf16}
spec_of() { if [ "$1" = bf16 ]; then echo "$S:bf16"; else echo "$S"; fi; }
if [ "$PART" = all ] || [ "$PART" = check ]; then
for dt in $DTYPES; do
  stamp "checks, $dt, eager and graphed"
  timeout "${AR_CHECK_LIMIT:-240}" python3 -m workbench.cli.main compile-and-measure \
    --gpus "$P" --no-baselines \
    --graph --warmup 2 --reps 20 "$(spec_of "$dt")" --set T="$P" --set T=$((37 * P)) \
    --set H=1000 --set H=16384 --out "$RES" --name "ar-rmsnorm-check-$dt" \
    2> "$RES/ar-rmsnorm-check-$dt.log" | tee "$RES/ar-rmsnorm-check-$dt.txt"
  tail -3 "$RES/ar-rmsnorm-check-$dt.log"
done
stamp "check summary (rows whose check is not ok)"
grep -h -v ",ok" "$RES"/ar-rmsnorm-check-*.csv | grep -v "^spec," || echo "every check ok"
fi
if [ "$PART" = all ] || [ "$PART" = time ]; then
sets=""
for h in ${AR_H:-4096 8192 16384}; do sets="$sets --set H=$h"; done
for t in ${AR_T:-1 128 1024 8192}; do
  [ "$t" -lt "$P" ] && t=$P
  t=$(( (t + P - 1) / P * P ))
  case " $sets " in *" --set T=$t "*) ;; *) sets="$sets --set T=$t";; esac
done
for dt in $DTYPES; do
  stamp "timing, $dt:$sets"
  # shellcheck disable=SC2086
  timeout "${AR_TIME_LIMIT:-300}" python3 -m workbench.cli.main compile-and-measure \
    --gpus "$P" --graph --warmup "${AR_WARMUP:-10}" --reps "${AR_REPS:-50}" "$(spec_of "$dt")" \
    $sets --out "$RES" --name "ar-rmsnorm-time-$dt" \
    2> "$RES/ar-rmsnorm-time-$dt.log" | tee "$RES/ar-rmsnorm-time-$dt.txt"
  tail -3 "$RES/ar-rmsnorm-time-$dt.log"
done
stamp "summary"
# a dtype cut off by its time limit is summarized from the records it wrote so far
files=""
for dt in $DTYPES; do
  f="$RES/ar-rmsnorm-time-$dt.csv"
  [ -f "$f" ] || f="$RES/ar-rmsnorm-time-$dt.partial.json"
  [ -f "$f" ] && files="$files $f"
done
# shellcheck disable=SC2086
python3 benchmarks/gpu/allreduce_rmsnorm_summary.py $files | tee "$RES/ar-rmsnorm-summary.md"
fi
stamp "done"
