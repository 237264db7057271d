#!/usr/bin/env bash
# The GPU bundle (docs/cuda.md, "Carrying ein to a GPU machine"): builds ein on this machine for
# a GPU machine that has nothing of ein's dependencies (only glibc, libstdc++, the CUDA driver
# and toolkit, Python with torch), and packs everything the GPU checks need into one folder of
# at most 60 MiB:
#
#   dist/ein-gpu/run.sh          unpacks the payload beside itself once, then runs the GPU
#                                checks: bench/gpu/run.sh on the bundle's binaries (no build)
#   dist/ein-gpu/payload.tar.gz  bin/ (ein, the CUDA, device and op suites, the GPU benchmarks),
#                                lib/ (ein's layers as shared libraries with MLIR/LLVM, OpenBLAS,
#                                xxHash and zlib linked in, and the few shared libraries a bare
#                                machine lacks, found through $ORIGIN), share/ein/stdlib,
#                                examples/, the suites' data under tests/, bench/ scripts
#   dist/ein-gpu/README.md       how to carry it and what it runs
#
# The payload is compressed because MLIR/LLVM's code alone is about 50 MB; unpacked the bundle
# is about 85 MB. oneDNN (40 MB) and Open MPI stay out: CPU GEMMs go to OpenBLAS, and an
# mpirun launch says that this build has no MPI.
#
#   scripts/gpu_bundle.sh [--check] [--build-dir DIR] [--out DIR]
#     --check      then check the bundle in a minimal Debian root with no development
#                  packages (scripts/bundle/minimal_root_check.sh; needs root and debootstrap)
#     --build-dir  the CMake build folder (default build-bundle)
#     --out        the bundle folder (default dist/ein-gpu)
# With ccache installed (scripts/install_deps.sh) the bundle build shares its objects with
# scripts/build.sh's: after a normal build it compiles almost nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-bundle
out=dist/ein-gpu
check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=1; shift ;;
    --build-dir) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_bundle.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
limit_mib=60
start=$(date +%s)

# 1. The build: every layer a shared library, MLIR/LLVM static inside (CMakeLists.txt,
#    EIN_GPU_BUNDLE).
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
log=$(mktemp)
stage=$(mktemp -d)
trap 'rm -rf "$stage" "$log"' EXIT
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEIN_GPU_BUNDLE=ON \
  ${launcher[@]+"${launcher[@]}"} >"$log" 2>&1 || { cat "$log"; exit 1; }
executables=(ein ein_ops_tests ein_cuda_tests ein_cuda_runtime_tests ein_device_tests
             ein_attention_tests ein_cuda_timings ein_op_bandwidth ein_lm_head_timings
             ein_attention_kernel_timings)
cmake --build "$build" -j "$(nproc)" --target "${executables[@]}" ein_stdlib >"$log" 2>&1 ||
  { tail -n 60 "$log"; exit 1; }

# 2. The tree: binaries, ein's libraries, the data the suites and benchmarks read.
root=$stage/root
mkdir -p "$root"/{bin,lib,share/ein,bench/gpu,tests/conformance,tests/cli,tests/compiler/emit}
for e in "${executables[@]}"; do cp "$build/bin/$e" "$root/bin/"; done
cp "$build"/lib/libein_*.so "$root/lib/"
cp -r "$build/share/ein/stdlib" "$root/share/ein/"
cp -r examples "$root/"
cp -r tests/models "$root/tests/"
cp -r tests/conformance/data tests/conformance/einops_differences.tsv "$root/tests/conformance/"
cp tests/cli/held_back_cases.tsv "$root/tests/cli/"
cp tests/compiler/emit/host_emulation.h tests/compiler/emit/host_emulation_runtime.cpp \
  "$root/tests/compiler/emit/"
cp bench/gpu/run.sh bench/gpu/results_json.py bench/gpu/compare_gpt_gpu.py "$root/bench/gpu/"
cp bench/compare_gpt.py bench/gpt_torch2.py bench/compare_sample.py bench/sample_torch2.py "$root/bench/"
mkdir -p "$root/bench/attention"
cp bench/attention/lm_head.ein "$root/bench/attention/"
cp scripts/bundle/check_cpu.sh "$root/"

# 3. Shared libraries a bare machine lacks: whatever ldd resolves outside the tree, except the
#    C and C++ runtimes every Linux has, is copied into lib/ with an $ORIGIN run path, until
#    nothing is left to copy (a copied library's own needs included).
system='^(linux-vdso|libc|libm|libstdc\+\+|libgcc_s|ld-linux-x86-64|libpthread|libdl|librt)\.so'
while :; do
  copied=0
  for f in "$root"/bin/* "$root"/lib/*; do
    while read -r name path; do
      [[ $name =~ $system ]] && continue
      [ -e "$root/lib/$name" ] && continue
      [ -f "$path" ] || { echo "gpu_bundle.sh: $f needs $name, which ldd cannot find" >&2; exit 1; }
      cp -L "$path" "$root/lib/$name"
      patchelf --set-rpath '$ORIGIN' "$root/lib/$name"
      copied=1
    done < <(ldd "$f" | awk '$2 == "=>" { print $1, $3 }')
  done
  [ $copied -eq 1 ] || break
done
strip --strip-unneeded "$root"/bin/* "$root"/lib/*

# 4. The folder: run.sh, README.md and the compressed payload; refused above the limit.
rm -rf "$out"
mkdir -p "$out"
cp scripts/bundle/run.sh scripts/bundle/README.md "$out/"
git describe --always --dirty >"$root/COMMIT" 2>/dev/null || echo unknown >"$root/COMMIT"
tar -C "$root" -czf "$out/payload.tar.gz" .
unpacked=$(du -sb "$root" | cut -f1)
size=$(du -sb "$out" | cut -f1)
echo "gpu_bundle.sh: $out: $(awk -v b="$size" 'BEGIN { printf "%.1f", b / 1048576 }') MiB" \
     "($(awk -v b="$unpacked" 'BEGIN { printf "%.1f", b / 1048576 }') MiB unpacked; limit" \
     "$limit_mib MiB), built in $(( $(date +%s) - start )) s; libraries from the build machine:" \
     "$(cd "$root/lib" && ls | grep -v '^libein_' | tr '\n' ' ')"
if [ "$size" -gt $((limit_mib * 1048576)) ]; then
  echo "gpu_bundle.sh: the bundle is larger than $limit_mib MiB" >&2
  exit 1
fi

if [ $check -eq 1 ]; then
  bash scripts/bundle/minimal_root_check.sh "$out"
fi
