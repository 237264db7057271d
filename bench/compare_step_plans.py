#!/usr/bin/env python3
"""The training step's save/recompute plans side by side: `ein train` of the byte-level GPT at
several sizes, an old build (the step before plans: the backward replicated the forward)
against the new build under --recompute none, auto and blocks, alternating within each round;
and, for the new build, the allocator's measured peak against `ein report`'s prediction.

    python3 bench/compare_step_plans.py --old OLD_BUILD --new NEW_BUILD [--rounds 3]
        [--steps 8] [--warmup 3] [--config "T L H D B" ...] [--plans none auto blocks]

Each round runs, in an order that rotates every round, the old build and the new build once
per plan: `ein train examples/gpt/byte_gpt.ein --set T=.. L=.. H=.. D=.. B=.. --steps N --log F`
and takes the median `ms` of the log's lines after the warm-up steps. Prints per config and
run: the median over rounds, the per-round ratios old/new (above 1: the new plan is faster),
their median, the FLOPs per step the run counted, and for the new build the largest
`peak_memory` of the log (the allocator's peak in a step: parameters, gradients, optimizer
state, activations) against `ein report --recompute P --format json`'s memory.step_peak (the
same, from the liveness of the fused graphs the step runs).
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
CONFIGS = ["64 2 4 128 16", "128 4 8 256 16", "256 2 12 768 4"]


def sets(config):
    out = []
    for name, value in zip("TLHDB", config.split()):
        out += ["--set", f"{name}={value}"]
    return out


def train(build, config, plan, steps, warmup):
    """(median ms after warm-up, FLOPs per step, largest peak_memory after warm-up or None)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        cmd = [os.path.join(build, "bin", "ein"), "train", SCRIPT, *sets(config),
               "--steps", str(steps), "--log", log, "--quiet"]
        if plan:
            cmd += ["--recompute", plan]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=tmp)
        rows = [json.loads(line) for line in open(log) if line.strip()][warmup:]
        if not rows:
            sys.exit(f"{build}: no log lines after {warmup} warm-up steps")
        peaks = [r["peak_memory"] for r in rows if "peak_memory" in r]
        return (statistics.median(float(r["ms"]) for r in rows), rows[-1]["flops"],
                max(peaks) if peaks else None)


def predicted(build, config, plan):
    out = subprocess.run([os.path.join(build, "bin", "ein"), "report", SCRIPT, *sets(config),
                          "--recompute", plan, "--format", "json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["memory"]["step_peak"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", required=True, help="build folder of the commit before the plans")
    p.add_argument("--new", required=True, help="build folder of the commit measured")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--config", action="append", help='"T L H D B" (repeatable)')
    p.add_argument("--plans", nargs="+", default=["none", "auto", "blocks"])
    a = p.parse_args()
    a.old, a.new = os.path.abspath(a.old), os.path.abspath(a.new)
    runs = [("old", None)] + [("new", plan) for plan in a.plans]
    for config in a.config or CONFIGS:
        ms = {r: [] for r in runs}
        flops, peak = {}, {}
        for k in range(a.rounds):
            order = runs[k % len(runs):] + runs[:k % len(runs)]
            for run in order:
                build = a.old if run[0] == "old" else a.new
                t, f, m = train(build, config, run[1], a.steps + a.warmup, a.warmup)
                ms[run].append(t)
                flops[run] = f
                if m is not None:
                    peak[run] = max(peak.get(run, 0), m)
        print(f"\n## T L H D B = {config}  ({a.rounds} rounds, median ms/step over {a.steps} "
              f"steps after {a.warmup})")
        print("| run | ms/step | old/new per round | median | GFLOPs/step counted | "
              "measured peak | ein report | measured/report |")
        print("|---|---:|---|---:|---:|---:|---:|---:|")
        old = ms[runs[0]]
        for run in runs:
            name = "old (replicated forward)" if run[0] == "old" else f"new --recompute {run[1]}"
            ratios = [o / n for o, n in zip(old, ms[run])]
            if run in peak:
                pred = predicted(a.new, config, run[1])
                mem = f"{peak[run] / 1e6:.1f} MB | {pred / 1e6:.1f} MB | {peak[run] / pred:.3f}"
            else:
                mem = "– | – | –"
            print(f"| {name} | {statistics.median(ms[run]):.1f} | "
                  f"{' '.join(f'{r:.2f}' for r in ratios)} | {statistics.median(ratios):.2f} | "
                  f"{flops[run] / 1e9:.2f} | {mem} |")


if __name__ == "__main__":
    main()
