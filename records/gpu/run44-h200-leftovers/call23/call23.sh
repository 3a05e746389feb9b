# One H200 (GPU run 44, call 23, the commit in .gpurun/commit): the runtime after this session's
# fixes for what outlives a run (compile_cubin's work folder, run_job's private partial folder,
# the watchdog's SIGTERM first, SIGTERM unwinding as Ctrl-C): every GPU test at P = 1; the
# CPU trust tests of those fixes on this machine; a compile-and-measure ended by SIGTERM mid-run
# (as `timeout` or a batch scheduler ends it) leaves no rank, no mpirun session folder.
source benchmarks/gpu/env.sh; pack_results; install_wheels >/dev/null 2>&1 || exit 1; ensure_pycuda || exit 1
export WB_WHEELS_DONE=1 WB_SOURCE_COMMIT=$(cat .gpurun/commit); echo $WB_SOURCE_COMMIT > $RES/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpus.txt
stamp "gpu tests P=1"
WORKBENCH_GPU_P=1 timeout -k 5 300 python3 -m pytest -m gpu -p no:warnings -p no:cacheprovider -q -rs tests --junitxml=$RES/gpu-tests.xml > $RES/gpu-tests.txt 2>&1
echo "exit $?"; tail -12 $RES/gpu-tests.txt
stamp "trust tests (CPU) on this machine"
timeout -k 5 200 python3 -m pytest -p no:warnings -p no:cacheprovider -q tests/runtime/test_trust_launcher.py tests/runtime/test_trust_cubin_cache.py tests/cli/test_trust_interrupt.py tests/cli/test_trust_writers.py --junitxml=$RES/trust-tests.xml > $RES/trust-tests.txt 2>&1
echo "exit $?"; tail -5 $RES/trust-tests.txt
stamp "compile-and-measure ended by SIGTERM after 25 s"
before=$(ls -d /tmp/ompi.* 2>/dev/null | wc -l)
timeout -s TERM 25 python3 -m workbench compile-and-measure studies/adam.py --gpus 1 --set N=2**26 --out $RES/term --name adam-term --quiet --reps 400 --warmup 2 > $RES/term.txt 2>&1
echo "exit $?"; tail -4 $RES/term.txt
sleep 3
echo "workers left: $(pgrep -fc workbench.runtime.worker)"; echo "ompi session folders: before $before, after $(ls -d /tmp/ompi.* 2>/dev/null | wc -l)"
ls -A $RES/term 2>/dev/null
stamp done
