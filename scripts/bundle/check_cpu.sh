#!/usr/bin/env bash
# What ein's GPU bundle can show without a GPU, run from the unpacked bundle's root (run.sh
# --check-cpu; scripts/bundle/minimal_root_check.sh runs it in a minimal Debian root with no
# development packages): every library resolves, `ein shape` and `ein check` work, the byte-level
# GPT trains 5 steps on the CPU, the CPU op suite passes, and --device cuda without a driver gives
# the clear error. Prints each check and exits nonzero when one fails.
set -uo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
check() {  # check NAME COMMAND...: runs COMMAND; prints its last line, or on failure its end
  local name=$1
  shift
  local t0=$SECONDS
  if "$@" >"$tmp/out" 2>&1; then
    echo "ok    $name ($((SECONDS - t0)) s): $(grep -v '^$' "$tmp/out" | tail -n 1)"
  else
    echo "FAIL  $name ($((SECONDS - t0)) s):"
    sed 's/^/      /' "$tmp/out" | tail -n 30
    failed=$((failed + 1))
  fi
}

echo "== ein's GPU bundle without a GPU ($(cat COMMIT 2>/dev/null); $(uname -m), glibc $(ldd --version | head -n1 | awk '{print $NF}'))"
every_library_resolves() {
  local bad=0
  for f in bin/* lib/*; do
    if ldd "$f" | grep -q "not found"; then
      echo "$f:"; ldd "$f" | grep "not found"; bad=1
    fi
  done
  local files=(bin/* lib/*)
  [ $bad -eq 0 ] && echo "every library of the ${#files[@]} files in bin/ and lib/ resolves"
}
check "ldd finds every library" every_library_resolves
shape_works() {
  local got
  got=$(bin/ein shape rearrange 'b s (h d) -> b h s d' '(8,1024,768)' h=12) || return 1
  [ "$got" = "(8,12,1024,64)" ] || { echo "got '$got', expected (8,12,1024,64)"; return 1; }
  # A bad pattern: the caret diagnostic and exit code 1
  bin/ein shape rearrange 'b (h w) c -> b h w c' '(2,12,3)' h=5 >"$tmp/bad" 2>&1
  [ $? -eq 1 ] && grep -q '\^' "$tmp/bad" || { cat "$tmp/bad"; return 1; }
  echo "$got, and a bad pattern's caret diagnostic with exit code 1"
}
check "ein shape" shape_works
check "ein check examples/gpt/byte_gpt.ein" bin/ein check examples/gpt/byte_gpt.ein
trains() {
  bin/ein train examples/gpt/byte_gpt.ein --steps 5 --device cpu --quiet --log "$tmp/log.jsonl" ||
    return 1
  local n
  n=$(grep -c '"loss"' "$tmp/log.jsonl")
  [ "$n" -eq 5 ] || { echo "$n log lines, expected 5"; return 1; }
  tail -n 1 "$tmp/log.jsonl"
}
check "ein train examples/gpt/byte_gpt.ein --steps 5 --device cpu" trains
check "the CPU op suite (bin/ein_ops_tests)" bin/ein_ops_tests --gtest_brief=1
no_driver_error() {
  if bin/ein train examples/gpt/byte_gpt.ein --steps 1 --device cuda --quiet 2>"$tmp/err"; then
    echo "--device cuda trained without a GPU?"; return 1
  fi
  grep -q "no CUDA driver" "$tmp/err" || { cat "$tmp/err"; return 1; }
  head -n 1 "$tmp/err"
}
check "--device cuda says: no CUDA driver" no_driver_error
if [ $failed -eq 0 ]; then echo "== all checks passed"; else echo "== $failed check(s) failed"; fi
exit $((failed > 0))
