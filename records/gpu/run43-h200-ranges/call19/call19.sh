# One H200 (GPU run 43, call 19): the runtime after d1cf38d (Variable range=; Adam's betas and
# step drawn from declared ranges; inputs keep their Size facts): every GPU test at P = 1, and
# Adam (fp32 and mixed) compiled, checked against the reference on fresh random inputs drawn
# from the new ranges, and timed at P = 1, N = 2^24.
source benchmarks/gpu/env.sh; pack_results; install_wheels >/dev/null 2>&1 || exit 1; ensure_pycuda || exit 1
export WB_WHEELS_DONE=1 WB_SOURCE_COMMIT=$(cat .gpurun/commit); echo $WB_SOURCE_COMMIT > $RES/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpus.txt
stamp "gpu tests P=1"
WORKBENCH_GPU_P=1 timeout -k 5 300 python3 -m pytest -m gpu -p no:warnings -p no:cacheprovider -q -rs tests --junitxml=$RES/gpu-tests.xml 2>&1 | tail -15
stamp "adam P=1"
timeout -k 5 200 python3 -m workbench compile-and-measure studies/adam.py studies/adam.py:mixed --gpus 1 --set N=2**24 --out $RES/measured --name adam-p1 --no-baselines --quiet --reps 20 --warmup 2 --hang-timeout 100 2>&1 | grep -v "^WARNING" | tail -22
echo "exit ${PIPESTATUS[0]}"
stamp done
