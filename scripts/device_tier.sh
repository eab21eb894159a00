#!/usr/bin/env bash
# One device call proving a change: install, the whole GPU tier in SHARDS shards side by side,
# the lean-vs-stock build check when .door_check/ is carried, `mmaplug bench` on the issue-8
# shapes (hopper against cuBLAS) and the serving corpus (decode, skinny, deep K, layouts, batched,
# fused) per call and as CUDA-graph replays, and the fp8 corpus against torch._scaled_mm. On the
# device machine (carry .whl): bash scripts/device_tier.sh (logs under $OUT). PARTS picks the
# parts (default: "tier bench serving"; "fp8", "fp8_block", "fp8_report", "serving_report",
# "targets" (TARGETS_AGAINST: an earlier 'targets --json' file, carried, for a last column),
# "ffn", "ffn_report", "fp8_rows", "corpus_report" (CORPUS: a corpus file's defaults against
# a sweep), "probes" (PROBES: config_probe.py's), "stalls" (STALLS:
# ncu_probe.py's specs under ncu, summed by scripts/ncu_stalls.py) and "timeline" (TIMELINE:
# the same specs' graphs replayed, scripts/graph_timeline.py) on request), so
# that a run can be split over calls of 10 minutes each. The tier alone takes one call: 8
# shards of about 175 tests took 371-406 s side by side in run 112 and 397-440+ s in run 115
# (H200; three shards cut at 440), and run 195 cut 7 of 8 at 470 s; 12 shards of about 120 (the
# default since) took 360-415 s in run 202, 333-377 s in run 206 and 367-403 s in run 220 (an
# H100, 1,481 tests), the whole tier inside TIER_TIMEOUT 520, which leaves the 600-s call its
# install and the interrupt's grace. Give the tier its own call. A shard past it is interrupted
# (SIGINT), so pytest still prints its failures and counts, and each shard's 15 slowest tests;
# the shards' logs come back as one file, tier.log (a device call returns a limited number of
# files). TIER_K (a pytest -k expression) runs part of the tier, e.g. a new path's tests
# before the whole tier proves the change: TIER_K=swap_ab_staged PARTS=tier.
set -o pipefail
. "$(dirname "$0")/device_install.sh"
PARTS=${PARTS:-"tier bench serving"}
SHARDS=${SHARDS:-12}
if [[ " $PARTS " == *" tier "* ]]; then
echo "== GPU tier ($SHARDS shards)"
for i in $(seq 0 $((SHARDS - 1))); do
  PYTEST_SHARD="$i/$SHARDS" timeout -s INT -k 30 "${TIER_TIMEOUT:-520}" python -m pytest -q \
      -m gpu tests -p no:randomly --durations=15 ${TIER_K:+-k "$TIER_K"} \
      > "$OUT/tier_$i.log" 2>&1 &
done
wait
for i in $(seq 0 $((SHARDS - 1))); do
  echo "== shard $i/$SHARDS"
  cat "$OUT/tier_$i.log"
  rm "$OUT/tier_$i.log"
done > "$OUT/tier.log"
grep -E "^(FAILED|ERROR)" "$OUT/tier.log" | head -40
grep -E "^== shard|(passed|failed|error).* in [0-9.]+s|Interrupted" "$OUT/tier.log"
fi
if [ -d .door_check ]; then
  echo "== lean and stock Numba pipelines"
  for m in lean stock; do MMAPLUG_CACHE_DIR=/tmp/mm_$m timeout 60 python .door_check/gpu_door.py $m 2>&1 | tail -4; done
fi
if [[ " $PARTS " == *" bench "* ]]; then
echo "== bench (hopper vs cuBLAS, per-call CUDA events)"
MMAPLUG_DISABLE=ampere timeout "${BENCH_TIMEOUT:-150}" mmaplug bench --workers 14 --reps 20 \
    --shape 4096x4096x4096 --shape 8192x8192x8192 --shape 2048x14336x5120 \
    --shape 16384x1024x512 --shape 128x4096x4096 --shape 1x4096x4096 2>&1 | tee "$OUT/bench.txt"
fi
if [[ " $PARTS " == *" serving "* ]]; then
echo "== the serving corpus, per call and as CUDA-graph replays (ours vs cuBLAS)"
MMAPLUG_DISABLE=ampere timeout "${GRAPH_TIMEOUT:-240}" mmaplug bench --corpus serving --graph \
    --workers 14 --reps 20 --progress --json > "$OUT/serving.json" 2> "$OUT/serving.txt"
tail -60 "$OUT/serving.txt"
fi
if [[ " $PARTS " == *" fp8 "* ]]; then
echo "== the fp8 corpus against torch._scaled_mm (cuBLASLt), per call and as CUDA-graph replays"
timeout "${FP8_TIMEOUT:-200}" mmaplug bench --corpus fp8 --graph --workers 14 --reps 20 \
    --progress --json > "$OUT/fp8.json" 2> "$OUT/fp8.txt"
tail -40 "$OUT/fp8.txt"
fi
if [[ " $PARTS " == *" fp8_block "* ]]; then
echo "== the block-scaled fp8 corpus (cuBLASLt per tensor, promoted, beside it)"
timeout "${FP8_TIMEOUT:-200}" mmaplug bench --corpus fp8_block --graph --workers 14 --reps 20 \
    --progress --json > "$OUT/fp8_block.json" 2> "$OUT/fp8_block.txt"
tail -20 "$OUT/fp8_block.txt"
fi
if [[ " $PARTS " == *" targets "* ]]; then
echo "== issues 24 and 25's kernel targets (mmaplug targets: 149 problems, 2-4 min)"
timeout "${TARGETS_TIMEOUT:-400}" mmaplug targets --workers 14 --progress --json \
    > "$OUT/targets.json" 2> "$OUT/targets.txt"
mmaplug targets --rows "$OUT/targets.json" ${TARGETS_AGAINST:+--against "$TARGETS_AGAINST"} \
    | tee "$OUT/targets.md"
fi
if [[ " $PARTS " == *" ffn "* ]]; then
echo "== the fused llama-8B FFN at decode and small-batch rows: default (decode kernel to 16 rows)"
echo "   against hopper's horizontal kernel and torch, graph replays; at 32 rows 64x128 tiles too"
for m in 1 16; do
  timeout "${FFN_TIMEOUT:-60}" python scripts/ffn_probe.py --shape $m 14336 4096 --graph \
      --dtypes bfloat16 --variants default hopper 2>&1 | tee -a "$OUT/ffn.jsonl"
done
timeout "${FFN_TIMEOUT:-60}" python scripts/ffn_probe.py --shape 32 14336 4096 --graph \
    --dtypes bfloat16 --variants default --overrides '{"cta_tile": [64, 128, 64],
    "warp_tile": [64, 128, 64], "instruction_tile": [64, 128, 16], "stages": 6}' 2>&1 \
    | tee -a "$OUT/ffn.jsonl"
fi
if [[ " $PARTS " == *" stalls "* ]]; then  # STALLS: ncu_probe.py's specs, read by instruction
echo "== where the warps wait, by SASS instruction (ncu's source page, scripts/ncu_stalls.py)"
timeout "${STALLS_TIMEOUT:-240}" ncu --profile-from-start off --clock-control "${CLOCKS:-none}" \
    --set full --import-source no -f -o /tmp/stalls python scripts/ncu_probe.py $STALLS \
    > "$OUT/stalls_ncu.txt" 2>&1
grep RANGE "$OUT/stalls_ncu.txt"
ncu -i /tmp/stalls.ncu-rep --page source --csv --print-source sass > /tmp/stalls_sass.csv
ncu -i /tmp/stalls.ncu-rep --page details --csv | gzip > "$OUT/stalls_details.csv.gz"
gzip -c /tmp/stalls_sass.csv > "$OUT/stalls_sass.csv.gz"  # every instruction, read here later
python scripts/ncu_stalls.py /tmp/stalls_sass.csv --top "${TOP:-12}" | tee "$OUT/stalls.txt" \
    | grep "^=="
fi
if [[ " $PARTS " == *" timeline "* ]]; then  # TIMELINE: ncu_probe.py's specs, graphs replayed
echo "== each kernel of a replayed graph: duration, gap, period (scripts/graph_timeline.py)"
timeout "${TIMELINE_TIMEOUT:-240}" python scripts/graph_timeline.py $TIMELINE \
    2>&1 | tee "$OUT/timeline.jsonl"
fi
if [[ " $PARTS " == *" probes "* ]]; then  # PROBES: config_probe.py's probes, one after another
for probe in ${PROBES:-cluster2x2 ffn_tiles}; do
  echo "== python scripts/config_probe.py $probe"
  timeout "${PROBE_TIMEOUT:-240}" python scripts/config_probe.py "$probe" 2>&1 \
      | tee "$OUT/$probe.txt" | tail -40
done
fi
report_part() {  # CORPUS [NAME]: a time-limited, resumable sweep (hopper + decode), the report
  local MMAPLUG_TUNING_DB="/tmp/${2:-$1}_tune.sqlite"  # kept while the machine is: reruns resume
  export MMAPLUG_TUNING_DB
  # TUNE_DB_FROM: an earlier call's database (its $OUT copy, carried), so a fresh machine resumes
  if [ -n "${TUNE_DB_FROM:-}" ] && [ ! -e "$MMAPLUG_TUNING_DB" ]; then
    cp "$TUNE_DB_FROM" "$MMAPLUG_TUNING_DB"
  fi
  set -- "$1" "${2:-$1}"
  # DECODE: the decode kernel's best-modelled candidates a problem (unset: its whole space)
  timeout -k 10 "${SWEEP_S:-330}" mmaplug tune --corpus "$1" --candidates "${CANDIDATES:-4}" \
      ${DECODE:+--decode "$DECODE"} --workers 15 --time-limit $(( ${SWEEP_S:-330} - 60 )) \
      --timeout 60 --json \
      > "$OUT/$2_sweep.json" 2> "$OUT/$2_sweep.log"
  tail -3 "$OUT/$2_sweep.log"
  if [ "${REPORT_S:-150}" != 0 ]; then  # REPORT_S=0: the sweep alone, a later call reports
    timeout -k 10 "${REPORT_S:-150}" mmaplug report --corpus "$1" --measure --timeout 30 \
        > "$OUT/$2_report.txt" 2> "$OUT/$2_report.log"
    tail -60 "$OUT/$2_report.txt"
  fi
  cp "$MMAPLUG_TUNING_DB" "$OUT/"  # the rows behind the report: mmaplug db --db ... --best
}
if [[ " $PARTS " == *" fp8_report "* ]]; then
echo "== the fp8 corpus's default against a time-limited sweep (resumable: the database is kept)"
report_part fp8
fi
if [[ " $PARTS " == *" serving_report "* ]]; then
echo "== the serving corpus's default against a time-limited sweep (issue 25: >= 0.97)"
# 987 candidates with the decode kernel's whole space (two calls: REPORT_S=0, then
# TUNE_DB_FROM); DECODE=16 makes 616 (the plan-only count), one call
report_part serving
fi
if [[ " $PARTS " == *" ffn_report "* ]]; then
echo "== the decode FFN (scripts/ffn_decode.toml): its default against the decode kernel's space"
CANDIDATES=${CANDIDATES:-1} report_part scripts/ffn_decode.toml ffn_decode
fi
if [[ " $PARTS " == *" corpus_report "* ]]; then  # CORPUS: a corpus file (scripts/gaps.toml)
echo "== $CORPUS: its defaults against a sweep of ${CANDIDATES:-4} hopper candidates a problem"
report_part "$CORPUS" "$(basename "$CORPUS" .toml)"
fi
if [[ " $PARTS " == *" fp8_rows "* ]]; then
echo "== FP8 decode rows (scripts/fp8_decode_rows.toml): their default against the decode space"
CANDIDATES=${CANDIDATES:-1} report_part scripts/fp8_decode_rows.toml fp8_rows
fi
