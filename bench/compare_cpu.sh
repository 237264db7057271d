#!/usr/bin/env bash
# ein's CPU ops side by side with PyTorch and numpy, in one run (BENCHMARKS.md, "CPU ops").
# Installs what is missing (Debian's python3-torch and python3-numpy, for /usr/bin/python3 —
# not the pyenv python3 that may come first on PATH), builds the Release driver in
# build-bench/, and prints the table. Extra arguments go to compare_cpu.py (--reps, --rounds).
#   bash bench/compare_cpu.sh [--reps 20] [--rounds 3]
set -euo pipefail
cd "$(dirname "$0")/.."
py=/usr/bin/python3
if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch python3-numpy >/dev/null
fi
cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DEIN_BUILD_TESTS=OFF >/dev/null
ninja -C build-bench -j2 ein_cpu_timings bench_ops >/dev/null
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
# Both sides get the two cores: OpenBLAS (ein's GEMMs and numpy's) and torch.set_num_threads(2).
OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 "$py" bench/compare_cpu.py --driver build-bench/bin/ein_cpu_timings "$@"
