#!/usr/bin/env bash
# One GPU (P = 1), issue 17: the workbench inside PyTorch training, and each generated
# optimizer step against what PyTorch users run (design notes 50-54). From the repo root with
# `.whl` carried (the pycuda sdist is built there). Under 8 minutes on one H100.
#   usage: bash benchmarks/gpu/run_torch17.sh
# 1. the GPU tests of wbtorch (DataParallelOptimizer against torch's fused AdamW, state_dict,
#    every schedule and the torch candidate, bad input, train_gpt at 30 steps eager);
# 2. examples/train_gpt.py under torchrun --nproc_per_node=1 for 200 steps (torch.compile'd
#    model) with --optimizer torch (DDP + AdamW fused) and --optimizer workbench (schedule
#    auto: per-bucket measured choice), losses compared step by step (compare_losses.py);
# 3. benchmarks/gpu/torch17_optimizers.py: sgd, sgd-momentum, adam, lamb, adam-mixed at
#    N = 2^24, 2^26, 2^28: generated fuse-rs-c-ag step vs torch fused/foreach, torch.compile,
#    and a D2D copy of the same HBM traffic (CUDA events, 5 warm-up, 50 reps, median).
# 4. compile-and-measure at P = 1 (N = 2^24; the model-parallel layer at T = H = 2048): the
#    tables with the torch.compile baselines and the headline over the fastest baseline.
# Results: $RES/{pytest.txt,train_*.json,train_compare.txt,torch17_optimizers.{csv,md},*.log}
set -uo pipefail
source "$(dirname "$0")/env.sh"
pack_results
stamp "machine"
nvidia-smi -L
stamp "wheels"
install_wheels || exit 1
ensure_pycuda || exit 1
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
stamp "GPU tests of wbtorch"
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/wbtorch -x 2>&1 \
  | tee "$RES"/pytest.txt | tail -15
stamp "train_gpt, 200 steps, torch DDP + AdamW(fused) + torch.compile"
timeout 150 torchrun --nproc_per_node=1 examples/train_gpt.py --optimizer torch --steps 200 \
  --out "$RES"/train_torch.json > "$RES"/train_torch.log 2>&1
tail -3 "$RES"/train_torch.log
stamp "train_gpt, 200 steps, workbench DataParallelOptimizer (auto) + torch.compile"
timeout 150 torchrun --nproc_per_node=1 examples/train_gpt.py --optimizer workbench \
  --steps 200 --out "$RES"/train_workbench.json > "$RES"/train_workbench.log 2>&1
grep wbtorch "$RES"/train_workbench.log | head -20
tail -3 "$RES"/train_workbench.log
python3 examples/compare_losses.py "$RES"/train_torch.json "$RES"/train_workbench.json \
  | tee "$RES"/train_compare.txt
stamp "optimizer steps against torch fused/foreach, torch.compile and the copy floor"
timeout 330 torchrun --nproc_per_node=1 benchmarks/gpu/torch17_optimizers.py --out "$RES" \
  > "$RES"/torch17_optimizers.log 2>&1
tail -60 "$RES"/torch17_optimizers.log
cat "$RES"/torch17_optimizers.md
stamp "compile-and-measure at P = 1 with the new baselines (torch.compile'd steps, epilogue)"
timeout 200 python3 -m cli.main compile-and-measure --gpus 1 --reps 20 --hang-timeout 150 \
  studies/sgd.py studies/adam.py studies/lamb.py --set N=2**24 --out "$RES" \
  --name baselines-p1 2> "$RES"/baselines-p1.log | tee "$RES"/baselines-p1.txt | tail -30
timeout 100 python3 -m cli.main compile-and-measure --gpus 1 --reps 20 --hang-timeout 90 \
  studies/model_parallel.py --set T=2048 --set H=2048 --out "$RES" --name mp-p1 \
  2> "$RES"/mp-p1.log | tee "$RES"/mp-p1.txt | tail -12
grep -h "left out" "$RES"/*.log | head -5
stamp "done"
