#!/usr/bin/env python3
"""x @ w at decode sizes (a few rows of x): ein's f32 product and ein::quantized_matmul from
q8_0 and q4_0 codes (build/bin/ein_quantized_matmul_timings) next to PyTorch's f32 `x @ w`,
its int8 weight-only product (torch._weight_int8pack_mm: int8 weights with per-output-channel
scales, f32 activations: ein's arithmetic) and its int8 dynamically quantized Linear
(torch.ao.quantization.quantize_dynamic: the activations rounded to int8 too, FBGEMM's integer
dot products), side by side, rounds alternating. Each call
multiplies by a different one of enough weight copies that they come from memory, as a
model's layers do. Prints a table of medians and per-round ratios (BENCHMARKS.md).

Run by bench/quantized_matmul.sh, which makes the PyTorch 2 virtual environment; or by hand:
  python3 bench/quantized_matmul.py --ein-timings build/bin/ein_quantized_matmul_timings \
      --python ~/.cache/ein/torch2-venv/bin/python [--rounds 3] [--shape 4096 4096] [--m 1]
"""

import argparse
import json
import statistics
import subprocess
import sys

TORCH = r"""
import json, sys, time, warnings
warnings.filterwarnings("ignore")
import torch
k, n, m, min_mb = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
torch.set_num_threads(int(sys.argv[5]))
torch.manual_seed(0)
copies = max(2, int(min_mb * 1e6 / (k * n * 4.5 / 8) + 0.999))  # as ein's binary
x = torch.randn(m, k)
out = []
with torch.inference_mode():
    ws = [torch.randn(k, n) for _ in range(copies)]
    lin = []
    for w in ws:  # nn.Linear computes x @ weight.T: weight is w.T, (n, k)
        layer = torch.nn.Linear(k, n, bias=False)
        layer.weight.data = w.t().contiguous()
        lin.append(layer)
    qlin = [torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(l), {torch.nn.Linear},
                                                   dtype=torch.qint8) for l in lin]
    del lin
    # Weight-only int8 (f32 activations, as ein's): per-output-channel int8 weights (n, k)
    # through torch._weight_int8pack_mm, the CPU kernel torchao's int8 weight-only uses.
    packed = []
    for w in ws:
        wt = w.t().contiguous()
        s = (wt.abs().amax(dim=1) / 127).clamp(min=1e-12)
        packed.append(((wt / s[:, None]).round().clamp(-127, 127).to(torch.int8), s))
    variants = {"torch f32": lambda c: x @ ws[c], "torch int8 dynamic": lambda c: qlin[c](x),
                "torch int8 weight-only": lambda c: torch._weight_int8pack_mm(x, *packed[c])}
    for name, f in variants.items():
        for c in range(copies):
            f(c)
        calls, start = 0, time.perf_counter()
        while True:
            f(calls % copies)
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= 0.2 and calls >= copies:
                break
        out.append({"variant": name, "ms": elapsed * 1e3 / calls})
print(json.dumps(out))
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ein-timings", required=True)
    p.add_argument("--python", required=True, help="a Python with torch")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--min-mb", type=float, default=128,
                   help="the q4_0 weights of all copies at least this many MB")
    p.add_argument("--shape", nargs=2, type=int, action="append", metavar=("K", "N"),
                   help="w's shape (repeatable); default 4096 4096, 4096 11008, 768 3072, 3072 768")
    p.add_argument("--m", type=int, action="append", help="rows of x (repeatable; default 1 and 8)")
    a = p.parse_args()
    shapes = a.shape or [(4096, 4096), (4096, 11008), (768, 3072), (3072, 768)]
    ms_list = a.m or [1, 8]
    print("| k × n | rows | variant | weight MB | ms (median) | f32 torch / this, per round | median |")
    print("|---|---:|---|---:|---:|---|---:|")
    for k, n in shapes:
        for m in ms_list:
            times = {}
            weight_mb = {}
            for _ in range(a.rounds):
                ein = subprocess.run([a.ein_timings, str(k), str(n), str(m), "1", str(a.min_mb)],
                                     capture_output=True, text=True, check=True).stdout
                for line in ein.splitlines():
                    r = json.loads(line)
                    name = "ein " + r["variant"]
                    times.setdefault(name, []).append(r["ms"])
                    weight_mb[name] = r["weight_bytes"] / 1e6
                torch_out = subprocess.run(
                    [a.python, "-c", TORCH, str(k), str(n), str(m), str(a.min_mb), str(a.threads)],
                    capture_output=True, text=True, check=True).stdout
                for r in json.loads(torch_out.strip().splitlines()[-1]):
                    times.setdefault(r["variant"], []).append(r["ms"])
            weight_mb["torch f32"] = k * n * 4 / 1e6
            weight_mb["torch int8 dynamic"] = k * n / 1e6  # + n f32 scales and zero points
            weight_mb["torch int8 weight-only"] = k * n / 1e6  # + n f32 scales
            base = times["torch f32"]
            for name, t in times.items():
                ratios = [b / x for b, x in zip(base, t)]
                print(f"| {k} × {n} | {m} | {name} | {weight_mb[name]:.1f} | {statistics.median(t):.3f} | "
                      f"{', '.join(f'{r:.2f}' for r in ratios)} | **{statistics.median(ratios):.2f}** |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
