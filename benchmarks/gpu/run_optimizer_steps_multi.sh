#!/usr/bin/env bash
# P GPUs of one host (nvidia-h200-x2: P = 2), issue 17 beyond one GPU (design notes 50-54).
# From the repo root with `.whl` carried.   usage: bash benchmarks/gpu/run_optimizer_steps_multi.sh P
# 1. examples/train_gpt.py, 200 steps, torchrun --nproc_per_node=P: torch DDP + AdamW(fused)
#    against the workbench's DataParallelOptimizer (auto: per-bucket measured choice among the
#    schedules in pull and push modes, 1 or 2 blocks/SM, and NCCL + torch), losses compared;
# 2. --tp at P (every block's attention projection + residual as RowParallelLinear over the
#    P GPUs, every rank reading rank 0's batch): the same training as torch on one GPU, so its
#    losses are compared with a torch run at --nproc_per_node=1;
# 3. compile-and-measure --gpus P, N = 2^26 and 2^28: SGD, Adam, LAMB (fp32, mixed) fused
#    schedule against NCCL + torch fused kernels and NCCL + a torch.compile'd step (the rows of
#    the README's "Results so far" re-measured against the fastest baseline), and the
#    model-parallel layer (fp16, H = 12288, T = 8192) with the compiled epilogue and
#    symmetric-memory fused_matmul_reduce_scatter.
# Exits non-zero when any part failed (each part still runs; the failed ones are named last).
set -uo pipefail
P=${1:?usage: run_optimizer_steps_multi.sh P}
source "$(dirname "$0")/env.sh"
pack_results
failed=()
check() {  # check RC NAME: remember a failed part (its exit status: 124 is its timeout)
  if [ "$1" -ne 0 ]; then echo "PART FAILED: $2 (exit $1)"; failed+=("$2 (exit $1)"); fi
}
stamp "machine"
nvidia-smi -L
install_wheels || exit 1
ensure_pycuda || exit 1
T="torchrun --nproc_per_node=$P examples/train_gpt.py --steps 200"
stamp "1. train_gpt at P=$P: torch DDP, then workbench"
timeout 200 $T --optimizer torch --out "$RES"/train_torch_p$P.json > "$RES"/train_torch_p$P.log 2>&1
check $? "1. train_gpt torch at P=$P"
tail -2 "$RES"/train_torch_p$P.log
timeout 300 $T --optimizer workbench --out "$RES"/train_wb_p$P.json > "$RES"/train_wb_p$P.log 2>&1
check $? "1. train_gpt workbench at P=$P"
grep wbtorch "$RES"/train_wb_p$P.log | head -30
tail -2 "$RES"/train_wb_p$P.log
python3 examples/compare_losses.py "$RES"/train_torch_p$P.json "$RES"/train_wb_p$P.json \
  | tee "$RES"/train_compare.txt
check $? "1. losses workbench vs torch"
stamp "2. --tp over $P GPUs against torch on one"
timeout 200 torchrun --nproc_per_node=1 examples/train_gpt.py --steps 200 --optimizer torch \
  --out "$RES"/train_torch_p1.json > "$RES"/train_torch_p1.log 2>&1
check $? "2. train_gpt torch at P=1"
timeout 300 $T --optimizer workbench --tp --out "$RES"/train_tp_p$P.json \
  > "$RES"/train_tp_p$P.log 2>&1
check $? "2. train_gpt workbench --tp at P=$P"
grep "wbtorch\] tp" "$RES"/train_tp_p$P.log | head -5
tail -2 "$RES"/train_tp_p$P.log
python3 examples/compare_losses.py "$RES"/train_torch_p1.json "$RES"/train_tp_p$P.json \
  | tee -a "$RES"/train_compare.txt
check $? "2. losses --tp vs torch"
stamp "3. compile-and-measure with the compiled baselines"
WB="python3 -m workbench.cli.main compile-and-measure --gpus $P --out $RES --hang-timeout 300"
$WB studies/sgd.py studies/adam.py studies/adam.py:mixed studies/lamb.py studies/lamb.py:mixed \
  --schedule fuse-rs-c-ag --set N=2**26 --set N=2**28 --name optimizer-steps-h200x$P \
  2> "$RES"/optimizers.log | tee "$RES"/optimizers.txt | tail -40
check $? "3. compile-and-measure optimizers"
$WB studies/model_parallel.py --name mp-steps-h200x$P 2> "$RES"/mp.log \
  | tee "$RES"/mp.txt | tail -12
check $? "3. compile-and-measure model_parallel"
grep -h "left out" "$RES"/*.log | head -5
stamp "done"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
