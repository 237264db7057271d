#!/usr/bin/env python3
"""Two builds of ein side by side: the byte-level GPT's training step and the CPU op
benchmarks, alternating builds within each round, so a change's cost is measured against the
commit before it on the same machine in the same minutes.

    python3 bench/compare_builds.py --old OLD_BUILD --new NEW_BUILD [--rounds 5] [--steps 25]
        [--warmup 5] [--reps 5]

Each round runs, for old then new (the order flips every round): `ein train
examples/gpt/byte_gpt.ein --steps N --log F` (the median `ms` of the log's lines after the
warm-up steps), then `bench_ops` (Google Benchmark, --reps repetitions, the median real time
of each benchmark). Prints per benchmark the median over rounds of each build and the median
of the per-round ratios new/old (below 1: the new build is faster), with the per-round ratios.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train_args(arg):
    """`--train-arg`'s arguments: split at spaces, and an `--option=value` at its first `=`
    ("--set T=256,D=768 --precision=bf16" -> --set, T=256,D=768, --precision, bf16)."""
    out = []
    for tok in arg.split():
        out += tok.split("=", 1) if tok.startswith("--") else [tok]
    return out


def train_ms(build, steps, warmup, extra=()):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.jsonl")
        subprocess.run([os.path.join(build, "bin", "ein"), "train",
                        os.path.join(ROOT, "examples/gpt/byte_gpt.ein"),
                        "--steps", str(steps), "--log", log, *extra],
                       check=True, stdout=subprocess.DEVNULL, cwd=tmp)
        rows = [json.loads(line) for line in open(log) if line.strip()]
        ms = [float(r["ms"]) for r in rows if "ms" in r][warmup:]
        if not ms:
            sys.exit(f"{build}: the training log has no 'ms' after {warmup} warm-up steps")
        return statistics.median(ms)


def bench_ops(build, reps):
    out = subprocess.run([os.path.join(build, "bin", "bench_ops"), "--benchmark_format=json",
                          f"--benchmark_repetitions={reps}",
                          "--benchmark_report_aggregates_only=true"],
                         check=True, capture_output=True, text=True).stdout
    times = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            times[f'{b["run_name"]} ({b["time_unit"]})'] = float(b["real_time"])
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", required=True, help="the build directory of the previous commit")
    p.add_argument("--new", required=True, help="the build directory of this commit")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--train-arg", action="append", default=[],
                   help="extra `ein train` arguments, e.g. --train-arg=--precision=bf16 or "
                        "--train-arg='--set T=256,L=2,H=12,D=768,B=4 --precision bf16' "
                        "(repeatable; each is also timed as its own row)")
    p.add_argument("--no-ops", action="store_true", help="skip bench_ops")
    a = p.parse_args()
    a.old, a.new = os.path.abspath(a.old), os.path.abspath(a.new)
    env_note = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_CORETYPE")}
    per = {}  # name -> {"old": [...], "new": [...]}
    for r in range(a.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for which in order:
            build = getattr(a, which)
            results = {"gpt train step (ms)": train_ms(build, a.steps + a.warmup, a.warmup)}
            for arg in a.train_arg:
                results[f"gpt train step {arg} (ms)"] = train_ms(build, a.steps + a.warmup,
                                                                 a.warmup, train_args(arg))
            if not a.no_ops:
                results.update(bench_ops(build, a.reps))
            for name, v in results.items():
                per.setdefault(name, {"old": [], "new": []})[which].append(v)
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"# {a.rounds} rounds, builds alternating; environment {env_note}")
    print(f"{'benchmark':40} {'old':>12} {'new':>12} {'new/old':>8}  per round")
    for name, v in per.items():
        ratios = [n / o for n, o in zip(v["new"], v["old"])]
        print(f"{name:40} {statistics.median(v['old']):12.4g} {statistics.median(v['new']):12.4g} "
              f"{statistics.median(ratios):8.3f}  " + ", ".join(f"{x:.2f}" for x in ratios))


if __name__ == "__main__":
    main()
