#!/usr/bin/env python3
"""ein's eager training step side by side with PyTorch's, in one run.

Runs build-bench/bin/ein_training_timings (one JSON line per case), then the same step in
PyTorch eager on the CPU, alternating for --rounds rounds, and prints medians, steps/s, the
ratio (torch time / ein time; the median of per-round ratios) and the kernels ein launched per
step. It measures and compares; bench/compare_training.sh installs and builds.

    /usr/bin/python3 bench/compare_training.py [--driver PATH] [--reps N] [--rounds N]

mlp_step: Linear(512, 512) → GELU → Linear(512, 512), MSE loss, backward, AdamW (foreach, torch's
CPU default); batch 256, f32. Target: ein ≥ 1.3× torch's steps/s.
"""
import argparse
import json
import statistics
import subprocess
import time

TARGET = 1.3


def torch_mlp_step(reps, warmup=5, matmul_plus_bias=False):
    """torch.nn.Linear layers (the reference), or with matmul_plus_bias the same model written
    as x @ w + b: a diagnostic, because Debian's torch 1.13 (BLAS_INFO=generic) runs Linear's
    addmm far slower than a plain matmul on this machine."""
    import torch

    torch.set_num_threads(2)
    torch.manual_seed(0)
    B, D = 256, 512
    x, y = torch.randn(B, D), torch.randn(B, D)
    if matmul_plus_bias:
        params = [torch.nn.Parameter(torch.randn(*s) * D ** -0.5) for s in ((D, D), (D,), (D, D), (D,))]
        w1, b1, w2, b2 = params

        def model(v):
            return torch.nn.functional.gelu(v @ w1 + b1) @ w2 + b2
    else:
        model = torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.GELU(), torch.nn.Linear(D, D))
        params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", default="build-bench/bin/ein_training_timings")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    ein_t, torch_t, plain_t, ratios, plain_ratios, kernels = [], [], [], [], [], None
    for _ in range(args.rounds):
        out = subprocess.run([args.driver, "--reps", str(args.reps)], check=True,
                             capture_output=True, text=True).stdout
        rows = [json.loads(line) for line in out.strip().splitlines()]
        row = next(r for r in rows if r["case"] == "mlp_step")
        kernels = row["kernels"]
        t = torch_mlp_step(args.reps)
        p = torch_mlp_step(args.reps, matmul_plus_bias=True)
        ein_t.append(row["median_s"])
        torch_t.append(t)
        plain_t.append(p)
        ratios.append(t / row["median_s"])
        plain_ratios.append(p / row["median_s"])
    e, r = statistics.median(ein_t), statistics.median(ratios)
    print(f"{'case':<28} {'ms/step':>8} {'steps/s':>8} {'time/ein':>9} {'kernels/step':>13} target")
    print(f"{'ein (mlp_step)':<28} {e * 1e3:8.2f} {1 / e:8.1f} {1:9.2f} {kernels:>13}")
    for name, times, rs, target in (("torch nn.Linear (reference)", torch_t, ratios, True),
                                    ("torch x @ w + b (diagnostic)", plain_t, plain_ratios, False)):
        t, q = statistics.median(times), statistics.median(rs)
        verdict = (f"≥{TARGET}× {'met' if q >= TARGET else 'MISSED'}" if target else "")
        print(f"{name:<28} {t * 1e3:8.2f} {1 / t:8.1f} {q:9.2f} {'':>13} {verdict}")
    print(f"(medians over {args.rounds} rounds of {args.reps} steps; time/ein = median of per-round "
          f"ratios; reference per-round ratios {', '.join(f'{x:.2f}' for x in ratios)})")


if __name__ == "__main__":
    main()
