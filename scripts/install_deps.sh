#!/usr/bin/env bash
# Installs everything ein needs to build and test, from Debian's packages (and PyPI for
# test-time references when a test needs them). Idempotent: a second run installs nothing
# and returns in about a second. The CUDA toolkit is detected by CMake, never installed here.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config python3
  libtsan2                                       # scripts/racecheck.sh: ThreadSanitizer
  tao-pegtl-dev                                  # grammars
  llvm-19-dev libmlir-19-dev mlir-19-tools       # CPU code generation + JIT
  libopenblas-dev libdnnl-dev libtbb-dev         # CPU GEMM (f64; f32 through oneDNN), threads
  libsleef-dev                                   # the JIT's vectorized f32 exp/log/sin/cos
  openmpi-bin libopenmpi-dev                     # mpirun -np N ein train: data parallel, ZeRO
  libcli11-dev nlohmann-json3-dev libfmt-dev libxxhash-dev
  libjemalloc-dev                                # the executables' malloc (static)
  clang-19 libclang-rt-19-dev                    # scripts/fuzz.sh: libFuzzer, ASan, UBSan
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch python3-numpy                    # tests/models: the GPT against PyTorch
  chromium                                       # tests/cli: ein report's HTML rendered headless
  ccache                                         # the GPU bundle's build shares build/'s objects
  patchelf debootstrap                           # scripts/gpu_bundle.sh and its minimal-root check
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install_deps: all ${#packages[@]} packages present"
fi
