# One H200 (GPU run 42, call 14): the runtime after 5939df1 (the plan's size conditions checked
# once, codegen.plan.size_faults; the executor's per-step checks removed): every GPU test at P = 1,
# the overlapped and chunked schedules (model-parallel, sequence-parallel, MoE) checked at P = 1,
# and a size their chunks cannot take refused before any rank starts, on the GPU machine too.
source benchmarks/gpu/env.sh; pack_results; install_wheels >/dev/null 2>&1 || exit 1; ensure_pycuda || exit 1
export WB_WHEELS_DONE=1 WB_SOURCE_COMMIT=$(cat .gpurun/commit); echo $WB_SOURCE_COMMIT > $RES/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpus.txt
stamp "gpu tests P=1"
WORKBENCH_GPU_P=1 timeout -k 5 300 python3 -m pytest -m gpu -p no:warnings -p no:cacheprovider -q -rs tests --junitxml=$RES/gpu-tests.xml 2>&1 | tail -15
stamp "overlap studies P=1"
timeout -k 5 150 python3 -m workbench compile-and-measure studies/model_parallel.py studies/sequence_parallel.py studies/moe.py --gpus 1 --set T=1024 --set H=4096 --out $RES/measured --name overlap-p1 --no-baselines --quiet --reps 20 --warmup 2 --hang-timeout 100 2>&1 | grep -v "^WARNING" | tail -22
echo "exit ${PIPESTATUS[0]}"
stamp "refused sizes"
timeout -k 5 60 python3 -m workbench compile-and-measure studies/model_parallel.py --gpus 1 --set T=1026 --set H=4096 --out $RES/refused --quiet 2>&1 | tail -3
echo "exit ${PIPESTATUS[0]}"
stamp done
