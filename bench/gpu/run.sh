#!/usr/bin/env bash
# The CUDA runtime on a GPU machine (an H100): builds ein, runs the CUDA test suites (which on
# a machine without a GPU skip everything that needs one), then prints one table of
# measurements: NVRTC compile times (cold, disk cache, memory cache) of the emitted bf16
# softmax kernel, device-to-device and pinned host-to-device copy bandwidth, a bf16 4096^3
# GEMM through ein's cuBLASLt path, and the same GEMM in PyTorch for comparison.
#   bash bench/gpu/run.sh [BUILD_DIR]        (default: build-gpu)
# Exits nonzero when a test suite fails; the measurements are printed either way.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" ||
  { cat "$out/configure.log"; exit 1; }
ninja -C "$build" -j"$(nproc)" ein ein_cuda_tests ein_cuda_runtime_tests ein_cuda_timings ||
  exit 1

status=0
for suite in ein_cuda_runtime_tests ein_cuda_tests; do
  echo "== $suite"
  "$build/bin/$suite" >"$out/$suite.log" 2>&1 || status=1
  # The summary: passed, skipped (with names and, above them, the reasons) and failed tests.
  sed -n '/^\[==========\] .* ran\./,$p' "$out/$suite.log"
  grep -A1 ': Skipped$' "$out/$suite.log" | grep -v -e ': Skipped$' -e '^--$' | sort | uniq -c
done

echo
echo "== measurements"
"$build/bin/ein" emit softmax --shape 64,1024,512 --dtype bf16 --target cuda >"$out/softmax.cu" ||
  exit 1
"$build/bin/ein_cuda_timings" "$out/softmax.cu" || status=1
python3 - <<'PY' || echo "torch bf16 GEMM 4096^3             |          - |         | skipped: no torch with CUDA"
import time, torch
if not torch.cuda.is_available():
    raise SystemExit(1)
n = 4096
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    a @ b
torch.cuda.synchronize()
reps = 50
t = time.perf_counter()
for _ in range(reps):
    a @ b
torch.cuda.synchronize()
dt = (time.perf_counter() - t) / reps
print(f"{'torch bf16 GEMM 4096^3':<34} | {2 * n**3 / dt / 1e12:>10.3f} | {'TFLOP/s':<7} | "
      f"torch.matmul x{reps}, torch {torch.__version__}")
PY
exit $status
