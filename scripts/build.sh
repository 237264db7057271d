#!/usr/bin/env bash
# Configures and builds ein into build/ (Release, Ninja). The CLI lands at build/bin/ein.
# Extra arguments go to cmake's configure step, e.g. scripts/build.sh -DEIN_WERROR=OFF.
#
#   scripts/build.sh --sanitize address,undefined   # ASan + UBSan into build-asan/
#   scripts/build.sh --sanitize thread              # TSan into build-tsan/
# A sanitized build is RelWithDebInfo (line numbers in reports) in a folder of its own, so it
# never replaces build/; run its tests with `cd build-asan && ctest` (docs/sanitizers.md).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
type=Release
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize)
      [ $# -ge 2 ] || { echo "build.sh: --sanitize needs a list, e.g. address,undefined" >&2; exit 2; }
      case "$2" in
        *thread*) dir=build-tsan ;;
        *) dir=build-asan ;;
      esac
      type=RelWithDebInfo
      args+=("-DEIN_SANITIZE=$2")
      shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
# ccache, where installed, lets the GPU bundle's build (scripts/gpu_bundle.sh) reuse these objects.
if command -v ccache >/dev/null; then args=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache ${args[@]+"${args[@]}"}); fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" ${args[@]+"${args[@]}"} >/dev/null
cmake --build "$dir" -j "$(nproc)"
