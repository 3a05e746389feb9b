# One H200 (GPU run 42, call 18): the prepared P = 4 diagnosis suite run at P = 1 as a smoke
# test of its command lines (per-step timing of the row schedules, the rows grid); P = 1 times
# are not the P = 4 question.
source benchmarks/gpu/env.sh; pack_results; install_wheels >/dev/null 2>&1 || exit 1; ensure_pycuda || exit 1
export WB_WHEELS_DONE=1 WB_SOURCE_COMMIT=$(cat .gpurun/commit); echo $WB_SOURCE_COMMIT > $RES/commit.txt
timeout -k 5 400 python3 benchmarks/harness.py nvlink-rsag-diagnosis --gpus 1 --out $RES/h 2>&1 | grep -v "^WARNING" | tail -30
stamp done
