#!/usr/bin/env bash
# One device call: install, end-to-end GPU tests, disk-cache check, kernel matrix + timings.
# Usage on the device machine (carry .whl):  bash scripts/device_run.sh
set -o pipefail
python -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site
python -m pip install -q --no-deps --no-build-isolation . 2>&1 | grep -v WARNING
python -c "import mmaplug" || { echo "install failed"; exit 1; }
export MMAPLUG_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONUNBUFFERED=1 MMAPLUG_CACHE_DIR=/tmp/mmcache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
echo "== disk cache: two fresh processes"
for i in 1 2; do timeout 120 python scripts/cache_check.py 2>&1 | tail -3 || export MMAPLUG_DISK_CACHE=0; done
echo "== end-to-end GPU tests"
timeout 240 python -m pytest -m gpu tests/gpu/test_compile_gpu.py -q -x 2>&1 | tee "$OUT/gpu_e2e.log" | tail -25
echo "== kernel matrix and timings"
timeout ${AMPERE_TIMEOUT:-330} python scripts/device_ampere.py ${AMPERE_ARGS:-} 2>&1 | tee "$OUT/ampere.log" | grep -v "^ok  "
