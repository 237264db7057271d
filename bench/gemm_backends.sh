#!/usr/bin/env bash
# One GEMM of the byte-level GPT (1024x128 @ 128x384, f32) on the backends in play
# (BENCHMARKS.md, "Byte-level GPT training"): OpenBLAS under this environment's
# OPENBLAS_CORETYPE (if any; its kernel choice printed by OPENBLAS_VERBOSE), OpenBLAS choosing for
# itself (the variable unset), oneDNN's sgemm (what ein's f32 GEMMs use where it is installed),
# and torch.matmul (oneDNN in Debian's PyTorch), each on 1 and 2 threads.
#   bash bench/gemm_backends.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
gcc -O2 bench/sgemm_openblas.c -o "$out/sgemm" -I/usr/include/x86_64-linux-gnu/openblas-pthread -lopenblas
gcc -O2 bench/sgemm_onednn.c -o "$out/sgemm_onednn" -ldnnl
echo "environment: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)}"
for core in environment autodetect; do
  for t in 1 2; do
    if [ "$core" = environment ]; then env_core=(); else env_core=(-u OPENBLAS_CORETYPE); fi
    kernel=$(env "${env_core[@]}" OPENBLAS_VERBOSE=2 OPENBLAS_NUM_THREADS=$t "$out/sgemm" 2>&1 | sed -n 's/^Core: //p')
    echo "openblas core=$core ($kernel) threads=$t: $(env "${env_core[@]}" OPENBLAS_NUM_THREADS=$t "$out/sgemm")"
  done
done
OMP_WAIT_POLICY=passive /usr/bin/python3 - <<'PY'
import time, torch
for th in (1, 2):
    torch.set_num_threads(th)
    a, b = torch.randn(1024, 128), torch.randn(128, 384)
    for _ in range(10): a @ b
    t = time.perf_counter(); reps = 200
    for _ in range(reps): a @ b
    dt = (time.perf_counter() - t) / reps
    print(f"torch.matmul threads={th}: {dt * 1e3:.3f} ms {2 * 1024 * 128 * 384 / dt / 1e9:.1f} GFLOP/s")
PY
for t in 1 2; do
  echo "onednn sgemm threads=$t: $(OMP_NUM_THREADS=$t "$out/sgemm_onednn")"
done
rm -rf "$out"
