#!/usr/bin/env bash
# An LM head (rows x d times d x vocabulary) and its cross-entropy, forward + backward, at the
# FlashAttention issue's size by default (rows 4096, d 768, vocabulary 50257, f32): ein fused
# (compiler/fuse/cross_entropy.h) against ein unfused (the logits and their gradient stored),
# rounds alternating, 2 threads. One JSON line per variant and round.
#   bench/attention/compare_lm_head.sh [--rounds 3] [--shape "4096 768 50257"]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3
shape="4096 768 50257"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    *) echo "compare_lm_head.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
# A Release build: build-bench/ (made here), or the one EIN_BENCH_BUILD names (e.g. build).
bin="${EIN_BENCH_BUILD:-build-bench}"
[ -n "${EIN_BENCH_BUILD:-}" ] || cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$bin" -j2 ein_lm_head_timings >/dev/null
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
export OMP_WAIT_POLICY=passive OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2
for r in $(seq "$rounds"); do
  "$bin"/bin/ein_lm_head_timings bench/attention/lm_head.ein stdlib $shape 1 fused,unfused
done
