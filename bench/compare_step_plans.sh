#!/usr/bin/env bash
# The training step's save/recompute plans against the commit before them (a416184: the
# backward replicated the forward), on the byte GPT at the training-at-scale issue's sizes.
# Builds both Release binaries (the old one in a git worktree under build-plans/), then runs
# bench/compare_step_plans.py. Extra arguments go to it.
#   bash bench/compare_step_plans.sh [--rounds 3] [--config "128 4 8 256 16"]
set -euo pipefail
cd "$(dirname "$0")/.."
old=a416184
if [ ! -d build-plans/old-src ]; then
  git worktree add -f build-plans/old-src "$old" >/dev/null
fi
cmake -S build-plans/old-src -B build-plans/old -G Ninja -DCMAKE_BUILD_TYPE=Release -DEIN_BUILD_TESTS=OFF >/dev/null
ninja -C build-plans/old -j2 ein >/dev/null
cmake -S . -B build-plans/new -G Ninja -DCMAKE_BUILD_TYPE=Release -DEIN_BUILD_TESTS=OFF >/dev/null
ninja -C build-plans/new -j2 ein >/dev/null
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 python3 bench/compare_step_plans.py \
  --old build-plans/old --new build-plans/new "$@"
