#!/usr/bin/env python3
"""bench/gpu/run.sh's table as JSON: every row "name | value | unit | how" of its log (suites,
compile and dispatch times, bandwidths, GEMMs, training throughput), the machine and the exit
status.

    python3 bench/gpu/results_json.py RUN_LOG BIN_DIR STATUS > gpu_results.json
"""
import json
import math
import os
import platform
import subprocess
import sys


def rows(path):
    for line in open(path, errors="replace"):
        if line.lstrip().startswith("|"):
            continue  # a Markdown table a benchmark printed for people (its rows come as lines too)
        cells = [c.strip() for c in line.rstrip("\n").split("|")]
        if len(cells) < 4:
            continue
        try:
            value = float(cells[1])
        except ValueError:
            value = None  # a skipped row: "-" and the reason
        if value is not None and math.isnan(value):
            value = None
        yield {"name": cells[0], "value": value, "unit": cells[2], "how": "|".join(cells[3:])}


def gpu():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main():
    log, bin_dir, status = sys.argv[1], sys.argv[2], int(sys.argv[3])
    commit = None
    bundle_commit = os.path.join(bin_dir, "..", "COMMIT")  # the bundle records its commit
    if os.path.exists(bundle_commit):
        commit = open(bundle_commit).read().strip()
    if commit is None:
        r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        commit = r.stdout.strip() or None
    table = list(rows(log))
    json.dump({"commit": commit, "host": platform.node(), "gpu": gpu(), "status": status,
               "suites_failed": [r["name"] for r in table
                                 if r["name"].startswith("suite ") and "FAILED" in r["how"]],
               "rows": table}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
