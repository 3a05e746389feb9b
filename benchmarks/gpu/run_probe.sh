#!/usr/bin/env bash
# The NVLink mechanism probe (benchmarks/gpu/link_probe.py), then one calibration with
# `--passes 3`, from the repo root with `.whl` carried; everything comes back in
# $OUT/results.tgz (link.json, link.log, calibration/profile.* and calibrate.log).
#   usage: bash benchmarks/gpu/run_probe.sh [P]
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
pack_results
stamp "machine"
nvidia-smi -L
nvidia-smi topo -m | head -5
stamp "link probe"
python3 benchmarks/gpu/link_probe.py "$RES"/link.json 2>&1 | tee "$RES"/link.log
stamp "wheels"
install_wheels || exit 1
stamp "calibrate"
mkdir -p "$RES"/calibration
python3 -m workbench.cli.main calibrate --gpus "$P" --passes 3 --out "$RES"/calibration/profile.json \
  2>"$RES"/calibration/calibrate.log
rc=$?
stamp "done rc=$rc"
tail -5 "$RES"/calibration/calibrate.log
exit $rc
