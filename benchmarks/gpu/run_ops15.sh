#!/usr/bin/env bash
# Issue 15 on one GPU (P = 1), through the project's runtime (compile-and-measure: fresh random
# inputs, poisoned outputs, every output checked against the reference interpreter):
#  1. checks at T=1024 H=1024 F=4096 N=2^24 of benchmarks/gpu/ops15.py's programs: where /
#     comparisons / sizes as numbers (f16 kernel); MatMul + bias + GeLU-tanh in f16, bf16 and
#     f32, unfused (GEMM + generated kernel) and fused (cuBLASLt's GELU_BIAS epilogue through
#     torch._addmm_activation); the erf-form epilogue fused (GEMM + one generated kernel);
#     Reduce (NCCL reduce to rank 0) and ReduceTensor (sum, max); compute + Broadcast; the
#     parameter server (studies/parameter_server.py: Reduce, update, Broadcast);
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
#   usage: bash benchmarks/gpu/run_ops15.sh [checks|megatron|all|dry]
# `dry` needs no GPU: it lowers every program and schedule for P = 1, compiles each kernel with
# nvcc and runs the reference interpreter on the run's inputs (benchmarks/gpu/ops15_dry.py).
set -uo pipefail
source "$(dirname "$0")/env.sh"
PART=${1:-all}
if [ "$PART" = dry ]; then
  stamp "dry run: lowering, nvcc, reference (no GPU)"
  python3 benchmarks/gpu/ops15_dry.py
  exit $?
fi
pack_results
stamp "machine"
nvidia-smi -L
stamp "wheels"
install_wheels || exit 1
ensure_pycuda || exit 1
WB="python3 -m cli.main compile-and-measure --gpus 1 --no-baselines --out $RES"
OPS=benchmarks/gpu/ops15.py
if [ "$PART" != megatron ]; then
stamp "1. checks of the new kernels and library calls, one rank"
timeout 200 $WB --reps 20 $OPS $OPS:epilogue_f16 $OPS:epilogue_bf16 $OPS:epilogue_f32 \
  $OPS:epilogue_erf_f16 $OPS:reductions $OPS:broadcast studies/parameter_server.py \
  --set T=1024 --set H=1024 --set F=4096 --set N=2**24 --name ops15-checks \
  2> "$RES"/ops15-checks.log | tee "$RES"/ops15-checks.txt
tail -3 "$RES"/ops15-checks.log
stamp "2. Megatron MLP f16 at sizes that overflowed before"
timeout 150 $WB --reps 20 --hang-timeout 140 $OPS:mlp --set T=2048 --set H=12288 \
  --set F=49152 --name ops15-mlp 2> "$RES"/ops15-mlp.log | tee "$RES"/ops15-mlp.txt
grep -h "REFERENCE\|overflow" "$RES"/ops15-mlp.log | head -3
tail -3 "$RES"/ops15-mlp.log
fi
if [ "$PART" != checks ]; then
stamp "3. MatMul + bias + GeLU at T=8192 H=12288 F=49152 f16: workbench unfused / fused"
timeout 220 $WB --reps 30 --hang-timeout 180 $OPS:epilogue_f16 --set T=8192 --set H=12288 \
  --set F=49152 --name ops15-epilogue-megatron 2> "$RES"/ops15-epilogue.log \
  | tee "$RES"/ops15-epilogue.txt
tail -3 "$RES"/ops15-epilogue.log
stamp "3. the same in torch: eager, _addmm_activation, torch.compile"
timeout 180 python3 benchmarks/gpu/epilogue_torch.py --T 8192 --H 12288 --F 49152 \
  --dtype f16 --out "$RES"/ops15-epilogue-torch.csv 2>&1 | tail -8
stamp "predictions (simulator, h100x8 preset, one GPU)"
for p in $OPS:epilogue_f16 $OPS:mlp; do
  timeout 60 python3 -m cli.main simulate $p --hardware h100x8 --set T=8192 --set H=12288 \
    --set F=49152 --set P=1 2>&1 | tail -4
done | tee "$RES"/ops15-predicted.txt
fi
stamp "summary"
python3 benchmarks/gpu/ops15_summary.py "$RES" > "$RES"/ops15-summary.md 2> "$RES"/summary.log \
  && cat "$RES"/ops15-summary.md
stamp "done"
