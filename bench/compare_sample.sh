#!/usr/bin/env bash
# `ein sample` against PyTorch 2 from PyPI sampling the same checkpoint as nanoGPT's sample.py
# does (eager, torch.compile): makes the torch==2.15.0 virtual environment as
# bench/compare_torch2.sh does (not CI's business), builds ein, and runs bench/compare_sample.py.
# Each side runs with its threads' default wait policy (no OMP_WAIT_POLICY: passive would
# cost torch 3x at these sizes, its threads sleeping between small ops). Extra arguments go to it.
#   bash bench/compare_sample.sh [--rounds 3] [--length 200] [--config "T L H D"] [--mode cache]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/torch2_venv.sh
cmake --build build --target ein >/dev/null
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
env -u OMP_WAIT_POLICY OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 python3 bench/compare_sample.py \
  --ein build/bin/ein --python "$venv/bin/python" "$@"
