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
# corpus kernel, the attention's tile kernels and the training step's kernels on the fake device
# (8 min 12 s on a 2-core Zen 3, the kernels compiled afresh). The op suite's part takes
# about 7 more: run it with scripts/racecheck.sh ops (no part: all four) after changing those
# kernels.
scripts/racecheck.sh corpus attention device
# The GPU bundle (docs/cuda.md): built, at most 60 MiB, and checked in a minimal Debian root
# without development packages (ldd, ein shape/check/train, the CPU op suite, the no-driver error).
scripts/gpu_bundle.sh --check
# The libFuzzer targets (tests/fuzz/, docs/fuzzing.md): every input reader for 20 s.
scripts/fuzz.sh
