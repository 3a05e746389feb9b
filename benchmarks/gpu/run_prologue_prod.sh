#!/usr/bin/env bash
# Issue 24's last two programs on one GPU: a ReduceTensor(Prod) inside a fused collective
# (tests/programs/users/prod_scale.py, was "not generated") and computation fused before a
# ReduceScatter (tests/programs/users/grad_accum_bf16.py `fuse-cast-rs`: the accumulation,
# the scaled bf16 cast and the ReduceScatter as one kernel, design note 78), and the MoE layer's
# AllToAll chunks overlapped with the expert GEMMs (studies/moe.py, design note 79; at P = 1
# the exchange is device copies, its NCCL pieces need P > 1) and the peer-memory AllToAll
# kernels fused with the computation around them (the MoE's combine + gate, a scaled cast
# before the dispatch), each compiled, checked against the reference interpreter and timed at
# P = 1.
# Run from the repo root with .whl carried (benchmarks/gpu/env.sh).
source benchmarks/gpu/env.sh
pack_results
install_wheels || exit 1
ensure_pycuda || exit 1
cm() { stamp "compile-and-measure $*"; python3 -m workbench compile-and-measure "$@" --gpus 1 \
         --reps 20 --warmup 5 --out "$RES" --hang-timeout 120 2>&1 | tee -a "$RES"/log.txt; }
cm tests/programs/users/prod_scale.py --set N=2**20 --name prod-p1
cm tests/programs/users/grad_accum_bf16.py --set N=2**26 --name grad-accum-p1
cm studies/moe.py --set T=4096 --set H=4096 --set F=16384 --name moe-p1
cm tests/programs/users/moe_scaled_dispatch.py --set T=4096 --set H=4096 --name moe-dispatch-p1
stamp done
