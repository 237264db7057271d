#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang-19 (ASan + UBSan) into build-fuzz/ and
# runs each on seeds made from the conformance tables, the examples and the stdlib
# (docs/fuzzing.md). Exit status 1 when a target crashes, hangs, leaks, runs out of memory or
# breaks a sanitizer rule; the input that did it is kept in build-fuzz/artifacts/.
#
#   scripts/fuzz.sh                       # every target for 20 s each: what CI runs
#   scripts/fuzz.sh --time 300 map        # one target (or several) for 5 minutes each
#   scripts/fuzz.sh --runs 10000000       # 10^7 executions each: the run docs/fuzzing.md records
#   scripts/fuzz.sh --runs 10000000 --time 6000 script   # whichever ends first
#   scripts/fuzz.sh --no-build pattern    # reuse the build; build-fuzz/corpus/ grows across runs
#   scripts/fuzz.sh --timeout 60 script   # an input running 60 s is a hang (default 10 s)
# EIN_BUILD_LOCK=FILE makes the build wait for `flock FILE` (machines where several people build).
# EIN_FUZZ_DIR=DIR builds and keeps corpora, logs and findings in DIR instead of build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."

all=(pattern shape_spec map script safetensors token_file)
declare -A max_len=([pattern]=256 [shape_spec]=256 [map]=512 [script]=8192
                    [safetensors]=4096 [token_file]=1024)
budget=()
timeout=10
build=1
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --time) budget+=(-max_total_time="$2"); shift 2 ;;
    --runs) budget+=(-runs="$2"); shift 2 ;;
    --timeout) timeout="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) [ -n "${max_len[$1]:-}" ] || { echo "fuzz.sh: no target '$1' (${all[*]})" >&2; exit 2; }
       targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
[ ${#budget[@]} -gt 0 ] || budget=(-max_total_time=20)
# The readers of files get a scratch file per input: on tmpfs, that costs no disk writes.
[ -n "${TMPDIR:-}" ] || [ ! -w /dev/shm ] || export TMPDIR=/dev/shm

out=${EIN_FUZZ_DIR:-build-fuzz}
if [ "$build" = 1 ]; then
  lock=()
  [ -z "${EIN_BUILD_LOCK:-}" ] || lock=(flock "$EIN_BUILD_LOCK")
  cmake -S tests/fuzz -B "$out" -G Ninja -DCMAKE_C_COMPILER=clang-19 \
        -DCMAKE_CXX_COMPILER=clang++-19 >/dev/null
  ${lock[@]+"${lock[@]}"} cmake --build "$out" -j "$(nproc)" --target "${targets[@]/#/fuzz_}"
fi
rm -rf "$out/seeds"
python3 tests/fuzz/make_seeds.py "$out/seeds" build/bin/ein_safetensors_fixture
mkdir -p "$out/artifacts" "$out/logs"

failed=()
for t in "${targets[@]}"; do
  mkdir -p "$out/corpus/$t"
  log="$out/logs/$t-$(date +%Y%m%d-%H%M%S).log"  # one per run: runs may overlap
  dict=()
  [ ! -f "tests/fuzz/dict/$t.dict" ] || dict=(-dict="tests/fuzz/dict/$t.dict")
  start=$SECONDS
  # -timeout: an input running 10 s is a hang (wall time: on a machine shared with builds, a
  # long run takes --timeout 60, and inputs over 10 s are kept as slow-unit artifacts to
  # replay); -rss_limit_mb: an input using 2 GiB is a finding.
  if "$out/bin/fuzz_$t" ${dict[@]+"${dict[@]}"} -max_len="${max_len[$t]}" -timeout="$timeout" \
       -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$out/artifacts/$t-" \
       "${budget[@]}" "$out/corpus/$t" "$out/seeds/$t" >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$t")
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -1 || true)
  secs=$((SECONDS - start))
  echo "fuzz $t: $status, ${runs:-?} runs in ${secs} s ($(( ${runs:-0} / (secs > 0 ? secs : 1) ))/s), ${cov:-no coverage line}, peak ${rss:-?} MB"
  if [ "$status" != ok ]; then
    grep -E -B2 -A25 'ERROR: |==ERROR|runtime error|deadly signal|timeout|out-of-memory' "$log" | head -60
    echo "fuzz $t: log in $log; inputs in $out/artifacts/$t-*"
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "fuzz.sh: findings in ${failed[*]}" >&2; exit 1; }
