# GPU run 44 call 25 (one H200): the CPU trust tests of this session's fixes on this machine
# (Open MPI 4.1.6), after the watchdog's grace became 3 s (call 23 failed the two
# SIGKILLed-launcher tests under mpirun: mpirun took 2-3 s to end on SIGTERM, call 24).
source benchmarks/gpu/env.sh; install_wheels >/dev/null 2>&1 || exit 1
export WB_WHEELS_DONE=1 WB_SOURCE_COMMIT=$(cat .gpurun/commit); echo $WB_SOURCE_COMMIT
before=$(ls -d /tmp/ompi.* 2>/dev/null | wc -l)
timeout -k 5 240 python3 -m pytest -p no:warnings -p no:cacheprovider -q -rA tests/runtime/test_trust_launcher.py tests/runtime/test_launcher.py tests/runtime/test_trust_cubin_cache.py tests/cli/test_trust_interrupt.py tests/cli/test_trust_writers.py 2>&1 | grep -E "^(FAILED|ERROR)|^E  |passed|failed" | head -30; echo "pytest exit ${PIPESTATUS[0]}"
echo "ompi session folders: before $before, after $(ls -d /tmp/ompi.* 2>/dev/null | wc -l)"
