#!/usr/bin/env bash
# Every test on a fresh machine: install dependencies, build (warnings are errors), run
# ctest (GoogleTest suites, conformance tables, the CLI end to end).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)"
