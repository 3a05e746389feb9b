#!/usr/bin/env bash
# The fused AllReduce's unroll sweep alone (design note 95), the job `workbench calibrate` runs
# after its block sweep: studies/allreduce.py `fused`, f32, 256 MiB, full grid, generated at
# unroll 1, 2, 4 and 1 again, each checked exactly; then the unroll curve fitted on the
# committed 2x H200 profile's fixed cost. From the repo root with `.whl` carried; ~30 s on 2 GPUs.
#   usage: bash benchmarks/gpu/unroll_sweep.sh [P]
set -uo pipefail
source "$(dirname "$0")/env.sh"
P=${1:-2}
pack_results
install_wheels || exit 1
ensure_pycuda || exit 1
stamp "unroll sweep"
python3 - "$P" "$RES" <<'PY' 2>&1 | tee "$RES"/unroll_sweep.log
import json, sys
from cost_model.calibration import fit_fused_unrolls
from cost_model.hardware import load_hardware
from workbench.runtime import calibrate

P, res = int(sys.argv[1]), sys.argv[2]
raw = calibrate._job("--fused-unroll", "fused_unroll", P, 120.0, print)
with open(f"{res}/fused_unroll.json", "w") as f:
    json.dump(raw, f, indent=1)
print(json.dumps(raw, indent=1))
rows = [(r["nbytes"], r["unroll"], r["ms"] * 1e-3) for r in raw.get("fused_unroll", [])]
if rows:
    cluster = load_hardware("records/calibration/h200x2/profile.json")
    print("unroll curve:", fit_fused_unrolls(rows, P, cluster))
PY
stamp done
