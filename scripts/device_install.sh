# Sourced first by scripts/device_run.sh and scripts/device_hopper.sh on the device machine (carry
# .whl): installs the carried wheels into /tmp/site and mmaplug itself (exits when the import
# fails), exports the settings every device run shares and prints the GPU's clocks.
python -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site
python -m pip install -q --no-deps --no-build-isolation . 2>&1 | grep -v WARNING
python -c "import mmaplug" || { echo "install failed"; exit 1; }
export MMAPLUG_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONUNBUFFERED=1 MMAPLUG_CACHE_DIR=/tmp/mmcache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
