# One H200 host (16 CPUs; GPU run 42, call 16): call 15 timed Adam, whose reference above
# FULL_CHECK_MAX_NUMEL is sampled (cheap either way); LAMB's global norms keep it from a
# sampled check, so its full reference is what an x4 / x8 call spends: P = 4 and 8 at 2^26.
source benchmarks/gpu/env.sh; pack_results; install_wheels >/dev/null 2>&1 || exit 1
export WB_WHEELS_DONE=1 WB_SOURCE_COMMIT=$(cat .gpurun/commit); echo $WB_SOURCE_COMMIT > $RES/commit.txt
stamp "lamb 2^26 P=4"
timeout -k 5 250 python3 benchmarks/reference_speed.py 26 4 studies/lamb.py blocks 2>&1 | tee $RES/reference_speed_26_p4_lamb.txt
stamp "lamb 2^26 P=8"
timeout -k 5 280 python3 benchmarks/reference_speed.py 26 8 studies/lamb.py blocks 2>&1 | tee $RES/reference_speed_26_p8_lamb.txt
stamp done
