#!/usr/bin/env bash
# ein's GPU bundle, made by scripts/gpu_bundle.sh (README.md beside this file says how to carry
# it). Unpacks payload.tar.gz into root/ beside this file once (again when the payload is newer),
# then, from root/:
#   ./run.sh               the GPU checks with no build step: every CUDA suite, the op suite on
#                          the GPU, op bandwidth next to torch, the bf16 GEMM next to
#                          torch.matmul, NVRTC and dispatch times, GPT training next to torch
#                          eager and torch.compile (bench/gpu/run.sh; prints one table, writes
#                          it as JSON, exits nonzero when a suite fails)
#   ./run.sh --check-cpu   what a machine without a GPU can check (check_cpu.sh)
#   ./run.sh --exec CMD..  runs CMD in root/ with root/bin first on PATH (e.g. --exec ein --help)
# EIN_BUNDLE_ROOT=DIR unpacks into DIR instead (for a read-only copy of the folder).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=${EIN_BUNDLE_ROOT:-$here/root}
if [ ! -f "$root/.unpacked" ] || [ "$here/payload.tar.gz" -nt "$root/.unpacked" ]; then
  rm -rf "$root"
  mkdir -p "$root"
  tar -C "$root" -xzf "$here/payload.tar.gz"
  touch "$root/.unpacked"
fi
cd "$root"
export PATH="$root/bin:$PATH"
case "${1:-}" in
  --check-cpu) shift; exec bash check_cpu.sh "$@" ;;
  --exec) shift; exec "$@" ;;
  *) exec bash bench/gpu/run.sh --prebuilt "$root/bin" "$@" ;;
esac
