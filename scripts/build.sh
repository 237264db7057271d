#!/usr/bin/env bash
# Configures and builds ein into build/ (Release, Ninja). The CLI lands at build/bin/ein.
# Extra arguments go to cmake's configure step, e.g. scripts/build.sh -DEIN_WERROR=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j "$(nproc)"
