#!/usr/bin/env bash
# Regenerate every committed sweep prediction (predicted.csv) and its report (report.md, the
# figures) at the current commit, on any CPU machine: the commands each folder's README gives.
# The measured.csv files stay as the GPU runs wrote them.
#
#     bash studies/results/regenerate_predictions.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
S8="--study sgd --study sgd-mixed --study adam --study adam-mixed --study lamb --study lamb-mixed --study model_parallel --study pipeline"
S5="--study sgd --study sgd-mixed --study adam --study adam-mixed --study model_parallel"
C=studies/results/calibration
R=studies/results

regenerate() {  # OUT, then the sweep predict options
    local out=$1
    shift
    # shellcheck disable=SC2068  # the study options split on purpose
    workbench sweep predict $@ --out "$out"
    workbench report "$out"
}

regenerate $R/h200x2 --hardware h200x4 --gpus 2 $S8
regenerate $R/h200x2-calibrated --hardware $C/h200x2-run5/profile.json --gpus 2 $S8
regenerate $R/h200x2-same-machine --hardware $C/h200x2-run7/profile.json --gpus 2 $S8
regenerate $R/h200x2-same-machine-2 --hardware $C/h200x2-run8/profile.json --gpus 2 $S8
regenerate $R/h200x2-same-machine-3 --hardware $C/h200x2-run10/profile.json --gpus 2 $S5
regenerate $R/h200x4 --hardware h200x4 $S8
regenerate $R/h200x4-allreduce-rmsnorm --hardware h200x4 --study allreduce_rmsnorm \
    --study allreduce_rmsnorm-bf16
echo "regenerated at commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- \
    ':!studies/results' || echo ' (with uncommitted changes)')"
