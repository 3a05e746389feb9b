# Two H200s (GPU run 43, call 22, the commit in .gpurun/commit): after the store port moved below
# the ephemeral range, the torch.distributed pipeline test that failed in call 21 with
# EADDRINUSE, then every GPU test at P = 2 in one run (call 20 was cut by its limit).
source benchmarks/gpu/env.sh; pack_results; install_wheels >/dev/null 2>&1 || exit 1; ensure_pycuda || exit 1
export WB_WHEELS_DONE=1 WB_SOURCE_COMMIT=$(cat .gpurun/commit); echo $WB_SOURCE_COMMIT > $RES/commit.txt
stamp "all gpu tests P=2"
WORKBENCH_GPU_P=2 timeout -k 5 480 python3 -m pytest -m gpu -p no:warnings -p no:cacheprovider -q -rA tests --junitxml=$RES/gpu-tests.xml > $RES/gpu-tests.txt 2>&1
echo "exit $?"; grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|passed|failed" $RES/gpu-tests.txt | tail -40
stamp done
