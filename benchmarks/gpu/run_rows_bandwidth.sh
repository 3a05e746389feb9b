#!/usr/bin/env bash
# The row kernels' HBM bandwidth at P = 1 (issue 25 item 4, design note 80): the fused
# AllReduce + residual + RMSNorm row kernels before and after the fix, beside torch.compile's
# kernel, checked, timed and profiled with Nsight Compute on one GPU.
#  `explore`: (1) benchmarks/gpu/rows_bandwidth.py times the row-kernel variants (loads in
#     flight per thread, row groups; lower_rows.ROW_LOADS_IN_FLIGHT / ROW_GROUPS) of this
#     tree and the code before the fix (the tree at $BEFORE, its own defaults) at T = 8192,
#     H 4096 / 8192 / 16384, f16 and bf16, beside torch.compile's epilogue (eager and
#     graphed), every variant checked against the interpreter first; (2) ncu --set full on
#     one launch of each (NVTX-selected) kernel: before, after, torch, f16 at H 4096 / 8192
#     / 16384 and bf16 at 8192, the raw metrics and details as CSV; (3) the other fused
#     schedules at T = 8192 and every fused schedule's check at small sizes (T 1, 37 x
#     H 1000, 1001 (single elements), 16384), this tree's defaults. As written it outlasts
#     one 10-minute call (its first run was cut after the ncu part, losing the tables): run
#     fewer variants or dtypes per call.
#  `measure` (one short call, ~200 s): the row kernels of this tree (VARIANTS, default as-is:
#     its defaults) and of $BEFORE, checked and timed at T = 8192 beside torch.compile's kernel
#     and at T = 128; ncu reports of an earlier call (NCU_REPORTS) converted to CSV; results
#     written into $OUT as they come (h100x1-rows-bandwidth-p1 is this part's output).
#  `final`: compile-and-measure of this tree's defaults (the project's measurement: checks
#     eager and graphed, every baseline, graphed timing) at T 1, 128, 8192 x H 4096, 8192,
#     16384, f16 and bf16, then the summary table (allreduce_rmsnorm_summary.py); and the
#     checks of the other row kernels (studies/rmsnorm.py, f16 / bf16 / f32).
# From the root of the tree to measure, with `.whl` carried; BEFORE: the root of the tree
# before the fix (a `git archive` of it, with this script's rows_bandwidth.py copied in);
# CUBINS: a carried cubin cache (rows_bandwidth.py --compile-only fills one), copied into
# WB_CACHE_DIR so that nvcc runs only for what it lacks. Results: $RES, packed as
# $OUT/results.tgz, and the ncu reports in $OUT.
#  `occupancy` (one call, ~170 s; design note 86): the row cache in registers (`regs`, the code
#     before) against the shared-memory row cache at launch bounds 4 and 3 (`shared4`,
#     `shared3`; lower_rows.ROW_CACHE_SHARED), in one process per part, every kernel checked
#     first: T = 8192 x H 4096 / 8192 / 16384 beside torch.compile (f16, then bf16 one-shot),
#     T = 128 (and H = 1001) for lamport, one-shot, two-shot, and the residual row kernels of
#     studies/rmsnorm.py checked at T = 37; results into $OUT as they come.
#  `rowgrid` (one call, <= 150 s; design notes 91, 92): the "rows" form of the row kernels
#     (CodegenOptions.row_grid = "rows": one row a block, threads by H; variants `rows`, 32
#     registers, and `rows-mb1`, bound 1: 64 registers, no spills) against this tree's
#     defaults (`as-is`) and torch.compile's epilogue, at T 8192 and 128 x H 4096 / 8192 /
#     16384, f16 and bf16, fuse-ar-c-oneshot (VARIANTS, SCHEDULES change them). In parallel
#     first: torch.compile's 12 compiles (one process each: Inductor's disk caches then serve
#     the timing process, which autotunes alone), nvcc filling the cubin cache, the checks of
#     the other row kernels in the rows form (T 37 x H 1001, 16384: single elements and the
#     longest row); meanwhile the timing process makes every input and reference (CPU), then
#     checks every kernel against the interpreter and times it eager and CUDA-graphed.
#     Results into $OUT as they come (T = 8192 first).
# The knobs (codegen.lower_rows.ROW_LOADS_IN_FLIGHT, ROW_GROUPS) are off by default: `as-is`
# is the code before them; a variant `loadsN-groups|nogroups` sets them (design note 80).
#   usage: BEFORE=../llm3-before CUBINS=../llm3-cubins bash benchmarks/gpu/run_rows_bandwidth.sh explore|measure|final|occupancy|rowgrid
set -uo pipefail
PART=${1:-explore}
case "$PART" in explore|measure|final|occupancy|rowgrid) ;;
  *) echo "usage: $0 explore|measure|final|occupancy|rowgrid, got $PART"; exit 2;; esac
source "$(dirname "$0")/env.sh"
pack_results
stamp "machine"
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv
stamp "wheels"
install_wheels || exit 1
ensure_pycuda || exit 1
if [ -n "${CUBINS:-}" ] && [ -d "$CUBINS" ]; then
  mkdir -p "$WB_CACHE_DIR" && cp "$CUBINS"/* "$WB_CACHE_DIR"/ && chmod 700 "$WB_CACHE_DIR" \
    && chmod 600 "$WB_CACHE_DIR"/*
  stamp "cubin cache: $(ls "$WB_CACHE_DIR" | grep -c cubin) cubins carried"
fi
git -C "$REPO" log -1 --format=%H 2>/dev/null || true
DRIVER=benchmarks/gpu/rows_bandwidth.py
SIZES="--T 8192 --H 4096 8192 16384"
if [ "$PART" = explore ]; then
  stamp "after: variants of the one-shot kernel, T = 8192, beside torch.compile"
  timeout 200 python3 $DRIVER --dtypes f16 bf16 $SIZES --schedules fuse-ar-c-oneshot \
    --variants loads8-groups loads4-groups loads8-nogroups loads2-nogroups --torch \
    --tag "after " --out "$RES/after-variants.json" 2>&1 | tee "$RES/after-variants.txt" \
    | grep -v "^ *$"
  if [ -n "${BEFORE:-}" ]; then
    stamp "before the fix ($BEFORE): the same schedules, its defaults"
    ( cd "$BEFORE" && timeout 100 python3 $DRIVER --dtypes f16 bf16 $SIZES \
      --schedules fuse-ar-c-oneshot,fuse-rs-c-ag,fuse-ar-c --variants as-is --tag "before " \
      --out "$RES/before.json" ) 2>&1 | tee "$RES/before.txt"
  fi
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  stamp "ncu: ${NCU:-not found}"
  if [ -n "$NCU" ]; then
    "$NCU" --version | tail -1
    prof() {  # prof NAME TREE ARGS...: one --set full profile per NVTX-selected launch
      local name=$1 tree=$2; shift 2
      ( cd "$tree" && timeout 100 "$NCU" --nvtx --nvtx-include "prof/" --set full \
        -f -o "/tmp/ncu-$name" python3 $DRIVER --no-time --nvtx "$@" ) \
        > "$RES/ncu-$name.log" 2>&1
      tail -3 "$RES/ncu-$name.log"
      "$NCU" --import "/tmp/ncu-$name.ncu-rep" --csv --page raw > "$RES/ncu-$name-raw.csv" 2>&1
      "$NCU" --import "/tmp/ncu-$name.ncu-rep" --csv --page details > "$RES/ncu-$name-details.csv" 2>&1
      ls -la "/tmp/ncu-$name.ncu-rep"
      cp "/tmp/ncu-$name.ncu-rep" "$OUT"/ 2>/dev/null
    }
    prof after-f16 . --dtypes f16 $SIZES --schedules fuse-ar-c-oneshot \
      --variants as-is loads8-nogroups --torch --tag "after "
    [ -n "${BEFORE:-}" ] && prof before-f16 "$BEFORE" --dtypes f16 $SIZES \
      --schedules fuse-ar-c-oneshot --variants as-is --tag "before "
    prof bf16 . --dtypes bf16 --T 8192 --H 8192 --schedules fuse-ar-c-oneshot \
      --variants as-is --torch --tag "after "
  fi
  stamp "after: the other fused schedules, defaults"
  timeout 90 python3 $DRIVER --dtypes f16 bf16 $SIZES --schedules fuse-rs-c-ag,fuse-ar-c \
    --variants as-is --tag "after " --out "$RES/after-schedules.json" 2>&1 \
    | tee "$RES/after-schedules.txt"
  stamp "after: checks at small sizes, every fused schedule (defaults)"
  timeout 90 python3 $DRIVER --dtypes f16 bf16 --T 1 37 --H 1000 1001 16384 --no-time \
    --schedules fuse-ar-c-oneshot,fuse-rs-c-ag,fuse-ar-c,fuse-ar-c-lamport --variants as-is \
    --out "$RES/after-checks.json" 2>&1 | tee "$RES/after-checks.txt" | tail -50
fi
if [ "$PART" = measure ]; then
  # One short call: results straight into $OUT as they come (nothing waits for the end).
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  for rep in ${NCU_REPORTS:-}; do  # reports of an earlier call, carried: their metrics as CSV
    echo "### $(basename "$rep")" >> "$OUT/ncu-raw.csv"
    timeout 30 "$NCU" --import "$rep" --csv --page raw >> "$OUT/ncu-raw.csv" 2>&1
    stamp "$(basename "$rep"): $(wc -l < "$OUT/ncu-raw.csv") lines of raw metrics so far"
  done
  big="--T 8192 --H 4096 8192 16384 --schedules fuse-ar-c-oneshot,fuse-rs-c-ag"
  small="--T 128 --schedules fuse-ar-c-lamport,fuse-ar-c-oneshot,fuse-ar-c"
  stamp "after: T = 8192 beside torch.compile"
  timeout ${BIG_LIMIT:-90} python3 $DRIVER --dtypes f16 bf16 $big --torch --warmup 3 --reps 20 \
    --variants ${VARIANTS:-as-is} \
    --tag "after " --out "$OUT/after.json" 2>&1 | tee "$OUT/after.txt"
  if [ -n "${BEFORE:-}" ]; then
    stamp "before the fix ($BEFORE): T = 8192"
    ( cd "$BEFORE" && timeout ${BEFORE_LIMIT:-55} python3 $DRIVER --dtypes f16 bf16 $big \
      --warmup 3 --reps 20 --tag "before " --out "$OUT/before.json" ) 2>&1 \
      | tee "$OUT/before.txt"
  fi
  stamp "after: T = 128 (and H = 1001: single elements)"
  timeout 25 python3 $DRIVER --dtypes f16 bf16 $small --H 1001 4096 8192 16384 --warmup 3 \
    --variants ${VARIANTS:-as-is} \
    --reps 20 --tag "after " --out "$OUT/after-small.json" 2>&1 | tee -a "$OUT/after.txt"
  if [ -n "${BEFORE:-}" ]; then
    stamp "before the fix: T = 128"
    ( cd "$BEFORE" && timeout 20 python3 $DRIVER --dtypes f16 bf16 $small --H 4096 8192 16384 \
      --warmup 3 --reps 20 --tag "before " --out "$OUT/before-small.json" ) 2>&1 \
      | tee -a "$OUT/before.txt"
  fi
  stamp "checks of the other row kernels (studies/rmsnorm.py), T = 37, H = 1001 and 16384"
  B=studies/rmsnorm.py
  timeout 25 python3 -m workbench.cli.main compile-and-measure --gpus 1 --no-baselines --reps 20 \
    --warmup 1 "$B:residual_f16" "$B:layernorm_f16" "$B:softmax_bf16" "$B:axis_f32" \
    "$B:rmsnorm_f32" --set T=37 --set H=1001 --set H=16384 --out /tmp/rmsnorm-check \
    --name rmsnorm-check 2>/dev/null | tail -25
fi
if [ "$PART" = final ]; then
  S=studies/allreduce_rmsnorm.py
  for dt in f16 bf16; do
    spec=$S; [ "$dt" = bf16 ] && spec="$S:bf16"
    stamp "compile-and-measure, $dt: checks, timing eager and graphed, every baseline"
    timeout "${FINAL_LIMIT:-190}" python3 -m workbench.cli.main compile-and-measure --gpus 1 \
      --graph --warmup 5 --reps 30 "$spec" \
      --schedule fuse-rs-c-ag,fuse-ar-c,fuse-ar-c-oneshot,fuse-ar-c-lamport \
      --set T=1 --set T=128 --set T=8192 --set H=4096 --set H=8192 --set H=16384 \
      --out "$RES" --name "ar-rmsnorm-time-$dt" 2> "$RES/ar-rmsnorm-time-$dt.log" \
      | tee "$RES/ar-rmsnorm-time-$dt.txt" | tail -3
    tail -3 "$RES/ar-rmsnorm-time-$dt.log"
  done
  files=""
  for dt in f16 bf16; do
    f="$RES/ar-rmsnorm-time-$dt.csv"
    [ -f "$f" ] || f="$RES/ar-rmsnorm-time-$dt.partial.json"
    [ -f "$f" ] && files="$files $f"
  done
  # shellcheck disable=SC2086
  python3 benchmarks/gpu/allreduce_rmsnorm_summary.py $files | tee "$RES/ar-rmsnorm-summary.md"
  B=studies/rmsnorm.py
  for dt in f16 bf16 f32; do
    stamp "checks of the other row kernels, $dt"
    timeout 60 python3 -m workbench.cli.main compile-and-measure --gpus 1 --no-baselines \
      --reps 20 "$B:axis_$dt" "$B:rmsnorm_$dt" "$B:layernorm_$dt" "$B:softmax_$dt" \
      "$B:residual_$dt" --set T=1 --set T=37 --set H=1000 --set H=16384 --out "$RES" \
      --name "rmsnorm-check-$dt" 2> "$RES/rmsnorm-check-$dt.log" > "$RES/rmsnorm-check-$dt.txt"
    tail -2 "$RES/rmsnorm-check-$dt.log"
  done
  stamp "check summary (rows whose check is not ok)"
  grep -h -v ",ok" "$RES"/rmsnorm-check-*.csv "$RES"/ar-rmsnorm-time-*.csv 2>/dev/null \
    | grep -v "^spec," | grep -v "(not checked)\|(reference" || echo "every check ok"
fi
if [ "$PART" = occupancy ]; then
  V="${VARIANTS:-regs shared4 shared3}"
  run() {  # run LIMIT NAME ARGS...: one driver process, its records into $OUT/NAME.json
    local limit=$1 name=$2; shift 2
    # shellcheck disable=SC2086
    timeout "$limit" python3 $DRIVER --warmup 3 --reps 20 --variants $V --out "$OUT/$name.json" \
      "$@" 2>&1 | tee "$OUT/$name.txt" | grep -v "^ *$"
  }
  stamp "T = 8192, f16, one-shot and fuse-rs-c-ag, beside torch.compile"
  run "${BIG_LIMIT:-70}" big-f16 --dtypes f16 --T 8192 --H 4096 8192 16384 \
    --schedules fuse-ar-c-oneshot,fuse-rs-c-ag --torch
  stamp "T = 128 (and H = 1001: single elements), lamport, one-shot, two-shot"
  run "${SMALL_LIMIT:-40}" small --dtypes f16 bf16 --T 128 --H 1001 4096 8192 16384 \
    --schedules fuse-ar-c-lamport,fuse-ar-c-oneshot,fuse-ar-c
  stamp "T = 8192, bf16, one-shot, beside torch.compile"
  run "${BF16_LIMIT:-35}" big-bf16 --dtypes bf16 --T 8192 --H 4096 8192 16384 \
    --schedules fuse-ar-c-oneshot --torch
  stamp "checks: studies/rmsnorm.py residual row kernels, T = 37, H 1001 and 16384"
  for dt in f16 bf16; do
    run 12 "residual-$dt" --no-time --dtypes "$dt" --T 37 --H 1001 16384 --schedules fused \
      --study "studies/rmsnorm.py:residual_$dt"
  done
fi
if [ "$PART" = rowgrid ]; then
  V="${VARIANTS:-as-is rows rows-mb1}"
  SCH="${SCHEDULES:-fuse-ar-c-oneshot}"
  SZ="--T 8192 128 --H 4096 8192 16384"  # T = 8192 first: the bandwidth rows
  # One compile thread a process (12 compile at once), the same in the timing process: the
  # setting is part of Inductor's cache key.
  export TORCHINDUCTOR_COMPILE_THREADS=1 TORCHINDUCTOR_FX_GRAPH_CACHE=1
  DONE=/tmp/wb-rowgrid-ready
  rm -f "$DONE"
  stamp "in parallel: torch.compile at every size, nvcc, checks of the other row kernels"
  (
    # shellcheck disable=SC2086
    timeout "${WARM_LIMIT:-80}" python3 $DRIVER --warm-torch --dtypes f16 bf16 $SZ \
      > "$OUT/warm-torch.txt" 2>&1 &
    # shellcheck disable=SC2086
    timeout 80 python3 $DRIVER --compile-only --dtypes f16 bf16 $SZ --schedules "$SCH" \
      --variants $V > "$OUT/compile.txt" 2>&1 &
    port=29541  # each process its own rendezvous port: they run beside the timing process
    for st in residual_f16 residual_bf16 layernorm_f16 softmax_bf16; do
      port=$((port + 1))
      MASTER_PORT=$port timeout 40 python3 $DRIVER --no-time --dtypes "${st#*_}" --T 37 --H 1001 16384 \
        --schedules fused --variants rows --study "studies/rmsnorm.py:$st" \
        --out "$OUT/check-$st.json" > "$OUT/check-$st.txt" 2>&1
    done
    wait
    # Autotuning under 12 processes at once is noisy: the timing process tunes again, alone.
    tuned=$(find "${TORCHINDUCTOR_CACHE_DIR:-/tmp/torchinductor_$(id -un)}" \
      -name "*.best_config" 2>/dev/null | wc -l)
    find "${TORCHINDUCTOR_CACHE_DIR:-/tmp/torchinductor_$(id -un)}" -name "*.best_config" \
      -delete 2>/dev/null
    echo "autotuning results removed: $tuned" >> "$OUT/warm-torch.txt"
    touch "$DONE"
  ) &
  stamp "timing process: inputs and references first (CPU), then waits for the above"
  # shellcheck disable=SC2086
  MASTER_PORT=29540 timeout "${TIME_LIMIT:-125}" python3 $DRIVER --dtypes f16 bf16 $SZ --schedules "$SCH" \
    --variants $V --torch --warmup 3 --reps 20 --prepare-first --wait-for "$DONE" \
    --out "$OUT/rowgrid.json" 2>&1 | tee "$OUT/rowgrid.txt" \
    | grep -v "^ *$\|Warning\|^\[rank\|destroy_process_group"
  wait
  stamp "parallel part: $(grep -c '^compiled' "$OUT/compile.txt") kernels compiled, $(grep -c \
    '^warmed' "$OUT/warm-torch.txt") of 12 torch compiles warmed"
  grep "^warmed\|^autotuning" "$OUT/warm-torch.txt" | sort
  grep -h " ok\| FAIL\|rror" "$OUT"/check-*.txt | head -40
fi
stamp "done"
