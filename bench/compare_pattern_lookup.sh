#!/usr/bin/env bash
# Side by side, in one run: ein's cached pattern lookup (Google Benchmark, median of 5
# repetitions) against einops' cached recipe lookup in Python (median of 5). Prints both
# and the ratio. Needs build/bin/bench_pattern_cache (scripts/build.sh) and, for the
# einops column, `pip install einops numpy` (skipped with a note when absent).
set -euo pipefail
cd "$(dirname "$0")/.."
json=$(mktemp)
build/bin/bench_pattern_cache --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_format=json --benchmark_out="$json" --benchmark_out_format=json >/dev/null
python3 - "$json" <<'PY'
import json, subprocess, sys
runs = {b["run_name"]: b for b in json.load(open(sys.argv[1]))["benchmarks"] if b.get("aggregate_name") == "median"}
ein = {name: b["real_time"] for name, b in runs.items()}  # ns
for name, t in ein.items():
    print(f"ein  {name:<40} {t:8.1f} ns (median of 5)")
try:
    out = subprocess.run([sys.executable, "bench/einops_recipe_lookup.py"], capture_output=True, text=True, check=True).stdout
except (subprocess.CalledProcessError, FileNotFoundError) as e:
    print("einops not installed here: pip install einops numpy for the side-by-side column")
    sys.exit(0)
print(out.rstrip())
einops_ns = float(out.split("cached recipe + shape lookup:")[1].split("ns")[0])
print(f"ratio einops / ein (cached lookup, same pattern and shape): {einops_ns / ein['BM_CachedRearrange']:.1f}x")
PY
rm -f "$json"
