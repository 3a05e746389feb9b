# Two H200s (GPU run 43, call 21, at the commit in .gpurun/commit): call 20's one failure at P = 2
# (test_model_parallel_schedules_check_on_gpus[P2]) again with its whole report, then the GPU
# tests call 20's time limit cut off (the ones after it), with a junit report.
source benchmarks/gpu/env.sh; pack_results; install_wheels >/dev/null 2>&1 || exit 1; ensure_pycuda || exit 1
export WB_WHEELS_DONE=1 WB_SOURCE_COMMIT=$(cat .gpurun/commit); echo $WB_SOURCE_COMMIT > $RES/commit.txt
stamp "model-parallel P=2"
WORKBENCH_GPU_P=2 timeout -k 5 150 python3 -m pytest -m gpu -p no:warnings -p no:cacheprovider -q -rA --tb=long "tests/runtime/test_gpu_end_to_end.py::test_model_parallel_schedules_check_on_gpus" --junitxml=$RES/model-parallel.xml > $RES/model-parallel.txt 2>&1
echo "exit $?"; grep -E "Error|assert|check|FAILED|passed|failed" $RES/model-parallel.txt | head -30
stamp "the rest P=2"
WORKBENCH_GPU_P=2 timeout -k 5 240 python3 -m pytest -m gpu -p no:warnings -p no:cacheprovider -q -rA tests/runtime/test_gpu_end_to_end.py tests/runtime/test_index_ops_gpu.py tests/wbtorch -k "not test_model_parallel_schedules and not test_every_schedule_checks_on_gpus" --junitxml=$RES/rest.xml > $RES/rest.txt 2>&1
echo "exit $?"; tail -n 15 $RES/rest.txt
stamp done
