#!/usr/bin/env bash
# ein's eager training step against PyTorch's, in one run (BENCHMARKS.md, "Training step").
# Installs Debian's python3-torch for /usr/bin/python3 when missing, builds the Release driver
# in build-bench/, and prints the table. Extra arguments go to compare_training.py.
#   bash bench/compare_training.sh [--reps 30] [--rounds 5]
set -euo pipefail
cd "$(dirname "$0")/.."
py=/usr/bin/python3
if ! "$py" -c 'import torch' 2>/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch >/dev/null
fi
cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DEIN_BUILD_TESTS=OFF >/dev/null
ninja -C build-bench -j2 ein_training_timings >/dev/null
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 "$py" bench/compare_training.py --driver build-bench/bin/ein_training_timings "$@"
