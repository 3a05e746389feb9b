# One H200 host (16 CPUs; GPU run 42, call 15): the check's reference at P = 4 and 8 (host
# CPU work only; what an x4 / x8 call spends before timing), row blocks per rank against the
# ranks sharing their work (ef471a1: bounds._same_work), median and range of 3, same run.
source benchmarks/gpu/env.sh; pack_results; install_wheels >/dev/null 2>&1 || exit 1
export WB_WHEELS_DONE=1 WB_SOURCE_COMMIT=$(cat .gpurun/commit); echo $WB_SOURCE_COMMIT > $RES/commit.txt
nproc | tee $RES/nproc.txt
stamp "mixed adam 2^26 P=4"
timeout -k 5 240 python3 benchmarks/reference_speed.py 26 4 studies/adam.py:mixed blocks 2>&1 | tee $RES/reference_speed_26_p4_adam_mixed.txt
stamp "adam 2^26 P=8"
timeout -k 5 280 python3 benchmarks/reference_speed.py 26 8 studies/adam.py blocks 2>&1 | tee $RES/reference_speed_26_p8_adam.txt
stamp done
