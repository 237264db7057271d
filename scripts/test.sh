#!/usr/bin/env bash
# Every test on a fresh machine: install dependencies, build (warnings are errors), run
# ctest (GoogleTest suites, conformance tables, the CLI end to end), the data-race check of the
# CUDA kernels, build and check the GPU bundle in a minimal root, then the fuzz targets.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
# The conformance summaries first (row counts by outcome), then every test.
build/bin/ein_conformance_tests --gtest_brief=1 | grep -E "conformance|agree|DISAGREE|design notes" || true
cd build
ctest --output-on-failure -j "$(nproc)"
cd ..
# Data races in the CUDA kernels under ThreadSanitizer on the fake device (docs/cuda.md): every
# corpus kernel and the attention's tile kernels (about 6 minutes on a 2-core Zen 3, its kernels
# compiled afresh). The device and op parts take longer: run them with scripts/racecheck.sh
# device ops (no part: all four) after changing those kernels.
scripts/racecheck.sh corpus attention
# The GPU bundle (docs/cuda.md): built, at most 60 MiB, and checked in a minimal Debian root
# without development packages (ldd, ein shape/check/train, the CPU op suite, the no-driver error).
scripts/gpu_bundle.sh --check
# The libFuzzer targets (tests/fuzz/, docs/fuzzing.md): every input reader for 20 s.
scripts/fuzz.sh
