#!/usr/bin/env python3
"""Two builds' `ein train` steps side by side, node by node (EIN_PROFILE), rounds alternating.

Whole steps on a shared two-core VM move by 15-40% between runs, so a change that removes a
few per cent of a step cannot be seen in ms/step. EIN_PROFILE's per-node times can: this runs
`ein train` with EIN_PROFILE under each build in turn and prints, per run, the time in graph
nodes, the time and calls of the nodes whose line matches --match (a regular expression over
EIN_PROFILE's node lines, e.g. "cast \\[\\d+,\\d+\\]" for the 2-D casts: weights), the final loss
and the peak memory.

  python3 bench/profile_nodes.py --old build-old --new build --rounds 3 \\
      --match 'cast \\[\\d+,\\d+\\]' -- SCRIPT --data FILE --steps 6 --precision bf16 ...

SCRIPT should have `sample_length = 0` (sampling is not a graph node but takes time).
"""
import argparse
import os
import re
import subprocess
import sys


def run(build, args, match):
    env = dict(os.environ, EIN_PROFILE="1000")
    env.setdefault("EIN_STDLIB", os.path.join(os.path.dirname(__file__), "..", "stdlib"))
    out = subprocess.run([os.path.join(build, "bin", "ein"), "train", *args], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         check=True).stdout
    total = float(re.search(r"EIN_PROFILE: ([\d.]+) s in graph nodes", out).group(1))
    hits = [(float(m.group(1)), int(m.group(2)))
            for m in re.finditer(r"^\s+([\d.]+) ms\s+(\d+) calls\s+(.*)$", out, re.M)
            if re.search(match, m.group(3))]
    loss = re.search(r"final loss (\S+)", out).group(1)
    peak = re.search(r"peak memory ([\d.]+ \w+)", out).group(1)
    return total, sum(t for t, _ in hits), sum(n for _, n in hits), loss, peak


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--old", required=True, help="build folder (its bin/ein)")
    p.add_argument("--new", required=True, help="build folder (its bin/ein)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--match", default=r"$^", help="regular expression over node lines")
    p.add_argument("train", nargs=argparse.REMAINDER, help="-- then ein train's arguments")
    a = p.parse_args()
    args = a.train[1:] if a.train[:1] == ["--"] else a.train
    if not args:
        p.error("give ein train's arguments after --")
    print(f"{'round':>5} {'build':>10} {'nodes s':>8} {'matched ms':>11} {'calls':>6} "
          f"{'loss':>10} {'peak':>12}")
    for r in range(1, a.rounds + 1):
        for build in (a.old, a.new):
            total, ms, calls, loss, peak = run(build, args, a.match)
            print(f"{r:>5} {os.path.basename(os.path.normpath(build)):>10} {total:>8.3f} "
                  f"{ms:>11.1f} {calls:>6} {loss:>10} {peak:>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
