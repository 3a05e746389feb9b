#!/usr/bin/env bash
# Issue 24 (programs users write, round 3) on one GPU: the new studies (sequence-parallel MLP,
# MoE expert layer) and the user programs whose schedules were accepted but not generated
# before (amax in a fused collective, a read after an Update, compute overlapped with a
# Broadcast, a MatMul overlapped with AllReduce + residual + LayerNorm), each compiled, checked
# against the reference interpreter and timed at P = 1 beside its torch baseline.
# Run from the repo root with .whl carried (benchmarks/gpu/env.sh).
source benchmarks/gpu/env.sh
pack_results
install_wheels || exit 1
ensure_pycuda || exit 1
cm() { stamp "compile-and-measure $*"; python3 -m workbench compile-and-measure "$@" --gpus 1 \
         --reps 20 --warmup 5 --out "$RES" --hang-timeout 120 2>&1 | tee -a "$RES"/log.txt; }
cm tests/programs/users/amax_cast.py tests/programs/users/weight_delta.py \
   studies/parameter_server.py --set N=2**24 --name n-programs-p1
cm studies/sequence_parallel.py studies/moe.py --set T=4096 --set H=4096 --set F=16384 \
   --name sp-moe-p1
cm tests/programs/users/tp_attn_out_layernorm.py --set T=4096 --set H=4096 --name tp-ln-p1
stamp done
