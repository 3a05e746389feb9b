#!/usr/bin/env bash
# Third device run: fused collectives with the reduce-scatter by peer loads (pull) against peer
# stores into staging buffers (push), N=2^26 and 2^28, every result checked.
#   usage: bash benchmarks/gpu/run_push.sh [P]
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
pack_results
install_wheels || exit 1
for M in push pull; do
  stamp "mode $M"
  python3 -m workbench.cli.main compile-and-measure --gpus "$P" --out "$RES" \
    --schedule fused,fuse-rs-c-ag --no-baselines --collective-mode $M \
    studies/allreduce.py studies/adam.py studies/adam.py:mixed \
    --set N=2**26 --set N=2**28 --name fused-$M 2> "$RES"/fused-$M.log | tee "$RES"/fused-$M.txt
done
stamp done
tail -n 3 "$RES"/fused-push.log
