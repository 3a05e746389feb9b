# GPU run 44 call 26 (one H200): which mpirun test leaves an Open MPI session folder in /tmp
# on this machine (call 25: all passed, one folder left); each test alone, folders counted.
source benchmarks/gpu/env.sh; install_wheels >/dev/null 2>&1 || exit 1
export WB_WHEELS_DONE=1
rm -rf /tmp/ompi.*
for t in $(python3 -m pytest -p no:cacheprovider -o addopts="" -q --collect-only tests/runtime/test_trust_launcher.py tests/runtime/test_launcher.py 2>/dev/null | grep "::" | grep -i "mpirun\|sigkill"); do
  timeout 60 python3 -m pytest -p no:warnings -p no:cacheprovider -q "$t" >/dev/null 2>&1; rc=$?
  left=$(ls -d /tmp/ompi.* 2>/dev/null)
  if [ -n "$left" ]; then echo "LEFT after $t (rc $rc): $left"; ls -la $left | head -5; rm -rf /tmp/ompi.*; else echo "ok $t (rc $rc)"; fi
done 2>&1 | tail -60
