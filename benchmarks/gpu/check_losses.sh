#!/usr/bin/env bash
# The loss checks of `harness.py replay-training`'s runs (issue 28 item 3, design notes 64 and 100), on the
# device after the runs or here on a stored results folder (no GPU, no torch):
#   usage: bash benchmarks/gpu/check_losses.sh RES P CONFIG
# Writes RES/compare_{P}_{CONFIG}.txt (fp32 runs against ref) and compare_{P}_{CONFIG}_bf16.txt
# (bf16-parameter runs against bf16p), prints their verdicts; exits 1 when a run under test is a
# MISMATCH (amp is reported, not judged: another recipe).
# The envelope (compare_losses.py --noise) is every torch run whose losses differ from ref's
# only in what must not matter (DDP's wrapper and bucket size, the graph's splits, CUDA graphs;
# the same fused AdamW on every parameter) that ran, but the run under test. One noise run calls
# a run drawn like it a MISMATCH about 1 time in 10, two about 1 time in 60 (note 100); run 37
# call 12 saw it: torch's own plain-cg outside the envelope of `noise` alone.
set -uo pipefail
RES=${1:?usage: check_losses.sh RES P CONFIG}
P=${2:?usage: check_losses.sh RES P CONFIG}
CFG=${3:?usage: check_losses.sh RES P CONFIG}
TORCH_NOISE="noise nosplit plain plain-b plain-s plain-cg ref-cg"
BF16_RUNS="wb-bf16p wb-bf16p-a amp"  # judged against bf16p, with bf16p-n as its noise
[ -d "$RES" ] || { echo "check_losses.sh: results folder $RES does not exist; pass the folder" \
  "the replay-training suite wrote (its {P}_{CONFIG}_{variant}.json)"; exit 2; }
failed=0
unjudged=()  # runs under test whose reference did not run: said, and exit 2, never a pass
judge() {  # judge OUT REF RUN NOISE...: one compare_losses.py verdict appended to OUT
  local out=$1 ref=$2 run=$3
  shift 3
  echo "== $(basename "$run" .json) against $(basename "$ref" .json), noise: $(basename -a "$@" \
    | tr '\n' ' ')" >> "$out"
  python3 examples/compare_losses.py "$ref" "$run" --noise "$@" >> "$out" 2>&1
}
out="$RES/compare_${P}_${CFG}.txt" ref="$RES/${P}_${CFG}_ref.json"
: > "$out"
# every other run of the folder is an fp32 run under test: a variant added to `harness.py replay-training`
# is judged without being listed here
for run in "$RES/${P}_${CFG}"_*.json; do
  name=${run##*/${P}_${CFG}_} name=${name%.json} noise=()
  case " ref noise bf16p bf16p-n $BF16_RUNS " in *" $name "*) continue ;; esac
  [ -f "$run" ] || continue
  [ -f "$ref" ] || { unjudged+=("$name"); continue; }
  for other in $TORCH_NOISE; do
    [ "$other" != "$name" ] && [ -f "$RES/${P}_${CFG}_$other.json" ] && \
      noise+=("$RES/${P}_${CFG}_$other.json")
  done
  # none ran: compare_losses.py names the missing noise run (exit 2)
  [ ${#noise[@]} -gt 0 ] || noise=("$RES/${P}_${CFG}_noise.json")
  judge "$out" "$ref" "$run" "${noise[@]}" || { echo "FAILED: P=$P $CFG losses of $name"; failed=1; }
done
out16="$RES/compare_${P}_${CFG}_bf16.txt" ref16="$RES/${P}_${CFG}_bf16p.json"
: > "$out16"
for name in $BF16_RUNS; do
  run="$RES/${P}_${CFG}_$name.json"
  [ -f "$run" ] && [ -f "$ref16" ] || continue
  judge "$out16" "$ref16" "$run" "$RES/${P}_${CFG}_bf16p-n.json"
  rc=$?
  [ "$name" = amp ] || [ $rc -eq 0 ] || { echo "FAILED: P=$P $CFG losses of $name"; failed=1; }
done
grep -h "^==\|^MATCH\|^MISMATCH" "$out" "$out16" | cut -c1-240
if [ ${#unjudged[@]} -gt 0 ]; then
  echo "NOT JUDGED: ${unjudged[*]} (no ${P}_${CFG}_ref.json in $RES: run the ref variant too)"
  exit 2
fi
exit $failed
