#!/usr/bin/env bash
# Causal attention forward + backward, b h t e = 4 8 1024 64 f32 by default: ein's fused kernel
# (bench/attention/attention.ein traced as `ein train` traces it), ein unfused (the same script
# with the recogniser off) and PyTorch 2's scaled_dot_product_attention(is_causal=True), each
# round running all three one after another. 2 threads each. Prints one JSON line per variant
# per round. The PyTorch venv is bench/compare_torch2.sh's.
#   bench/attention/compare.sh [--rounds 5] [--shape "4 8 1024 64"]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=5
shape="4 8 1024 64"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    *) echo "compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
source bench/torch2_venv.sh
# A Release build: build-bench/ (made here), or the one EIN_BENCH_BUILD names (e.g. build).
bin="${EIN_BENCH_BUILD:-build-bench}"
[ -n "${EIN_BENCH_BUILD:-}" ] || cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$bin" -j2 ein_attention_timings >/dev/null
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
# torch at its OpenMP defaults, as its users run it (BENCHMARKS.md, "torch's OpenMP wait policy")
unset OMP_WAIT_POLICY
export OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2
for r in $(seq "$rounds"); do
  "$bin"/bin/ein_attention_timings bench/attention/attention.ein stdlib $shape 1 fused,unfused
  "$venv/bin/python" bench/attention/torch_sdpa.py --shape $shape --rounds 1 --threads 2
done
