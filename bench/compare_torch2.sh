#!/usr/bin/env bash
# ein train against PyTorch 2 from PyPI (eager and torch.compile) on the byte GPT at the
# training-at-scale issue's sizes. Makes a virtual environment with torch==2.15.0 from PyPI
# (not CI's business: only this script installs it) outside the source tree, in
# $EIN_TORCH2_VENV (default ~/.cache/ein/torch2-venv: several GB that tree-walking tools should
# not see), builds the Release ein in build-bench/, and runs bench/compare_torch2.py. Extra
# arguments go to it.
#   bash bench/compare_torch2.sh [--rounds 3] [--config "128 4 8 256 16"] [--precision bf16]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/torch2_venv.sh
command -v /usr/bin/time >/dev/null || { apt-get update -qq && apt-get install -y -qq time; }
cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DEIN_BUILD_TESTS=OFF >/dev/null
ninja -C build-bench -j2 ein >/dev/null
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
# torch runs with its OpenMP defaults, as its users run it: OMP_WAIT_POLICY=passive (set here
# before 2026-12-02) made torch eager 2.35x slower at 64 2 4 128 16 on a 2-core Zen 3
# (BENCHMARKS.md, "torch's OpenMP wait policy").
env -u OMP_WAIT_POLICY OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 python3 bench/compare_torch2.py \
  --ein build-bench/bin/ein --python "$venv/bin/python" "$@"
