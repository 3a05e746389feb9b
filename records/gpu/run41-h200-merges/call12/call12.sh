# One H200 after the trust merge (the reaper now frames each rank's output through pipes):
# the replay suite of run 41 through the harness, at the final commit.
source benchmarks/gpu/env.sh; pack_results; install_wheels >/dev/null 2>&1 || exit 1; ensure_pycuda || exit 1
export WB_WHEELS_DONE=1 WB_SOURCE_COMMIT=$(cat .gpurun/commit); echo $WB_SOURCE_COMMIT > $RES/commit.txt
nvidia-smi --query-gpu=name --format=csv,noheader | tee $RES/gpus.txt
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/test/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PYTHONPATH
stamp "harness replay-merges"
timeout -k 5 540 python3 benchmarks/harness.py replay-merges --gpus 1 --out $RES/h 2>&1 | tail -40
echo "exit ${PIPESTATUS[0]}"
stamp done
