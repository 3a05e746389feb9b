#!/usr/bin/env bash
# Issue 15 on one GPU (P = 1), through the project's runtime (compile-and-measure: fresh random
# inputs, poisoned outputs, every output checked against the reference interpreter):
#  1. checks at T=1024 H=1024 F=4096 N=2^24 of studies/kernel_ops.py's programs: where /
#     comparisons / sizes as numbers (f16 kernel); MatMul + bias + GeLU-tanh in f16, bf16 and
#     f32, unfused (GEMM + generated kernel) and fused (cuBLASLt's GELU_BIAS epilogue through
#     torch._addmm_activation); the erf-form epilogue fused (GEMM + one generated kernel);
#     Reduce (NCCL reduce to rank 0) and ReduceTensor (sum, max); compute + Broadcast; the
#     parameter server (studies/parameter_server.py: Reduce, update, Broadcast); SGD with
#     momentum and weight decay (studies/sgd_momentum.py:sgd_momentum_wd) and Adagrad
#     (studies/adagrad.py), each unscheduled, rs-c-ag(-sliced-state) and fuse-rs-c-ag.
#     One compile-and-measure command per group of programs sharing their sizes (a job's
#     --set must name sizes of every program in it: run 23 stopped at once on that):
#     kernel-ops-checks-thf (T, H, F) and kernel-ops-checks-n (N);
#  2. the Megatron MLP in f16 at T=2048 H=12288 F=49152, sizes whose unscaled random inputs
#     overflowed f16 (the check must say ok, not MISMATCH or REFERENCE NOT FINITE), unfused and
#     with the first GEMM's epilogue fused;
#  3. timing at one Megatron size (T=8192 H=12288 F=49152, f16): MatMul + bias + GeLU-tanh
#     unfused vs fused (workbench), vs torch eager, torch._addmm_activation and torch.compile
#     (benchmarks/gpu/epilogue_torch.py); and the simulator's predictions of the same rows.
# From the repo root with `.whl` carried (the pycuda sdist is built there). Results: $RES as
# CSV/JSON (compile-and-measure) and text, packed into $OUT/results.tgz. Parts 1-2 ("checks")
# and part 3 ("megatron") take ~4-5 min each with the pycuda build: run them as two commands
# where one command may run 10 minutes.
#   usage: bash benchmarks/gpu/run_kernel_ops.sh [checks|megatron|all|dry]
# Exits non-zero when any part failed (each part is still tried; the failed ones are listed).
# `dry` needs no GPU: every compile-and-measure command of the run, with the same arguments, is
# parsed and size-checked by compile-and-measure's own front end, `workbench check`ed per
# program and size set, lowered for its P with each kernel compiled by nvcc, and (parts 1 and
# 2 at the check sizes) its reference interpreter run on the run's inputs
# (benchmarks/gpu/kernel_ops_dry.py); part 3's simulator predictions run too.
set -uo pipefail
source "$(dirname "$0")/env.sh"
PART=${1:-all}
case "$PART" in checks|megatron|all|dry) ;; *)
  echo "usage: $0 [checks|megatron|all|dry], got $PART" >&2; exit 2 ;; esac
FAILED=()
WB="python3 -m workbench.cli.main compile-and-measure"
OPS=studies/kernel_ops.py

# measure NAME LIMIT_S [--no-reference] ARGS...: one compile-and-measure command (programs that
# share their sizes), results in $RES/NAME.*; `dry` runs kernel_ops_dry.py on the same arguments.
measure() {
  local name=$1 limit=$2 ref=""
  shift 2
  if [ "${1:-}" = --no-reference ]; then ref=$1; shift; fi
  if [ "$PART" = dry ]; then
    python3 benchmarks/gpu/kernel_ops_dry.py $ref -- --gpus 1 --no-baselines --out /tmp/wb-dry \
      "$@" --name "$name" || FAILED+=("$name")
    return
  fi
  timeout "$limit" $WB --gpus 1 --no-baselines --out "$RES" "$@" --name "$name" \
    2> "$RES/$name.log" | tee "$RES/$name.txt"
  local rc=${PIPESTATUS[0]}
  grep -h "REFERENCE\|overflow" "$RES/$name.log" | head -3
  tail -3 "$RES/$name.log"
  if [ "$rc" != 0 ]; then echo "FAILED: $name (exit $rc)"; FAILED+=("$name"); fi
}

if [ "$PART" = dry ]; then
  stamp "dry run: front end, workbench check, lowering, nvcc, reference (no GPU)"
else
  pack_results
  stamp "machine"
  nvidia-smi -L
  stamp "wheels"
  install_wheels || exit 1
  ensure_pycuda || exit 1
fi
if [ "$PART" != megatron ]; then
  stamp "1. checks of the new kernels and library calls, one rank: sizes T, H, F"
  measure kernel-ops-checks-thf 150 --reps 20 $OPS $OPS:epilogue_f16 $OPS:epilogue_bf16 \
    $OPS:epilogue_f32 $OPS:epilogue_erf_f16 --set T=1024 --set H=1024 --set F=4096
  stamp "1. checks, one rank: size N (Reduce, Broadcast, parameter server, SGD-wd, Adagrad)"
  measure kernel-ops-checks-n 200 --reps 20 $OPS:reductions $OPS:broadcast \
    studies/parameter_server.py studies/sgd_momentum.py:sgd_momentum_wd \
    studies/adagrad.py --set N=2**24
  stamp "2. Megatron MLP f16 at sizes that overflowed before"
  # dry: the reference at these sizes is minutes of CPU; GPU run 23 computed it (finite)
  measure kernel-ops-mlp 150 $([ "$PART" = dry ] && echo --no-reference) --reps 20 \
    --hang-timeout 140 $OPS:mlp --set T=2048 --set H=12288 --set F=49152
fi
if [ "$PART" != checks ]; then
  stamp "3. MatMul + bias + GeLU at T=8192 H=12288 F=49152 f16: workbench unfused / fused"
  measure kernel-ops-epilogue-megatron 220 $([ "$PART" = dry ] && echo --no-reference) --reps 30 \
    --hang-timeout 180 $OPS:epilogue_f16 --set T=8192 --set H=12288 --set F=49152
  if [ "$PART" != dry ]; then
    stamp "3. the same in torch: eager, _addmm_activation, torch.compile"
    timeout 180 python3 benchmarks/gpu/epilogue_torch.py --T 8192 --H 12288 --F 49152 \
      --dtype f16 --out "$RES"/kernel-ops-epilogue-torch.csv 2>&1 | tail -8
    [ "${PIPESTATUS[0]}" = 0 ] || FAILED+=(epilogue-torch)
  fi
  stamp "predictions (simulator, h100x8 preset, one GPU)"
  PRED=${RES:-/tmp/wb-dry}/kernel-ops-predicted.txt
  mkdir -p "$(dirname "$PRED")"
  : > "$PRED"
  for p in $OPS:epilogue_f16 $OPS:mlp; do
    timeout 60 python3 -m workbench.cli.main simulate $p --hardware h100x8 --set T=8192 --set H=12288 \
      --set F=49152 --set P=1 > "$PRED.one" 2>&1 || FAILED+=("simulate $p")
    tail -4 "$PRED.one" | tee -a "$PRED"
  done
  rm -f "$PRED.one"
fi
if [ "$PART" != dry ]; then
  stamp "summary"
  python3 benchmarks/gpu/kernel_ops_summary.py "$RES" > "$RES"/kernel-ops-summary.md \
    2> "$RES"/summary.log && cat "$RES"/kernel-ops-summary.md
fi
if [ ${#FAILED[@]} -gt 0 ]; then
  stamp "FAILED: ${FAILED[*]}"
  exit 1
fi
stamp "done"
