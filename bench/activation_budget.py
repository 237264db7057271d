#!/usr/bin/env python3
"""`ein train --activation-budget` side by side with the other save/recompute plans: the
byte-level GPT (examples/gpt/byte_gpt.ein) at one size, each plan once per round in an order
that rotates every round, with the activation peak `ein report` predicts and the allocator's
peak `ein train` measures.

    python3 bench/activation_budget.py --ein build/bin/ein [--config "512 6 8 512 4"]
        [--plans auto auto:0.5 auto:0.4 blocks] [--rounds 3] [--steps 4] [--warmup 1]
        [--precision fp32|bf16|fp16]

A plan is `none`, `auto`, `blocks`, `auto:F` (auto within --activation-budget F) or `unfused`
(auto with the attention left unfused, EIN_ATTENTION=unfused: the step before the fused
attention, the FlashAttention issue's "today"). Prints per plan: the median ms per step over
rounds (each round's figure the median of its steps after the warm-up), the per-round ratio
of auto's time to the plan's (above 1: faster than auto) and their median, `ein report`'s
activation peak (the liveness of the fused step: saved values and temporaries) and how many
times below the unfused plan's it is, the recomputed FLOPs the run counted beside the model
FLOPs, the allocator's peak in a step against the report's memory.step_peak, and the loss of
the last step (in fp32 the same in every plan).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "gpt", "byte_gpt.ein")


def command(config, plan, precision):
    """(arguments after the script, extra environment) for `plan`."""
    args = ["--precision", precision]
    for name, value in zip("TLHDB", config.split()):
        args += ["--set", f"{name}={value}"]
    policy, _, budget = plan.partition(":")
    env = {}
    if policy == "unfused":
        policy, env = "auto", {"EIN_ATTENTION": "unfused"}
    args += ["--recompute", policy] + (["--activation-budget", budget] if budget else [])
    return args, env


def train(ein, config, plan, precision, steps, warmup):
    args, env = command(config, plan, precision)
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        subprocess.run([ein, "train", SCRIPT, *args, "--steps", str(steps), "--log", log,
                        "--quiet"], check=True, stdout=subprocess.DEVNULL, cwd=tmp,
                       env=dict(os.environ, **env))
        rows = [json.loads(line) for line in open(log) if line.strip()]
    timed = rows[warmup:]
    return {"ms": statistics.median(float(r["ms"]) for r in timed),
            "peak": max(r["peak_memory"] for r in timed), "loss": rows[-1]["loss"],
            "flops": rows[-1]["flops"], "recompute": rows[-1]["recompute_flops"]}


def report(ein, config, plan, precision):
    args, env = command(config, plan, precision)
    out = subprocess.run([ein, "report", SCRIPT, *args, "--format", "json"], check=True,
                         capture_output=True, text=True, env=dict(os.environ, **env)).stdout
    return json.loads(out)["memory"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ein", default=os.path.join(ROOT, "build", "bin", "ein"))
    p.add_argument("--config", default="512 6 8 512 4", help="T L H D B")
    p.add_argument("--plans", nargs="+", default=["unfused", "auto", "auto:0.5", "auto:0.4",
                                                  "blocks"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--precision", default="fp32", help="ein train --precision")
    a = p.parse_args()
    runs = {plan: [] for plan in a.plans}
    for r in range(a.rounds):
        order = a.plans[r % len(a.plans):] + a.plans[:r % len(a.plans)]
        for plan in order:
            runs[plan].append(train(a.ein, a.config, plan, a.precision, a.steps, a.warmup))
    memory = {plan: report(a.ein, a.config, plan, a.precision) for plan in a.plans}
    base = "unfused" if "unfused" in a.plans else a.plans[0]
    print(f"byte GPT, T L H D B = {a.config}, {a.precision}: {a.rounds} rounds of {a.steps} steps "
          f"({a.warmup} warm-up)")
    print("| plan | ms/step | auto/plan per round | median | activation peak (report) "
          f"| below {base} | recomputed / model FLOPs | allocator peak: measured / predicted "
          "| loss |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for plan in a.plans:
        ms = [x["ms"] for x in runs[plan]]
        ratios = ([auto["ms"] / x["ms"] for auto, x in zip(runs["auto"], runs[plan])]
                  if "auto" in runs else [])
        m, last = memory[plan], runs[plan][-1]
        print(f"| {plan} | {statistics.median(ms):.1f} | "
              f"{' '.join(f'{x:.2f}' for x in ratios)} | "
              f"{statistics.median(ratios) if ratios else float('nan'):.2f} | "
              f"{m['activation_peak'] / 1e6:.1f} MB | "
              f"{memory[base]['activation_peak'] / m['activation_peak']:.2f}x | "
              f"{last['recompute'] / 1e9:.1f} G / {last['flops'] / 1e9:.1f} G | "
              f"{max(x['peak'] for x in runs[plan]) / 1e6:.1f} / {m['step_peak'] / 1e6:.1f} MB | "
              f"{last['loss']:.6f} |")


if __name__ == "__main__":
    main()
