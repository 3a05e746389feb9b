#!/usr/bin/env bash
# Several GPUs of one host, one device call: the wheels and pycuda once, then lanes side by
# side, each a sequence of steps on its own GPUs (CUDA_VISIBLE_DEVICES), each step bounded so
# the whole call ends inside DEADLINE_S (default 570 s) and every lane's partial results come
# back. Lanes share the host (64 cores on 4x H100) and the NVSwitch fabric, not GPUs: what a
# lane times, its baselines are timed in the same lane under the same neighbours (say so beside
# any number taken from a lane run).
#   usage: bash benchmarks/gpu/run_multi_gpu.sh CALL        (from the repo root, .whl carried)
#   CALL   call1: correctness first on P = 2 (every GPU test, the AllReduce + RMSNorm checks),
#                 training at P = 2 (101M: DDP, the workbench in and after backward, the noise
#                 run), then timings (AllReduce + RMSNorm f16; Adam fp32/mixed)
#          call2: the GPU tests call 1's lanes broke, rerun alone; AllReduce + RMSNorm timed at
#                 H {4096, 16384} x T {128, 1024, 8192} (f16 in lane A, bf16 in lane B); the
#                 model-parallel layer against symmetric-memory and compiled baselines (A);
#                 NVLink by mechanism (the link probe), SGD and LAMB at P = 2 (B)
#          call3: training at P = 2 after design notes 93-94 (806M then 101M: DDP, the noise
#                 run, the workbench after backward and in backward with the split compile,
#                 full and 32-block grids) (A); the rows form of the row kernels at P = 1 on
#                 one GPU (note 91), the model-parallel layer at T = 8192, Adam's fused kernel
#                 in push and pull mode (B)
#          call4 (not run yet: the next session's first call): what run 35 left unrun. Lane A:
#                 the pipelined hierarchy on 2 GPUs as 2 "nodes" (split communicators) and the
#                 overlap tests after note 88; a same-machine calibration; AllReduce + RMSNorm
#                 in the rows form at P = 2; the sequence-parallel MLP and the MoE layer at P = 2.
#                 Lane B: training at P = 1 (806M after notes 93-94, GPU 2 alone), then P = 2
#                 101M with DDP's graph splits off (nosplit) and the 16-block grid
#          call5: training after call 4: at P = 2 the 806M in-backward grid at 32/48/64 blocks
#                 and 101M with 100 MB buckets after backward (A, GPUs 0,1); at P = 1 with
#                 torch's DDP reference and noise runs for the loss check, 806M (B, GPU 2) and
#                 101M (C, GPU 3). Lanes A and C failed at once: every torchrun took port
#                 29500 (each lane has its own TRAIN_MASTER_PORT since)
#          call6: call 5 again with ports apart; at P = 1 the split scope's own host cost
#                 (plain-s) and the graph cut every 4 blocks (wb-ovlsgp4); the host's CPU noted
#          call7 (one GPU is enough: nvidia-h100-x1): 806M at P = 1 alone on its host, the
#                 in-backward grid at 32/48/64 blocks, then torch and the 48-block grid again
#          call8 (nvidia-h100-x1): torch and the 48-block grid twice, with the graph cut every
#                 block and every 2 blocks (host time of the split's pieces)
#          call9 (nvidia-h100-x1): the 48-block grid three times, each with a trace of one step
#          call10 (nvidia-h100-x4): torch's sharded baselines at P = 2 (DDP +
#                 ZeroRedundancyOptimizer, FSDP2) beside DDP and the workbench, 806M (A) and
#                 101M (B); the workbench in backward with CUDA graphs (and DDP's with graphs)
#          call11 (nvidia-h100-x1): 806M at P = 1 with CUDA graphs (--cudagraphs)
#                 on torch plain, after backward and in backward on 48 blocks, twice
#          call12 (nvidia-h100-x1): 101M at P = 1 with CUDA graphs (in backward on 48 blocks)
#                 against torch plain with and without graphs; 806M a third time
#          call13 (nvidia-h100-x2): 101M at P = 2, DDP with graphs against the workbench in
#                 backward with graphs (32 and 48 blocks), twice
# Results: $OUT/results.tgz (lane logs, each step's own results folder), pycuda wheel in $OUT.
set -uo pipefail
CALL=${1:?usage: run_multi_gpu.sh call1|...|call13}
source "$(dirname "$0")/env.sh"
pack_results
ROOT_RES=$RES
DEADLINE=$(( t0 + ${DEADLINE_S:-570} ))
stamp "machine"
nvidia-smi -L
nvidia-smi topo -m > "$RES"/topo.txt 2>&1; head -8 "$RES"/topo.txt
# the host's CPU: steps at 128 tokens are host-bound where the CPU is slow (run 36)
lscpu > "$RES"/lscpu.txt 2>&1; grep -m3 "Model name\|^CPU(s)\|MHz" "$RES"/lscpu.txt
install_wheels || exit 1
ensure_pycuda || exit 1
export WB_WHEELS_DONE=1
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.device_count(), 'GPUs')"
# The commit the tree was sent from (written here before the call: `git rev-parse HEAD >
# .gpurun/commit`, .gpurun carried): the copy's .git on the device can be stale.
if [ -f .gpurun/commit ]; then export WB_SOURCE_COMMIT=$(cat .gpurun/commit); fi
echo "${WB_SOURCE_COMMIT:-$(git -C "$REPO" rev-parse HEAD 2>/dev/null)}" > "$RES"/commit.txt

step() {  # step LANE NAME CMD...: one bounded step of a lane, its output in LANE/NAME.log
  local lane=$1 name=$2
  shift 2
  local left=$(( DEADLINE - $(date +%s) ))
  if [ "$left" -lt 20 ]; then echo "SKIPPED $lane/$name: ${left} s left" | tee -a "$ROOT_RES/skipped.txt"; return 0; fi
  stamp "$lane/$name (limit ${left} s): $*"
  mkdir -p "$ROOT_RES/$lane/$name"
  RES_DIR="$ROOT_RES/$lane/$name" OUT="$ROOT_RES/$lane/$name.out" timeout -k 5 "$left" "$@" \
    > "$ROOT_RES/$lane/$name.log" 2>&1
  local rc=$?
  echo "$lane/$name exit $rc" | tee -a "$ROOT_RES/exits.txt"
}

lane_a_call1() {  # GPUs 0,1
  step A gpu-tests python3 -m pytest -q -p no:cacheprovider -m gpu tests -rs \
    --junitxml="$ROOT_RES/A/gpu-tests.xml"
  AR_DTYPES="f16 bf16" AR_CHECK_LIMIT=130 step A ar-check bash benchmarks/gpu/run_allreduce_rmsnorm.sh check
  AR_DTYPES=f16 AR_H="4096 16384" AR_T="128 8192" AR_TIME_LIMIT=200 \
    step A ar-time-f16 bash benchmarks/gpu/run_allreduce_rmsnorm.sh time
}
lane_b_call1() {  # GPUs 2,3
  VARIANTS="ref wb-ovl wb noise" step B train-101m bash benchmarks/gpu/run_training.sh 2 101m tests
  step B adam python3 -m workbench.cli.main compile-and-measure --gpus 2 --hang-timeout 200 \
    studies/adam.py studies/adam.py:mixed --set N=2**26 --set N=2**28 \
    --out "$ROOT_RES/B/adam" --name adam-p2
}

lane_a_call2() {  # GPUs 0,1
  step A gpu-tests python3 -m pytest -q -p no:cacheprovider -m gpu -rs \
    tests/runtime/test_gpu_end_to_end.py tests/wbtorch/test_gpu_optimizer.py \
    --junitxml="$ROOT_RES/A/gpu-tests.xml"
  AR_DTYPES=f16 AR_H="4096 16384" AR_T="128 1024 8192" AR_TIME_LIMIT=230 \
    step A ar-time-f16 bash benchmarks/gpu/run_allreduce_rmsnorm.sh time
  step A model-parallel python3 -m workbench.cli.main compile-and-measure --gpus 2 \
    --hang-timeout 200 studies/model_parallel.py --set T=1024 --set T=8192 --set H=12288 \
    --out "$ROOT_RES/A/model-parallel" --name model-parallel-p2
}
lane_b_call2() {  # GPUs 2,3
  step B link-probe python3 benchmarks/gpu/link_probe.py "$ROOT_RES/B/link.json"
  AR_DTYPES=bf16 AR_H="4096 16384" AR_T="128 1024 8192" AR_TIME_LIMIT=260 \
    step B ar-time-bf16 bash benchmarks/gpu/run_allreduce_rmsnorm.sh time
  step B sgd-lamb python3 -m workbench.cli.main compile-and-measure --gpus 2 \
    --hang-timeout 200 studies/sgd.py studies/lamb.py studies/lamb.py:mixed --set N=2**26 \
    --set N=2**28 --out "$ROOT_RES/B/sgd-lamb" --name sgd-lamb-p2
}

lane_a_call3() {  # GPUs 0,1
  VARIANTS="ref wb wb-ovls wb-ovlsg noise" step A train-806m \
    bash benchmarks/gpu/run_training.sh 2 806m
  VARIANTS="ref wb-ovls wb-ovlsg wb" step A train-101m bash benchmarks/gpu/run_training.sh 2 101m
}
lane_b_call3() {  # GPUs 2,3
  CUDA_VISIBLE_DEVICES=2 TIME_LIMIT=110 step B rowgrid bash benchmarks/gpu/run_rows_bandwidth.sh rowgrid
  step B model-parallel python3 -m workbench.cli.main compile-and-measure --gpus 2 \
    --hang-timeout 200 studies/model_parallel.py --set T=8192 --set H=12288 \
    --out "$ROOT_RES/B/model-parallel" --name model-parallel-8192-p2
  for mode in push pull; do
    step B "adam-$mode" python3 -m workbench.cli.main compile-and-measure --gpus 2 \
      --no-baselines --schedule fuse-rs-c-ag --collective-mode "$mode" studies/adam.py \
      studies/adam.py:mixed --set N=2**28 --out "$ROOT_RES/B/adam-$mode" --name "adam-$mode"
  done
}

lane_a_call4() {  # GPUs 0,1
  step A gpu-tests python3 -m pytest -q -p no:cacheprovider -m gpu -rs \
    tests/codegen/test_lower_pipeline_hierarchy.py tests/runtime/test_gpu_end_to_end.py \
    --junitxml="$ROOT_RES/A/gpu-tests.xml"
  step A calibrate python3 -m workbench.cli.main calibrate --gpus 2 --passes 3 \
    --out "$ROOT_RES/A/calibrate/profile.json"
  step A ar-rows python3 -m workbench.cli.main compile-and-measure --gpus 2 --graph \
    studies/allreduce_rmsnorm.py --schedule fuse-ar-c-oneshot,fuse-ar-c-lamport,fuse-ar-c \
    --set T=128 --set T=1024 --set T=8192 --set H=4096 --set H=16384 \
    --codegen row_grid=rows --out "$ROOT_RES/A/ar-rows" --name ar-rmsnorm-rows-f16
  step A sp-moe python3 -m workbench.cli.main compile-and-measure --gpus 2 --hang-timeout 200 \
    studies/sequence_parallel.py studies/moe.py --out "$ROOT_RES/A/sp-moe" --name sp-moe-p2
}
lane_b_call4() {  # GPUs 2,3
  CUDA_VISIBLE_DEVICES=2 VARIANTS="plain wb-ovlsg wb-ovlsg16 wb wb-ovls" step B train-806m-p1 \
    bash benchmarks/gpu/run_training.sh 1 806m
  VARIANTS="ref noise nosplit wb wb-ovlsg16" step B train-101m-p2 \
    bash benchmarks/gpu/run_training.sh 2 101m
}

lane_a_call6() {  # GPUs 0,1
  VARIANTS="ref wb-ovlsg wb-ovlsg48" step A train-806m-p2 bash benchmarks/gpu/run_training.sh 2 806m
  VARIANTS="ref wb wb4" step A train-101m-p2 bash benchmarks/gpu/run_training.sh 2 101m
}
lane_b_call6() {  # GPU 2 alone
  CUDA_VISIBLE_DEVICES=2 VARIANTS="plain wb plain-s wb-ovlsg wb-ovlsg48 wb-ovlsgp4" \
    step B train-806m-p1 bash benchmarks/gpu/run_training.sh 1 806m
}
lane_c_call6() {  # GPU 3 alone
  CUDA_VISIBLE_DEVICES=3 VARIANTS="ref noise plain wb wb-ovlsg" \
    step C train-101m-p1 bash benchmarks/gpu/run_training.sh 1 101m
}
lane_a_call7() {  # one GPU, nothing beside it on the host: P = 1 at 806M, then again
  VARIANTS="plain wb wb-ovlsg wb-ovlsg48 wb-ovlsg64" step A train-806m-p1 \
    bash benchmarks/gpu/run_training.sh 1 806m
  VARIANTS="plain wb-ovlsg48" step A train-806m-p1-again bash benchmarks/gpu/run_training.sh 1 806m
}
lane_a_call8() {  # one GPU: is the 48-block grid's step host-bound run to run? cut every 2 blocks
  local v="plain wb-ovlsg48 wb-ovlsg48p2"
  VARIANTS=$v step A train-806m-p1 bash benchmarks/gpu/run_training.sh 1 806m
  VARIANTS=$v step A train-806m-p1-again bash benchmarks/gpu/run_training.sh 1 806m
}
lane_a_call11() {  # one GPU: CUDA graphs against run 36's host-bound in-backward mode, twice
  local v="plain plain-cg wb-cg wb-ovlsg48 wb-ovlsg48-cg"
  VARIANTS=$v step A train-806m-p1 bash benchmarks/gpu/run_training.sh 1 806m
  VARIANTS=$v step A train-806m-p1-again bash benchmarks/gpu/run_training.sh 1 806m
}
lane_a_call12() {  # one GPU: CUDA graphs at P = 1 on the 101M model, and 806M a third time
  VARIANTS="ref noise plain plain-cg wb-ovlsg48-cg" step A train-101m-p1 \
    bash benchmarks/gpu/run_training.sh 1 101m
  VARIANTS="plain-cg wb-ovlsg48-cg" step A train-806m-p1 bash benchmarks/gpu/run_training.sh 1 806m
}
lane_a_call13() {  # GPUs 0,1: 101M at P = 2 with CUDA graphs on both sides, twice (call 10: 1.049x)
  local v="ref noise ref-cg wb-ovlsg-cg wb-ovlsg48-cg"
  VARIANTS=$v step A train-101m-p2 bash benchmarks/gpu/run_training.sh 2 101m
  VARIANTS=$v step A train-101m-p2-again bash benchmarks/gpu/run_training.sh 2 101m
}
lane_a_call10() {  # GPUs 0,1: torch's sharded baselines at P = 2 (issue 28 item 7), 806M
  VARIANTS="ref noise zero1 fsdp2 wb wb-ovlsg wb-ovlsg48-cg" step A train-806m-p2 \
    bash benchmarks/gpu/run_training.sh 2 806m
}
lane_b_call10() {  # GPUs 2,3: the same on the 101M model
  VARIANTS="ref noise zero1 fsdp2 wb wb-ovlsg48-cg ref-cg" step B train-101m-p2 \
    bash benchmarks/gpu/run_training.sh 2 101m
}
lane_a_call9() {  # one GPU: a Perfetto trace of the 48-block grid's step, three runs (fast or slow)
  local i
  for i in 1 2 3; do
    VARIANTS=wb-ovlsg48 TRACE=wb-ovlsg48 step A "train-806m-p1-trace$i" \
      bash benchmarks/gpu/run_training.sh 1 806m
  done
}
lane_a_call5() {  # GPUs 0,1
  VARIANTS="ref wb-ovlsg wb-ovlsg48 wb-ovlsg64" step A train-806m-p2 \
    bash benchmarks/gpu/run_training.sh 2 806m
  VARIANTS="ref wb wb4" step A train-101m-p2 bash benchmarks/gpu/run_training.sh 2 101m
}
lane_b_call5() {  # GPU 2 alone
  CUDA_VISIBLE_DEVICES=2 VARIANTS="ref noise plain wb-ovlsg wb-ovlsg48 wb-ovlsg64" \
    step B train-806m-p1 bash benchmarks/gpu/run_training.sh 1 806m
}
lane_c_call5() {  # GPU 3 alone
  CUDA_VISIBLE_DEVICES=3 VARIANTS="ref noise plain wb wb-ovlsg" \
    step C train-101m-p1 bash benchmarks/gpu/run_training.sh 1 101m
}

case $CALL in
  call1|call2|call3|call4|call10)
    ( export CUDA_VISIBLE_DEVICES=0,1 WB_GPUS=2 TRAIN_MASTER_PORT=29500; "lane_a_$CALL" ) &
    ( export CUDA_VISIBLE_DEVICES=2,3 WB_GPUS=2 TRAIN_MASTER_PORT=29510; "lane_b_$CALL" ) &
    wait ;;
  call5|call6)  # three lanes: P = 2 on GPUs 0,1; P = 1 on GPU 2 and on GPU 3
    ( export CUDA_VISIBLE_DEVICES=0,1 WB_GPUS=2 TRAIN_MASTER_PORT=29500; "lane_a_$CALL" ) &
    ( export CUDA_VISIBLE_DEVICES=2 WB_GPUS=1 TRAIN_MASTER_PORT=29510; "lane_b_$CALL" ) &
    ( export CUDA_VISIBLE_DEVICES=3 WB_GPUS=1 TRAIN_MASTER_PORT=29520; "lane_c_$CALL" ) &
    wait ;;
  call13) ( export CUDA_VISIBLE_DEVICES=0,1 WB_GPUS=2 TRAIN_MASTER_PORT=29500; lane_a_call13 ) ;;
  call7|call8|call9|call11|call12) ( export CUDA_VISIBLE_DEVICES=0 WB_GPUS=1; "lane_a_$CALL" ) ;;  # one lane, one GPU
  *) echo "CALL must be call1 to call13, got $CALL"; exit 2 ;;
esac
stamp "exits"; cat "$ROOT_RES"/exits.txt; cat "$ROOT_RES"/skipped.txt 2>/dev/null
for f in "$ROOT_RES"/A/ar-check/ar-rmsnorm-check-*.csv; do [ -f "$f" ] && grep -v ",ok" "$f" | head -5; done
tail -3 "$ROOT_RES"/A/gpu-tests.log 2>/dev/null
stamp "done"
