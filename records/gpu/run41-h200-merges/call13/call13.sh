# One H200 host (16 CPUs): the check's reference, whole arrays against row blocks on threads,
# then LAMB at its default 2^28 end to end (run 41 call 11 did not reach timing in 200 s).
source benchmarks/gpu/env.sh; pack_results; install_wheels >/dev/null 2>&1 || exit 1; ensure_pycuda || exit 1
export WB_WHEELS_DONE=1 WB_SOURCE_COMMIT=$(cat .gpurun/commit); echo $WB_SOURCE_COMMIT > $RES/commit.txt
nproc | tee $RES/nproc.txt
stamp "reference_speed 26"
timeout -k 5 200 python3 benchmarks/reference_speed.py 26 2>&1 | tee $RES/reference_speed_26.txt
stamp "lamb 2^28 --gpus 1"
timeout -k 5 220 python3 -m workbench compile-and-measure studies/lamb.py --gpus 1 --out $RES/measured --name lamb-p1 --no-baselines --quiet --hang-timeout 150 2>&1 | grep -v "^WARNING" | tail -12
echo "exit ${PIPESTATUS[0]}"
stamp done
