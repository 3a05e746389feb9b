# Two H200s (GPU run 43, call 20): the runtime at 890b991 at P = 2: every GPU test (the five
# that need 2 GPUs included), and Adam / mixed Adam at N = 2^24 checked on inputs drawn from
# the declared scalar ranges, every schedule, with baselines.
source benchmarks/gpu/env.sh; pack_results; install_wheels >/dev/null 2>&1 || exit 1; ensure_pycuda || exit 1
export WB_WHEELS_DONE=1 WB_SOURCE_COMMIT=$(cat .gpurun/commit); echo $WB_SOURCE_COMMIT > $RES/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpus.txt
stamp "gpu tests P=2"
WORKBENCH_GPU_P=2 timeout -k 5 330 python3 -m pytest -m gpu -p no:warnings -p no:cacheprovider -q -rs tests --junitxml=$RES/gpu-tests.xml 2>&1 | tail -15
stamp "adam P=2"
timeout -k 5 150 python3 -m workbench compile-and-measure studies/adam.py studies/adam.py:mixed --gpus 2 --set N=2**24 --out $RES/measured --name adam-p2 --quiet --reps 20 --warmup 2 --hang-timeout 100 2>&1 | grep -v "^WARNING" | tail -30
echo "exit ${PIPESTATUS[0]}"
stamp done
