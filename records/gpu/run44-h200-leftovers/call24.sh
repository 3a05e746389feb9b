# GPU run 44 call 24 (one H200): why test_a_sigkilled_launcher_leaves_no_rank_behind[mpirun-*]
# failed on this machine in call 23: the scenario with the watchdog of 621cac6 (SIGTERM, then
# SIGKILL after 2 s) and of cb8eeae (SIGKILL at once), survivors' /proc status over 5 s.
export WB_SOURCE_COMMIT=$(cat .gpurun/commit)
mpirun --version | head -1; uname -r
echo "=== new watchdog"; timeout 60 python3 .gpurun/diag_sigkill.py
cp workbench/runtime/watchdog.py /tmp/wd_new.py; cp .gpurun/watchdog_old.py workbench/runtime/watchdog.py
echo "=== old watchdog"; timeout 60 python3 .gpurun/diag_sigkill.py
cp /tmp/wd_new.py workbench/runtime/watchdog.py
echo "=== the tests, old watchdog"; cp .gpurun/watchdog_old.py workbench/runtime/watchdog.py
timeout 120 python3 -m pytest -p no:warnings -p no:cacheprovider -q tests/runtime/test_trust_launcher.py -k sigkilled 2>&1 | grep -E "^E  |passed|failed" | head -12
cp /tmp/wd_new.py workbench/runtime/watchdog.py
