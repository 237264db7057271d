#!/usr/bin/env bash
# Data races in ein's CUDA kernels, found without a GPU: the fake device's suites with
# ThreadSanitizer on the emulated kernels (EIN_EMULATION_RACECHECK=1; tests/support/host_cuda.cpp).
# A block's threads are fibers there, each a TSan fiber of its own, and TSan is told only of the
# orderings the barriers give (tests/compiler/emit/host_emulation_runtime.cpp), so a read of
# shared or global memory that no barrier orders after another thread's write (or two such
# writes) is reported with both accesses' lines, as compute-sanitizer's racecheck reports it on a
# GPU, whichever thread ran first. Blocks are unordered too: two blocks of a launch that write one
# element of global memory, or one reading what another writes, are reported (each block against
# the ones run just before and after it). Exits 66 at the first race.
# Usage: scripts/racecheck.sh [--build DIR] [PART...]
#   PART: corpus (every corpus kernel, emulate_test.cpp), attention (the tile kernels of every
#   set: WMMA, PTX mma.sync, wgmma, and the scalar ones), device (graph execution and training
#   on the fake device), ops (the op suite's fake-device subset); all four by default.
# The test binaries of DIR (default build) must be built. The emulated kernels are compiled again
# with -fsanitize=thread and cached beside the others (DIR/emulated_kernels): on a 2-core Zen 3,
# corpus takes about 40 s the first time, attention about 4.5 min, device about 1.5, ops about
# 4.5 (2026-12-03).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
if [ "${1:-}" = --build ]; then
  build=$2
  shift 2
fi
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(corpus attention device ops)
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:FILEPATH=//p' "$build/CMakeCache.txt")
tsan=$("$cxx" -print-file-name=libtsan.so)
if [ ! -f "$tsan" ]; then
  echo "racecheck: $cxx has no ThreadSanitizer runtime (libtsan.so); install its libtsan" >&2
  exit 1
fi
# ignore_noninstrumented_modules: the test programs are not instrumented (their thread pools
# would be false reports), the kernels are; allocator_may_return_null: the tests of absurd
# allocations expect null, not TSan's abort.
export EIN_EMULATION_RACECHECK=1
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 ignore_noninstrumented_modules=1 \
allocator_may_return_null=1 ${TSAN_OPTIONS:-}"
run() {  # binary, gtest filter, then any environment
  local binary=$1 filter=$2
  shift 2
  echo "== $binary $filter" | cut -c1-100
  env "$@" LD_PRELOAD="$tsan" "$build/bin/$binary" --gtest_filter="$filter" --gtest_brief=1
}
for part in "${parts[@]}"; do
  case $part in
    corpus) run ein_cuda_tests 'Corpus/Emulate.*' ;;
    attention) run ein_attention_tests 'FakeCuda/*' ;;
    device) run ein_device_tests 'FakeCuda/*' ;;
    ops)
      # the op suite's fake-device subset, as ctest registers it (tests/api/ops/CMakeLists.txt)
      filter=$(cd "$build" && ctest -N -R '^fake_cuda\.' |
               sed -n 's/^ *Test *#[0-9]*: fake_cuda\.//p' | paste -sd:)
      run ein_ops_tests "$filter" EIN_TEST_DEVICE=fake-cuda ;;
    *) echo "racecheck: unknown part '$part' (corpus, attention, device, ops)" >&2; exit 2 ;;
  esac
done
echo "== no data race found (${parts[*]})"
