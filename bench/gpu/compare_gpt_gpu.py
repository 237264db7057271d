#!/usr/bin/env python3
"""GPT training on one GPU: `ein train --device cuda` next to PyTorch eager and torch.compile
(bench/gpt_torch2.py: nn.Module, F.scaled_dot_product_attention(is_causal=True), fused AdamW,
bf16 under torch.autocast), side by side in each round, on two shapes of the byte-level GPT of
examples/gpt/byte_gpt.ein:

  byte_gpt        its own sizes (T=64 L=2 H=4 D=128 B=16), fp32
  gpt2_small      GPT-2 small's shape with bytes for tokens (T=1024 L=12 H=12 D=768 B=8), bf16

    python3 bench/gpu/compare_gpt_gpu.py --ein BIN/ein [--rounds 3] [--steps 20] [--warmup 5]
        [--config byte_gpt|gpt2_small ...] [--no-compile]

Prints rows "name | value | unit | how" (bench/gpu/run.sh's table): each side's median ms per
step and tokens/s, and the median over rounds of ein's tokens/s over torch's. A torch step is
wall time ending in loss.item() (which waits for its kernels); ein's is the `ms` of its log lines
(an ein step does not wait: its queued kernels are waited for by the next step's loss, so the
steady-state median after the warm-up covers the GPU work). Target (the GPU bundle issue): ein
at least 1.0x torch eager on byte_gpt. Exits 1 when a run fails.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = {
    "byte_gpt": (dict(T=64, L=2, H=4, D=128, B=16), "fp32"),
    "gpt2_small": (dict(T=1024, L=12, H=12, D=768, B=8), "bf16"),
}


def row(name, value, unit, how):
    print(f"{name:<34} | {value:>10.3f} | {unit:<7} | {how}", flush=True)


def torch_ms(sizes, precision, compile_, a):
    cmd = [sys.executable, os.path.join(ROOT, "bench", "gpt_torch2.py"), "--device", "cuda",
           "--precision", precision, "--steps", str(a.steps), "--warmup", str(a.warmup)]
    cmd += [f"--{k}={v}" for k, v in sizes.items()] + (["--compile"] if compile_ else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"torch failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return statistics.median(json.loads(r.stdout.strip().splitlines()[-1])["ms_per_step"])


def ein_ms(sizes, precision, a, tmp):
    log = os.path.join(tmp, "ein.jsonl")
    if os.path.exists(log):
        os.remove(log)
    sets = ",".join(f"{k}={v}" for k, v in sizes.items())
    cmd = [a.ein, "train", os.path.join(ROOT, "examples", "gpt", "byte_gpt.ein"), "--device",
           "cuda", "--precision", precision, "--set", sets, "--steps",
           str(a.warmup + a.steps), "--log", log, "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ein failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    with open(log) as f:
        ms = [json.loads(line)["ms"] for line in f if line.strip()]
    return statistics.median(ms[a.warmup:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ein", default=os.path.join(ROOT, "build-gpu", "bin", "ein"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--config", action="append", choices=sorted(CONFIGS))
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    a = ap.parse_args()
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.config or list(CONFIGS):
            sizes, precision = CONFIGS[name]
            tokens = sizes["B"] * sizes["T"]
            sides = ["ein", "torch eager"] + ([] if a.no_compile else ["torch.compile"])
            ms = {s: [] for s in sides}
            try:
                for _ in range(a.rounds):
                    ms["ein"].append(ein_ms(sizes, precision, a, tmp))
                    ms["torch eager"].append(torch_ms(sizes, precision, False, a))
                    if "torch.compile" in ms:
                        ms["torch.compile"].append(torch_ms(sizes, precision, True, a))
            except RuntimeError as e:
                print(f"{name}: {e}", file=sys.stderr)
                row(f"gpt {name}", float("nan"), "", f"FAILED: {str(e).splitlines()[0]}")
                failed = True
                continue
            shape = " ".join(f"{k}={v}" for k, v in sizes.items())
            for side in sides:
                med = statistics.median(ms[side])
                row(f"gpt {name} {side}", tokens / med * 1e3, "tok/s",
                    f"{shape} {precision}; median of {a.rounds} rounds of {a.steps} steps: "
                    f"{med:.2f} ms/step")
            for side in sides[1:]:
                ratios = [t / e for e, t in zip(ms["ein"], ms[side])]
                row(f"  ein / {side}", statistics.median(ratios), "x",
                    "tokens/s, median of per-round ratios "
                    + ", ".join(f"{r:.3f}" for r in ratios)
                    + ("; target >= 1.0" if name == "byte_gpt" and side == "torch eager" else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
