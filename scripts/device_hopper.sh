#!/usr/bin/env bash
# One device call for the hopper scheduler: install, the hopper GPU tests (HOPPER_K selects
# with pytest -k), the ampere matrix (quick unless AMPERE_ARGS says otherwise) and a bench of
# hopper, ampere and torch.matmul side by side. On the device machine (carry .whl):
#   bash scripts/device_hopper.sh         (logs under $OUT)
set -o pipefail
. "$(dirname "$0")/device_install.sh"
echo "== hopper GPU tests (${HOPPER_SHARDS:-4} shards in parallel)"
for i in $(seq 0 $(( ${HOPPER_SHARDS:-4} - 1 ))); do
  PYTEST_SHARD="$i/${HOPPER_SHARDS:-4}" timeout "${HOPPER_TIMEOUT:-300}" python -m pytest -m gpu \
      tests/gpu/test_hopper_gpu.py -q -rA ${HOPPER_K:+-k "$HOPPER_K"} > "$OUT/hopper_gpu_$i.log" 2>&1 &
done
wait
cat "$OUT"/hopper_gpu_*.log | grep -E "^(FAILED|ERROR|E  )|passed|failed|Timeout" | head -60
if [ -n "${AMPERE_TIMEOUT:-}" ]; then
  echo "== ampere correctness matrix"
  timeout "$AMPERE_TIMEOUT" python scripts/device_ampere.py ${AMPERE_ARGS:---quick --no-bench} 2>&1 \
      | tee "$OUT/ampere.log" | grep -v "^ok  "
fi
echo "== bench: hopper, ampere, torch"
timeout "${BENCH_TIMEOUT:-200}" mmaplug bench --reps 20 ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.txt"
if [ -n "${AB:-}" ]; then echo "== epilogue A/B"; timeout 120 python scripts/hopper_epilogue_ab.py 2>&1 | tail -3; fi
