#!/usr/bin/env bash
# Calibration and study measurements on the same machine in one device call (latency-bound
# NCCL points differ by up to 2x between machines of one kind: 26 us against 53 us for a
# 64 KiB all_reduce in 2x H200 calibrations 5 and 6), from the repo root with `.whl` carried:
#   bash benchmarks/gpu/run_calibrated.sh P PART
# PART is run_studies.sh's parts in order (a: SGD, Adam, model-parallel; b: LAMB; c: the
# pipeline); one that starts with a first runs the NVLink mechanism probe and
# `workbench calibrate --passes 3`. E.g. `a` then `cb` (2x H200: 330 s, then 44 s + LAMB),
# or `ac` in one call. LAMB (b) took ~360 s on 2x H200 (GPU run 12: cut at 330 s).
# Everything comes back in $OUT/results.tgz; each step has its own time limit so that the
# results of the ones before it come back.
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
PART=${2:-a}
pack_results
stamp "machine"
nvidia-smi -L
install_wheels || exit 1
if [ "${PART:0:1}" = a ]; then
  stamp "link probe"
  timeout 90 python3 benchmarks/gpu/link_probe.py "$RES"/link.json > "$RES"/link.log 2>&1
  tail -8 "$RES"/link.log
  stamp "calibrate"
  mkdir -p "$RES"/calibration
  timeout 200 python3 -m workbench.cli.main calibrate --gpus "$P" --passes 3 \
    --out "$RES"/calibration/profile.json > "$RES"/calibration/fit.out 2>"$RES"/calibration/calibrate.log
  stamp "calibrate rc=$?"
  grep -i "worst\|host overhead" "$RES"/calibration/fit.out
fi
for part in $(echo "$PART" | grep -o .); do
  stamp "studies part $part"
  # run_studies.sh packs its own results folder into OUT/results.tgz: both under ours
  RES_DIR="/tmp/wb-part-$part" OUT="$RES/part-$part" timeout $([ "$part" = b ] && echo 420 || echo 380) \
    bash benchmarks/gpu/run_studies.sh "$P" "$part" > "$RES/part-$part.out" 2>&1
  stamp "part $part rc=$?"
  tail -4 "$RES/part-$part.out"
done
stamp "done"
