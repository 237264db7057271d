#!/usr/bin/env bash
# ein::quantized_matmul (q8_0, q4_0) and ein's f32 product against PyTorch 2 from PyPI (f32
# `x @ w` and its int8 dynamically quantized Linear) at decode sizes: makes the torch==2.15.0
# virtual environment as bench/compare_torch2.sh does (not CI's business), builds the timing
# binary in build/, and runs bench/quantized_matmul.py. Extra arguments go to it.
#   bash bench/quantized_matmul.sh [--rounds 3] [--shape 4096 4096] [--m 1]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/torch2_venv.sh
cmake --build build --target ein_quantized_matmul_timings >/dev/null
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
env -u OMP_WAIT_POLICY python3 bench/quantized_matmul.py \
  --ein-timings build/bin/ein_quantized_matmul_timings --python "$venv/bin/python" "$@"
