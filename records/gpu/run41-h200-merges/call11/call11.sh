# One H200 after the session's merges (schemas for compiled folders and profiles, AllToAll's
# one description): every GPU test at P = 1, a compiled folder run by --plan, and four studies
# at --gpus 1 (a regression check of the runtime path; P = 1 says nothing about collectives).
source benchmarks/gpu/env.sh; pack_results; install_wheels >/dev/null 2>&1 || exit 1; ensure_pycuda || exit 1
export WB_WHEELS_DONE=1 WB_SOURCE_COMMIT=$(cat .gpurun/commit); echo $WB_SOURCE_COMMIT > $RES/commit.txt
nvidia-smi --query-gpu=name --format=csv,noheader | tee $RES/gpus.txt
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/test/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PYTHONPATH
stamp "gpu tests P=1"
WORKBENCH_GPU_P=1 timeout -k 5 300 python3 -m pytest -q -p no:cacheprovider -p no:warnings -m gpu tests/ 2>&1 | tail -15 | tee $RES/gpu_tests_p1.txt
stamp "compile + --plan"
timeout -k 5 60 python3 -m workbench compile studies/adam.py --gpus 1 --set 'N=2**24' --out $RES/compiled-adam --quiet 2>&1 | tail -3
timeout -k 5 120 python3 -m workbench compile-and-measure --plan $RES/compiled-adam --gpus 1 --set 'N=2**24' --out $RES/measured --name plan-adam-p1 --quiet --hang-timeout 100 2>&1 | grep -v "^WARNING" | tail -12
echo "exit ${PIPESTATUS[0]}"
stamp "studies P=1"
timeout -k 5 200 python3 -m workbench compile-and-measure studies/moe.py studies/moe_router.py studies/allreduce_rmsnorm.py studies/lamb.py --gpus 1 --out $RES/measured --name studies-p1 --no-baselines --quiet --hang-timeout 100 2>&1 | grep -v "^WARNING" | tail -40
echo "exit ${PIPESTATUS[0]}"
stamp done
