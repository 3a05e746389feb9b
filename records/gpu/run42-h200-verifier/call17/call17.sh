# One H200 host (16 CPUs; GPU run 42, call 17): call 16's P = 8 row of LAMB's reference at
# 2^26, whose shared way the call's limit cut: both row-block ways again, with room.
source benchmarks/gpu/env.sh; pack_results; install_wheels >/dev/null 2>&1 || exit 1
export WB_WHEELS_DONE=1 WB_SOURCE_COMMIT=$(cat .gpurun/commit); echo $WB_SOURCE_COMMIT > $RES/commit.txt
stamp "lamb 2^26 P=8"
timeout -k 5 520 python3 benchmarks/reference_speed.py 26 8 studies/lamb.py blocks 2>&1 | tee $RES/reference_speed_26_p8_lamb.txt
stamp done
