#!/usr/bin/env bash
# ein's f32 sums of 10^7 values of 0.1 (bench/sum_accuracy.ein) next to PyTorch's and numpy's
# (the venv of bench/compare_torch2.sh), each as its relative error against the exact sum of
# the f32 value 0.1 (BENCHMARKS.md, "Sums of f32").
#   bash bench/sum_accuracy.sh      # EIN_BENCH_BUILD=build by default
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${EIN_BENCH_BUILD:-build}/bin/ein"
venv="${EIN_TORCH2_VENV:-$HOME/.cache/ein/torch2-venv}"
exact=$(python3 -c 'import struct; v = struct.unpack("f", struct.pack("f", 0.1))[0]; print(repr(v))')
for fn in total average columns; do
  got=$("$bin" run bench/sum_accuracy.ein --fn "$fn" --precision 12 | sed -n 's/.*tensor(\[*\([^],]*\).*/\1/p')
  python3 -c "
e = $exact * (1e7 if '$fn' == 'total' else 625000 if '$fn' == 'columns' else 1)
print(f'ein {\"$fn\":8s} {$got!r:>20} relative error {abs($got - e) / e:.2e}')"
done
if [ -x "$venv/bin/python" ]; then
  "$venv/bin/python" - "$exact" <<'PY'
import sys, numpy as np, torch
exact = float(sys.argv[1])
x = torch.full((10**7,), 0.1)
for name, got, want in [("torch sum", x.sum().item(), exact * 1e7),
                        ("torch mean", x.mean().item(), exact),
                        ("torch columns", x.view(-1, 16).sum(0)[0].item(), exact * 625000),
                        ("numpy sum", float(x.numpy().sum()), exact * 1e7)]:
    print(f"{name:14s} {got!r:>20} relative error {abs(got - want) / want:.2e}")
PY
fi
