#!/usr/bin/env python3
"""`ein train` of the byte-level GPT against PyTorch 2 (bench/gpt_torch2.py: nn.Module, SDPA,
AdamW), eager and torch.compile, side by side in each round, at the training-at-scale issue's
sizes. bench/compare_torch2.sh makes the virtual environment with torch from PyPI.

    python3 bench/compare_torch2.py --ein build/bin/ein --python VENV/bin/python
        [--rounds 3] [--steps 6] [--warmup 3] [--config "T L H D B" ...] [--precision fp32|bf16]

Each round runs ein, torch eager and torch.compile once each, in an order that rotates per
round, on 2 threads. Per run: the median step time after the warm-up, tokens/s (B·T per step),
model FLOP/s with ein report's exact FLOPs per step for both (the same model), MFU against the
peak ein train measured on this machine (its log's flops_per_s / mfu), and peak memory: the
process's peak resident memory above its idle baseline (torch: the resident memory before the
first step, the model and optimizer built; ein: the peak of an `ein train --steps 0` run of the
same script, which loads, initialises and stops), with ein's allocator peak (peak_memory)
beside it. The ratios are ein's tokens/s over torch's, per round, and their median.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "gpt", "byte_gpt.ein")
CONFIGS = ["64 2 4 128 16", "128 4 8 256 16", "256 2 12 768 4", "512 6 8 512 4"]


def sets(config):
    return [x for name, value in zip("TLHDB", config.split()) for x in ("--set", f"{name}={value}")]


def ein_run(a, config, tmp):
    log = os.path.join(tmp, "ein.jsonl")
    cmd = [a.ein, "train", SCRIPT, *sets(config), "--steps", str(a.warmup + a.steps), "--log", log,
           "--quiet", "--precision", a.precision]
    r = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True, errors="replace", cwd=tmp)
    if r.returncode != 0:
        sys.exit(f"ein failed: {' '.join(cmd)}\n{r.stderr}")
    rss = int(r.stderr.strip().splitlines()[-1]) * 1024
    rows = [json.loads(x) for x in open(log) if x.strip()][a.warmup:]
    peak_flops = statistics.median(x["flops_per_s"] / x["mfu"] for x in rows if x["mfu"] > 0)
    return (statistics.median(x["ms"] for x in rows), rss, max(x["peak_memory"] for x in rows),
            peak_flops)


def ein_idle(a, config, tmp):
    cmd = [a.ein, "train", SCRIPT, *sets(config), "--steps", "0", "--quiet"]
    r = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True, errors="replace", cwd=tmp)
    if r.returncode != 0:
        sys.exit(f"ein failed: {' '.join(cmd)}\n{r.stderr}")
    return int(r.stderr.strip().splitlines()[-1]) * 1024


def torch_run(a, config, compiled):
    t, l, h, d, b = config.split()
    cmd = [a.python, os.path.join(ROOT, "bench", "gpt_torch2.py"), "--steps", str(a.steps),
           "--warmup", str(a.warmup), "--T", t, "--L", l, "--H", h, "--D", d, "--B", b,
           "--precision", a.precision, "--threads", "2"] + (["--compile"] if compiled else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"torch failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    return statistics.median(res["ms_per_step"]), res["rss_peak"] - res["rss_idle"]


def model_flops(a, config):
    out = subprocess.run([a.ein, "report", SCRIPT, *sets(config), "--format", "json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["flops"]["per_step"]


# torch.matmul's rate on this CPU at the step's GEMM sizes (2048 x 512 x 2048, two threads, as
# the runs): with MKL on some CPUs (AMD Zen 5: 0.44x oneDNN's sgemm) this, not the framework
# around it, is most of what separates the two; printed once beside ein's peak.
TORCH_GEMM = '''
import time, torch
torch.set_num_threads(2)
dtype = torch.bfloat16 if {bf16} else torch.float32
a, b = torch.randn(2048, 512, dtype=dtype), torch.randn(512, 2048, dtype=dtype)
for _ in range(3):
    a @ b
best = float("inf")
for _ in range(20):
    t = time.perf_counter()
    a @ b
    best = min(best, time.perf_counter() - t)
print(2 * 2048 * 512 * 2048 / best / 1e9)
'''


def torch_gemm_rate(a):
    code = TORCH_GEMM.format(bf16=a.precision == "bf16")
    r = subprocess.run([a.python, "-c", code], capture_output=True, text=True)
    return float(r.stdout.strip()) if r.returncode == 0 else None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ein", default=os.path.join(ROOT, "build", "bin", "ein"))
    p.add_argument("--python", required=True, help="a Python with torch 2 (compare_torch2.sh)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--config", action="append", help='"T L H D B" (repeatable)')
    a = p.parse_args()
    a.ein = os.path.abspath(a.ein)
    runs = ["ein", "eager", "compile"]
    gemm = torch_gemm_rate(a)
    if gemm is not None:
        print(f"# torch.matmul {a.precision} 2048x512x2048 on 2 threads: {gemm:.1f} GFLOP/s "
              "(best of 20), against the peak below")
    for config in a.config or CONFIGS:
        t, l, h, d, b = (int(x) for x in config.split())
        tokens = t * b
        flops = model_flops(a, config)
        ms = {r: [] for r in runs}
        mem = {}
        with tempfile.TemporaryDirectory() as tmp:
            idle = ein_idle(a, config, tmp)
            peak = None
            for k in range(a.rounds):
                for run in runs[k % 3:] + runs[:k % 3]:
                    if run == "ein":
                        step, rss, allocator, peak = ein_run(a, config, tmp)
                        ms[run].append(step)
                        mem[run] = f"{(rss - idle) / 1e6:.0f} MB (allocator {allocator / 1e6:.0f} MB)"
                    else:
                        step, above = torch_run(a, config, run == "compile")
                        ms[run].append(step)
                        mem[run] = f"{above / 1e6:.0f} MB"
        print(f"\n## T L H D B = {config}, {a.precision}: {flops / 1e9:.2f} GFLOPs per step "
              f"(ein report), peak {peak / 1e9:.1f} GFLOP/s (the one ein train's MFU uses)")
        print("| run | ms/step | tokens/s | model FLOP/s | MFU | peak memory above idle | "
              "ein/this tokens/s per round | median |")
        print("|---|---:|---:|---:|---:|---:|---|---:|")
        for run in runs:
            m = statistics.median(ms[run])
            ratios = [x / e for e, x in zip(ms["ein"], ms[run])]
            print(f"| {'ein' if run == 'ein' else 'torch ' + run} | {m:.1f} | "
                  f"{tokens / m * 1e3:,.0f} | {flops / m * 1e3 / 1e9:.1f} G | "
                  f"{flops / m * 1e3 / peak:.1%} | {mem[run]} | "
                  f"{' '.join(f'{r:.2f}' for r in ratios)} | {statistics.median(ratios):.2f} |")


if __name__ == "__main__":
    main()
