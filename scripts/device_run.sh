#!/usr/bin/env bash
# One device call: install, disk-cache + dispatch check, end-to-end GPU tests, the kernel
# correctness matrix, and `mmaplug bench`. Usage on the device machine (carry .whl):
#   bash scripts/device_run.sh            (results and logs under $OUT)
set -o pipefail
. "$(dirname "$0")/device_install.sh"
echo "== disk cache and dispatch: two fresh processes"
for i in 1 2; do timeout 120 python scripts/cache_check.py 2>&1 | tail -4 || export MMAPLUG_FAST_LAUNCH=0; done
echo "MMAPLUG_FAST_LAUNCH=${MMAPLUG_FAST_LAUNCH:-1}"
echo "== end-to-end GPU tests"
timeout 200 python -m pytest -m gpu tests/gpu/test_compile_gpu.py -q 2>&1 | tee "$OUT/gpu_e2e.log" | tail -15
echo "== mmaplug demo (the main job)"
timeout 90 mmaplug demo 2>&1 | tail -6
echo "== kernel correctness matrix"
timeout ${AMPERE_TIMEOUT:-150} python scripts/device_ampere.py ${AMPERE_ARGS:---no-bench} 2>&1 | tee "$OUT/ampere.log" | grep -v "^ok  "
echo "== mmaplug bench"
timeout ${BENCH_TIMEOUT:-200} mmaplug bench --workers 14 --reps 20 --plot "$OUT/bench.png" 2>&1 | tee "$OUT/bench.txt"
