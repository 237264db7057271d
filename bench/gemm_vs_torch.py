"""The f32 GEMMs of the byte-level GPT's step at T L H D B = 512 6 8 512 4 (2048 tokens: the
qkv projection, the MLP's up and down projections, a weight gradient) on oneDNN's sgemm, which
ein's f32 contractions run on (Debian's libdnnl.so.2, called through ctypes), and on
torch.matmul (PyTorch 2.15 from PyPI: MKL), one thread each, alternating within each round so
that this VM's slow and fast phases hit both alike (BENCHMARKS.md, "Where the f32 targets
stand"). Prints per round and shape both rates and torch/oneDNN, then the medians.

    OMP_NUM_THREADS=1 ~/.cache/ein/torch2-venv/bin/python bench/gemm_vs_torch.py [--rounds 5]
"""

import argparse
import ctypes
import statistics
import time

import numpy as np
import torch

SHAPES = [(2048, 512, 1536), (2048, 512, 2048), (2048, 2048, 512), (512, 2048, 2048)]


def best_of(f, reps=10):
    f()
    best = 1e9
    for _ in range(reps):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dnnl = ctypes.CDLL("libdnnl.so.2")
    f32p = ctypes.POINTER(ctypes.c_float)
    dnnl.dnnl_sgemm.argtypes = [ctypes.c_char, ctypes.c_char, ctypes.c_int64, ctypes.c_int64,
                                ctypes.c_int64, ctypes.c_float, f32p, ctypes.c_int64, f32p,
                                ctypes.c_int64, ctypes.c_float, f32p, ctypes.c_int64]
    ratios = {s: [] for s in SHAPES}
    for r in range(args.rounds):
        for m, k, n in SHAPES:
            a = np.random.randn(m, k).astype(np.float32)
            b = np.random.randn(k, n).astype(np.float32)
            c = np.empty((m, n), np.float32)
            pa, pb, pc = (x.ctypes.data_as(f32p) for x in (a, b, c))

            def onednn():
                if dnnl.dnnl_sgemm(b"N", b"N", m, n, k, 1.0, pa, k, pb, n, 0.0, pc, n) != 0:
                    raise RuntimeError("dnnl_sgemm failed")

            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            flops = 2.0 * m * n * k
            d = flops / best_of(onednn) / 1e9
            t = flops / best_of(lambda: ta @ tb) / 1e9
            ratios[(m, k, n)].append(t / d)
            print(f"round {r + 1} {m}x{k}x{n}: oneDNN {d:.1f} GFLOP/s, torch {t:.1f} GFLOP/s, "
                  f"torch/oneDNN {t / d:.2f}", flush=True)
    for s, rs in ratios.items():
        print(f"{s[0]}x{s[1]}x{s[2]}: median torch/oneDNN {statistics.median(rs):.2f} "
              f"(rounds {' '.join(f'{x:.2f}' for x in rs)})")


if __name__ == "__main__":
    main()
