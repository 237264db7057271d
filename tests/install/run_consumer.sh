#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and checks what an outside user gets:
#   1. only the public headers (include/ein-<version>/ein/*.h, nothing internal);
#   2. the outside project in tests/install/consumer configures, builds against the installed
#      tree alone (find_package(ein CONFIG)) and runs;
#   3. the installed `ein` CLI resolves `import nn` from the installed stdlib, run from an
#      unrelated working directory with the source tree out of reach (the script is a copy);
#   4. diagnostics name stdlib files relative to the stdlib's root (stdlib/nn.ein).
# Usage: run_consumer.sh BUILD_DIR
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null

headers=$(cd "$work/prefix/include" && find . -type f | sort)
if echo "$headers" | grep -v '^\./ein-[0-9.]*/ein/[a-z_0-9]*\.h$'; then
  echo "install: files other than public headers under include/ (above)"; exit 1
fi
[ -x "$work/prefix/bin/ein" ] || { echo "install: no bin/ein"; exit 1; }
[ -f "$work/prefix/share/ein/stdlib/nn.ein" ] || { echo "install: no share/ein/stdlib/nn.ein"; exit 1; }

cmake -S "$here/consumer" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$work/build/consumer"

mkdir -p "$work/scripts" "$work/elsewhere"
cp "$here/../../examples/scripts/cruncher.ein" "$work/scripts/"
out=$(cd "$work/elsewhere" && env -u EIN_STDLIB "$work/prefix/bin/ein" check "$work/scripts/cruncher.ein")
echo "$out" | grep -q "parameters" || { echo "install: ein check failed:"; echo "$out"; exit 1; }
echo "ein check from the install: ok"

# A script that hands LayerNorm a transposed input: the note points into the installed
# stdlib, named relative to its root.
cat >"$work/scripts/bad.ein" <<'SCRIPT'
import nn
module M(d) {
  norm = LayerNorm(d)
  fn forward(x: f32[B d]) -> f32[B d] = norm(rearrange(x, "b d -> d b"))
}
dim D = 8
let m = M(D)
fn main(x: f32[4 D]) -> f32[4 D] = m(x)
SCRIPT
set +e
err=$(cd "$work/elsewhere" && env -u EIN_STDLIB "$work/prefix/bin/ein" check "$work/scripts/bad.ein" 2>&1)
rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "install: expected exit 1 from a shape error, got $rc:"; echo "$err"; exit 1; }
echo "$err" | grep -q "^stdlib/nn.ein:[0-9]*:[0-9]*: note: declared here" ||
  { echo "install: the note does not name stdlib/nn.ein:"; echo "$err"; exit 1; }
if echo "$err" | grep -q "$work/prefix"; then
  echo "install: a diagnostic shows the install path:"; echo "$err"; exit 1
fi
echo "diagnostics name the stdlib relative to its root: ok"
