# Sourced by the scripts that compare against PyTorch 2 from PyPI (bench/compare_torch2.sh,
# bench/attention/compare.sh, bench/quantized_matmul.sh), from the repository root: sets
# `venv` to the virtual environment holding torch==2.15.0, making it first if need be. It
# lives outside the source tree, in $EIN_TORCH2_VENV (default ~/.cache/ein/torch2-venv: several
# GB that tree-walking tools should not see); CI never makes it.
venv="${EIN_TORCH2_VENV:-$HOME/.cache/ein/torch2-venv}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q torch==2.15.0 numpy
fi
