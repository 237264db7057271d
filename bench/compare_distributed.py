#!/usr/bin/env python3
"""Data-parallel throughput on one machine: `mpirun -np 2 ein train` (each rank bound to one
core, B/2 per rank) against `ein train` as one process on two threads (batch B), alternating
per round. Prints each round's median ms per step (steps after the first --warmup), the
per-round ratio and the medians. Run through bench/compare_distributed.sh.

    compare_distributed.py --ein EIN [--rounds 5] [--steps 30] [--T 128 --L 4 --H 8 --D 256 --B 16]
                           [--zero S] [--bucket-mb MB] [--overlap-pair]

--overlap-pair adds a third run per round: np=2 with --no-overlap (the gradient exchange after
the backward rather than bucket by bucket during it), and its ratio to the overlapped run.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ein", required=True)
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--zero", type=int, default=0)
    p.add_argument("--bucket-mb", default=None, help="ein train --bucket-mb for the np=2 runs")
    p.add_argument("--overlap-pair", action="store_true",
                   help="also run np=2 with --no-overlap each round")
    for dim, v in (("T", 128), ("L", 4), ("H", 8), ("D", 256), ("B", 16)):
        p.add_argument(f"--{dim}", type=int, default=v)
    a = p.parse_args()
    script = os.path.join(os.path.dirname(__file__), "..", "examples", "gpt", "byte_gpt.ein")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    sizes = f"T={a.T},L={a.L},H={a.H},D={a.D}"

    def run(np, tmp, *extra):
        log = os.path.join(tmp, f"np{np}.jsonl")
        batch = a.B // np
        cmd = [a.ein, "train", script, "--set", f"{sizes},B={batch}", "--steps", str(a.steps),
               "--log", log, "--quiet"]
        if np > 1:
            cmd = [a.mpirun, "-np", str(np), "--bind-to", "core"] + cmd + ["--zero", str(a.zero)]
            if a.bucket_mb: cmd += ["--bucket-mb", a.bucket_mb]
            cmd += list(extra)
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = [json.loads(line) for line in open(log)][a.warmup:]
        return statistics.median(r["ms"] for r in rows)

    print(f"# byte_gpt T L H D B = {a.T} {a.L} {a.H} {a.D} {a.B}; zero {a.zero}; bucket-mb "
          f"{a.bucket_mb or 'default'}; ms per step, median of steps {a.warmup + 1}..{a.steps}")
    if a.overlap_pair:
        print("| round | np=1, 2 threads | np=2, 1 core each | np=2 --no-overlap | np=1 / np=2 "
              "| no-overlap / overlap |")
        print("| --- | --- | --- | --- | --- | --- |")
    else:
        print("| round | np=1, 2 threads | np=2, 1 core each | np=1 / np=2 |")
        print("| --- | --- | --- | --- |")
    one, two, plain, ratios, gains = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.rounds):
            t1 = run(1, tmp)
            t2 = run(2, tmp)
            one.append(t1)
            two.append(t2)
            ratios.append(t1 / t2)
            if not a.overlap_pair:
                print(f"| {k + 1} | {t1:.1f} | {t2:.1f} | {t1 / t2:.3f} |", flush=True)
                continue
            t3 = run(2, tmp, "--no-overlap")
            plain.append(t3)
            gains.append(t3 / t2)
            print(f"| {k + 1} | {t1:.1f} | {t2:.1f} | {t3:.1f} | {t1 / t2:.3f} | {t3 / t2:.3f} |",
                  flush=True)
    if a.overlap_pair:
        print(f"| median | {statistics.median(one):.1f} | {statistics.median(two):.1f} | "
              f"{statistics.median(plain):.1f} | {statistics.median(ratios):.3f} | "
              f"{statistics.median(gains):.3f} |")
    else:
        print(f"| median | {statistics.median(one):.1f} | {statistics.median(two):.1f} | "
              f"{statistics.median(ratios):.3f} |")


if __name__ == "__main__":
    main()
