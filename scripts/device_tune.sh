#!/usr/bin/env bash
# Issue 12's measurements in one device call, after the install (scripts/device_install.sh):
#  1. the estimate, then the sweep of the llm + skinny + odd corpus (--time-limit; resumable),
#  2. the quality report: default, the tuned table in the database and leave-one-out (its
#     choices timed first), nvMatmulHeuristics where installed; text, JSON and PNG,
#  3. one problem x 50 candidates from a cold kernel cache, builds on every core but one.
# Everything lands under $OUT (summary.txt first). Budgets in seconds, from the environment:
# SWEEP_S (225), REPORT_S (60), SINGLE_S (100; 0 leaves step 3 out); per corpus problem
# CANDIDATES hopper (14) and AMPERE ampere-scheduler (4) candidates. The databases and logs are
# also packed into $OUT/tune_files.tgz (the device machine returns only a few files).
#   bash scripts/device_tune.sh             on the device machine
#   bash scripts/device_tune.sh --dry-run   anywhere: the same steps, PTX builds instead of
#                                           timing (2 candidates a problem), no GPU needed
set -o pipefail
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
OUT=${OUT:-$(mktemp -d)}
CORPUS=(--corpus llm --corpus skinny --corpus odd)
SINGLE=(--shape 4096x4096x4096 --dtype float16)  # in no corpus: all 50 are measured here
CANDIDATES=${CANDIDATES:-14} AMPERE=${AMPERE:-4}
WORKERS=${WORKERS:-$(( $(nproc) > 1 ? $(nproc) - 1 : 1 ))}
SWEEP_S=${SWEEP_S:-225} REPORT_S=${REPORT_S:-60} SINGLE_S=${SINGLE_S:-100}
TABLE=examples/tuned_table/src/mmaplug_tuned_table/__init__.py  # the tuned table, uninstalled
DB=$OUT/tune.sqlite
export PYTHONUNBUFFERED=1 MMAPLUG_TUNING_DB=$DB MMAPLUG_CACHE_DIR=${MMAPLUG_CACHE_DIR:-/tmp/mmcache}
unset MMAPLUG_DISABLE_PLUGIN_AUTOLOAD  # the report compares every installed heuristic
if [ $DRY = 1 ]; then CANDIDATES=2 AMPERE=1; fi
SETS=(--heuristic "$TABLE" --heuristic default@ampere)
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
stamp() { while IFS= read -r line; do printf '%(%s)T %s\n' -1 "$line"; done; }
phases() {  # seconds of builds and of timing, from a stamped progress log
  awk -v what="$1" 'NR == 1 {t0 = $1; b = $1} / built / {b = $1} {t = $1} END {
    printf "%s: %d s of builds, %d s of timing (progress stamps)\n", what, b - t0, t - b}' "$2"
}

python -c "import mmaplug" || { summary "mmaplug is not installed"; exit 1; }
summary "== device_tune $(date -u +%FT%TZ) dry-run=$DRY workers=$WORKERS" \
  "candidates=$CANDIDATES+$AMPERE ampere"
[ $DRY = 0 ] && nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$OUT/summary.txt"
if python -c "import nvMatmulHeuristics" 2>/dev/null; then
  # the adapter answers for the ampere scheduler only: reported as nvmmh@ampere
  python -m pip install -q --no-deps --no-build-isolation ./examples/nvmmh_heuristic \
    && SETS+=(--heuristic nvmmh@ampere) && summary "nvMatmulHeuristics: installed; nvmmh@ampere"
else
  summary "nvMatmulHeuristics: not installed (nvmmh adapter not reported)"
fi

summary "== estimate"
mmaplug tune "${CORPUS[@]}" --candidates "$CANDIDATES" --ampere "$AMPERE" --workers "$WORKERS" --plan-only \
  > "$OUT/candidates.txt" 2> >(tee -a "$OUT/summary.txt") || { summary "planning failed"; exit 1; }
mmaplug tune "${SINGLE[@]}" --candidates 50 --workers "$WORKERS" --plan-only \
  > "$OUT/single_candidates.txt" 2> >(tee -a "$OUT/summary.txt")
sleep 0.2  # the tee of the estimates

summary "== sweep (limit ${SWEEP_S} s)"
start=$SECONDS
if [ $DRY = 1 ]; then
  # PTX of every distinct kernel; an empty database for the report's code path
  mmaplug tune "${CORPUS[@]}" --candidates "$CANDIDATES" --ampere "$AMPERE" --workers "$WORKERS" --build-only \
    --timeout 300 2>&1 | tail -3 | tee -a "$OUT/summary.txt"
  python -c "from mmaplug.tune import db; db.connect('$DB').close()"
else
  timeout -k 10 $(( SWEEP_S + 90 )) mmaplug tune "${CORPUS[@]}" --candidates "$CANDIDATES" \
    --ampere "$AMPERE" --workers "$WORKERS" --time-limit "$SWEEP_S" --timeout 60 --db "$DB" --progress --json \
    > "$OUT/sweep.json" 2> >(stamp > "$OUT/sweep.log")
  rc=$?
  sleep 0.2
  summary "sweep: exit $rc, $(( SECONDS - start )) s wall; $(tr -d ' \n' < "$OUT/sweep.json")"
  phases sweep "$OUT/sweep.log" | tee -a "$OUT/summary.txt"
fi

summary "== report (limit ${REPORT_S} s)"
measure=(--measure --timeout 30)
[ $DRY = 1 ] && measure=()
timeout -k 10 "$REPORT_S" mmaplug report "${CORPUS[@]}" --db "$DB" "${SETS[@]}" \
  --leave-one-out "${measure[@]}" --json > "$OUT/report.json" 2> "$OUT/report.log"
summary "report: exit $? $(tail -1 "$OUT/report.log")"
plot=(--plot "$OUT/report.png")
python -c "import matplotlib" 2>/dev/null || { plot=(); summary "no matplotlib: no report.png"; }
timeout -k 10 60 mmaplug report "${CORPUS[@]}" --db "$DB" "${SETS[@]}" \
  --leave-one-out "${plot[@]}" > "$OUT/report.txt" 2>&1
tee -a "$OUT/summary.txt" < "$OUT/report.txt"
mmaplug db --db "$DB" --best --format csv > "$OUT/best.csv" 2>/dev/null
mmaplug db --db "$DB" --format json 2>/dev/null | python -c "import collections, json, sys
print('rows by status:', dict(collections.Counter(r['status'] for r in json.load(sys.stdin))))" \
  | tee -a "$OUT/summary.txt"

summary "== one problem x 50 candidates, cold kernel cache (limit ${SINGLE_S} s)"
start=$SECONDS
if [ $DRY = 1 ]; then
  summary "(dry run: planned only; see single_candidates.txt)"
elif [ "$SINGLE_S" = 0 ]; then
  summary "(SINGLE_S=0: left out)"
else
  MMAPLUG_CACHE_DIR=/tmp/mmcache_single timeout -k 10 $(( SINGLE_S + 60 )) mmaplug tune \
    "${SINGLE[@]}" --candidates 50 --workers "$WORKERS" --time-limit "$SINGLE_S" --timeout 60 \
    --db "$OUT/single.sqlite" --progress --json > "$OUT/single.json" 2> >(stamp > "$OUT/single.log")
  rc=$?
  sleep 0.2
  summary "single: exit $rc, $(( SECONDS - start )) s wall; $(tr -d ' \n' < "$OUT/single.json")"
  phases single "$OUT/single.log" | tee -a "$OUT/summary.txt"
  mmaplug report "${SINGLE[@]}" --db "$OUT/single.sqlite" 2>&1 | tail -2 | tee -a "$OUT/summary.txt"
fi
tar -czf "$OUT/tune_files.tgz" -C "$OUT" --exclude tune_files.tgz . 2>/dev/null
summary "== done in ${SECONDS} s; files under $OUT"
