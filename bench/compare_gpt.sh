#!/usr/bin/env bash
# Byte-level GPT training throughput: `ein train examples/gpt/byte_gpt.ein` against the PyTorch
# reference (tests/models/gpt_torch.py), side by side per round. Installs Debian's python3-torch
# for /usr/bin/python3 when missing, builds the Release `ein` in build-bench/ (skipped with
# --torch-only), and prints the table. Extra arguments go to compare_gpt.py.
#   bash bench/compare_gpt.sh [--rounds 5] [--steps 20] [--T 64 --L 2 --H 4 --D 128 --B 16]
set -euo pipefail
cd "$(dirname "$0")/.."
py=/usr/bin/python3
if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch python3-numpy >/dev/null
fi
case " $* " in
  *" --torch-only "*) ;;
  *)
    cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DEIN_BUILD_TESTS=OFF >/dev/null
    ninja -C build-bench -j2 ein >/dev/null
    ;;
esac
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 "$py" bench/compare_gpt.py --ein build-bench/bin/ein "$@"
