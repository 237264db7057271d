#!/usr/bin/env bash
# Data-parallel throughput (issue: beyond one device): mpirun -np 2 ein train, one core per
# rank, against one process on two threads, alternating per round. Builds the Release `ein` in
# build-bench/; Open MPI comes from scripts/install_deps.sh. Arguments go to
# compare_distributed.py.
#   bash bench/compare_distributed.sh [--rounds 5] [--steps 30] [--zero 1] [--T 128 --L 4 --H 8 --D 256 --B 16]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DEIN_BUILD_TESTS=OFF >/dev/null
ninja -C build-bench -j2 ein >/dev/null
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 bench/compare_distributed.py --ein build-bench/bin/ein "$@"
