#!/usr/bin/env bash
# The CUDA backend on a GPU machine (an H100): builds ein, runs the CUDA test suites, the
# device execution tests and the op suite on the GPU (EIN_TEST_DEVICE=cuda; on a machine without
# a GPU they skip everything that needs one, with the reason), then prints tables of
# measurements, one row per line ("name | value | unit | how"):
#   - NVRTC compile times (cold, disk cache, memory cache) of the emitted bf16 softmax kernel,
#     device-to-device and pinned host-to-device copy bandwidth, a bf16 4096^3 GEMM through
#     ein's cuBLASLt path (ein_cuda_timings), and the same GEMM in PyTorch;
#   - ein's ops against the device's copy bandwidth (ein_op_bandwidth: a fused elementwise
#     chain, a permute made contiguous, row softmax and sums, host dispatch per launch), then
#     the same ops in PyTorch with the ratio ein/torch under each (> 1: ein faster);
#   - the fused LM head against the unfused one, and the fused attention (tensor-core forward,
#     scalar kernels) against torch's scaled_dot_product_attention, in causal-useful TFLOP/s;
#   - GPT training throughput, `ein train --device cuda` against torch eager and torch.compile
#     on the byte-level GPT and on a GPT-2-small-shaped one (T=1024, bf16;
#     bench/gpu/compare_gpt_gpu.py; skipped when torch has no CUDA).
#
#   bash bench/gpu/run.sh [BUILD_DIR]        builds into BUILD_DIR (default build-gpu), then runs
#   bash bench/gpu/run.sh --prebuilt BIN     runs the binaries in BIN, no build step: the GPU
#                                            bundle's run.sh does this (scripts/gpu_bundle.sh)
#   ... [--json FILE]                        the table as JSON (default gpu_results.json)
#   ... [--logs DIR]                         keep every suite's and benchmark's full log in DIR
#       (by default they go to a temporary folder removed at the end; a failing test's
#       message is in its suite's log)
#   ... [--parts suites,ops,measure,attention,gpt,sample,sanitize]
#       only these parts (default all but sanitize): the CUDA suites; the op suite on the GPU (it
#       compiles every op test's kernels with NVRTC: the longest part); NVRTC, GEMM, op-bandwidth
#       and LM head measurements; the fused attention's kernels against float64 on the GPU
#       (unless `suites` ran them) and their speed next to torch's SDPA; GPT training against
#       torch; `ein sample --device cuda` with its key-value cache against torch's nanoGPT loop
#       with and without one (bench/compare_sample.py --mode cache); the attention and device
#       suites under compute-sanitizer's racecheck, synccheck and
#       memcheck (slow: only when named)
# Exits nonzero when a test suite or a benchmark fails; the measurements are printed either way.
set -uo pipefail
json=$PWD/gpu_results.json
build=build-gpu
bin=""
parts=suites,ops,measure,attention,gpt,sample
logs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) bin=$(cd "$2" && pwd); shift 2 ;;
    --json) json=$(realpath -m "$2"); shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    --logs) logs=$(realpath -m "$2"); shift 2 ;;
    *) build=$1; shift ;;
  esac
done
cd "$(dirname "$0")/../.."
if [ -n "$logs" ]; then
  out=$logs
  mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi

if [ -z "$bin" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" ||
    { cat "$out/configure.log"; exit 1; }
  ninja -C "$build" -j"$(nproc)" ein ein_cuda_tests ein_cuda_runtime_tests ein_device_tests \
    ein_attention_tests ein_ops_tests ein_cuda_timings ein_op_bandwidth ein_lm_head_timings \
    ein_attention_kernel_timings ein_stdlib || exit 1
  bin=$PWD/$build/bin
fi

# want PART: whether --parts names it.
want() { [[ ",$parts," == *",$1,"* ]]; }

# Everything below prints into one log, which bench/gpu/results_json.py turns into $json.
main() {
status=0
# run_suite SUITE [VAR=VALUE ...]: runs $bin/SUITE with those variables set (under the command
# in the array `under`, named `under_name`, when it is set) and prints its summary (passed,
# skipped with names and, above them, the reasons, failed tests), then a row "suite SUITE |
# passed | ... | failed, skipped" for the table.
under=()
under_name=""
run_suite() {
  local suite=$1
  shift
  local what="$suite${*:+ ($*)}${under_name:+ under $under_name}"
  local log="$out/$suite${under_name:+.${under_name// /-}}.log"
  echo "== $what"
  local rc=0
  env "$@" "${under[@]}" "$bin/$suite" >"$log" 2>&1 || rc=$?
  [ $rc -eq 0 ] || status=1
  sed -n '/^\[==========\] .* ran\./,$p' "$log"
  grep -A1 ': Skipped$' "$log" | grep -v -e ': Skipped$' -e '^--$' | sort | uniq -c
  local passed failed skipped
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log")
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log")
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log")
  [ $rc -eq 0 ] || [ -n "$failed" ] || tail -n 20 "$log"  # a crash or a sanitizer's report
  # A skip in the global environment (no driver for EIN_TEST_DEVICE=cuda) skips every test
  # before it runs, and GoogleTest still counts them as passed.
  if grep -q '^EIN_TEST_DEVICE=.*: ' "$log"; then
    skipped="all $passed (the device: $(grep -m1 '^EIN_TEST_DEVICE=' "$log"))"
    passed=0
  fi
  printf '%-34s | %10s | %-7s | %s\n' "suite $what" "${passed:-0}" passed \
    "$([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)"): ${failed:-0} failed, ${skipped:-0} skipped"
}
if want suites; then
  run_suite ein_cuda_runtime_tests
  run_suite ein_cuda_tests
  run_suite ein_device_tests
  # the CUDA attention kernels against float64 (the suite's other tests need the source tree)
  run_suite ein_attention_tests GTEST_FILTER='*AttentionOnCuda*'
fi
want ops && run_suite ein_ops_tests EIN_TEST_DEVICE=cuda  # every op test with its inputs on cuda:0

if want measure; then
echo
echo "== measurements"
"$bin/ein" emit softmax --shape 64,1024,512 --dtype bf16 --target cuda >"$out/softmax.cu" ||
  exit 1
"$bin/ein_cuda_timings" "$out/softmax.cu" || status=1
python3 - <<'PY' || echo "torch bf16 GEMM 4096^3             |          - |         | skipped: no torch with CUDA"
import time, torch
if not torch.cuda.is_available():
    raise SystemExit(1)
n = 4096
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    a @ b
torch.cuda.synchronize()
reps = 50
t = time.perf_counter()
for _ in range(reps):
    a @ b
torch.cuda.synchronize()
dt = (time.perf_counter() - t) / reps
print(f"{'torch bf16 GEMM 4096^3':<34} | {2 * n**3 / dt / 1e12:>10.3f} | {'TFLOP/s':<7} | "
      f"torch.matmul x{reps}, torch {torch.__version__}")
PY

echo
echo "== ein ops against the device's copy bandwidth, then the same ops in torch"
"$bin/ein_op_bandwidth" | tee "$out/op_bandwidth.txt" || status=1
# The same sizes and timing as bench/gpu/op_bandwidth.cpp (CUDA-synchronised wall clock, median
# of 20 calls after 3 warm-up calls; bytes = what the op must move at least), in torch eager.
# Under each torch row whose name matches an ein row: the ratio ein/torch (> 1: ein faster).
python3 - "$out/op_bandwidth.txt" <<'PY' || { echo "torch ops: failed (above)"; status=1; }
import statistics, sys, time
try:
    import torch
except ImportError as e:
    torch = None
    why = f"python3 cannot import torch ({e})"
if torch is not None and not torch.cuda.is_available():
    why = f"torch {torch.__version__} sees no CUDA device"
if torch is None or not torch.cuda.is_available():
    print(f"{'torch ops':<34} | {'-':>10} | {'':<7} | skipped: {why}")
    raise SystemExit(0)
REPS, WARMUP = 20, 3


def row(name, value, unit, how):
    print(f"{name:<34} | {value:>10.3f} | {unit:<7} | {how}", flush=True)


ein = {}  # name -> (value, unit) of ein_op_bandwidth's rows
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.split("|")]
    try:
        ein[cells[0]] = (float(cells[1]), cells[2])
    except (IndexError, ValueError):
        pass  # a comment, the header or a skipped row


def time_op(f):
    """Median seconds per call of f, the device synchronised before and after each."""
    for _ in range(WARMUP):
        f()
    seconds = []
    for _ in range(REPS):
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = f()
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - t)
        del out
    return statistics.median(seconds)


def bandwidth(name, nbytes, f, how, reference=None):
    s = time_op(f)
    gbs = nbytes / s / 1e9
    row("torch " + name, gbs, "GB/s", f"{how}; median of {REPS}, {s * 1e3:.3f} ms")
    if reference:
        row("  % of torch D2D copy", 100 * gbs / reference, "%", "torch's copy_ as the reference")
    if ein.get(name, (0, ""))[1] == "GB/s":
        row("  ein / torch", ein[name][0] / gbs, "x", "ein GB/s / torch GB/s")
    return gbs


def nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


print(f"# torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
n = 1 << 28  # 1 GiB of f32
src, dst = torch.empty(n, device="cuda"), torch.empty(n, device="cuda")
ref = bandwidth("D2D copy 1 GiB (reference)", nbytes(src, dst), lambda: dst.copy_(src),
                "dst.copy_(src); read + write")
bandwidth("clone 1 GiB f32", nbytes(src, dst), src.clone, "src.clone(); read + write", ref)
del src, dst
x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
bandwidth("map tanh(x)*y+x f32 2^28", nbytes(x, y, x), lambda: torch.tanh(x) * y + x,
          "eager: 3 kernels, bytes counted as ein's (2 reads + 1 write)", ref)
del x, y
x = torch.randn(32, 2048, 16 * 64, device="cuda", dtype=torch.bfloat16)
bandwidth("permute bs(hd)->bhsd bf16", 2 * nbytes(x),
          lambda: x.view(32, 2048, 16, 64).permute(0, 2, 1, 3).contiguous(),
          "view + permute(0, 2, 1, 3).contiguous(); read + write", ref)
del x
for dtype, name in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
    x = torch.randn(16384, 4096, device="cuda", dtype=dtype)
    bandwidth(f"softmax 16384x4096 {name}", 2 * nbytes(x), lambda: torch.softmax(x, -1),
              "torch.softmax(x, -1); read + write", ref)
    bandwidth(f"sum rows 16384x4096 {name}", nbytes(x) * (1 + 1 / 4096), lambda: x.sum(-1),
              "x.sum(-1); read + write of the sums", ref)
    del x

# Host dispatch: one elementwise kernel over 1024 f32 (x + y), 10000 calls unsynchronised,
# median of 5 rounds; and the chain ein fuses, which torch runs as 3 kernels.
a, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
for name, f, what in (("torch dispatch x+y 1024 f32", lambda: a + b, "1 kernel"),
                      ("torch dispatch tanh(x)*y+x 1024", lambda: torch.tanh(a) * b + a,
                       "3 kernels")):
    for _ in range(10):
        f()
    torch.cuda.synchronize()
    host = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(10000):
            f()
        host.append((time.perf_counter() - t) / 10000)
        torch.cuda.synchronize()
    us = statistics.median(host) * 1e6
    row(name, us, "us", f"host time per call ({what}), 10000 calls unsynchronised, median of 5")
    if "dispatch map 1024 f32" in ein:
        row("  ein / torch", us / ein["dispatch map 1024 f32"][0], "x",
            "torch us per call / ein's (ein's map is 1 kernel)")
PY

echo
echo "== the fused LM head against the unfused one: 8192 x 768 x 50257 f32, forward + backward"
# exec/cross_entropy_cuda.h: the gradients made in the forward, chunks of rows through
# cuBLASLt; unfused: the logits and their gradient stored. The issue's target: fused peak
# memory <= 1/10 of unfused.
"$bin/ein_lm_head_timings" bench/attention/lm_head.ein "$bin/../share/ein/stdlib" 8192 768 50257 \
  3 fused,unfused cuda >"$out/lm_head.jsonl" || status=1
python3 - "$out/lm_head.jsonl" <<'PY' || status=1
import json, sys
runs = {r["variant"]: r for r in map(json.loads, open(sys.argv[1]))}
for name, r in runs.items():
    print(f"{'lm head ' + name + ' ms':<34} | {r['median_ms']:>10.3f} | {'ms':<7} | "
          f"median of 3, loss {r['loss']:.6f}")
    print(f"{'lm head ' + name + ' peak':<34} | {r['peak_bytes'] / 2**20:>10.3f} | {'MiB':<7} | "
          "allocator's peak above the inputs")
if len(runs) == 2:
    f, u = runs["fused"], runs["unfused"]
    print(f"{'lm head fused / unfused time':<34} | {f['median_ms'] / u['median_ms']:>10.3f} | x"
          f"{'':<6} | medians")
    print(f"{'lm head unfused / fused peak':<34} | {u['peak_bytes'] / f['peak_bytes']:>10.3f} | x"
          f"{'':<6} | target >= 10")
PY

fi  # measure

if want attention; then
# the kernels' values on this GPU first, unless the suites above checked them
want suites || run_suite ein_attention_tests GTEST_FILTER='*AttentionOnCuda*'
echo
echo "== fused attention, causal, b 4 h 16 t 4096 e 128 bf16: ein and torch SDPA"
# exec/attention_cuda_mma.h: cuda, the tensor-core kernels through WMMA (the default); cuda-ptx:
# the ones through PTX's mma.sync (EIN_CUDA_ATTENTION=ptx; to become the default once they pass
# here); cuda-wgmma: the same through sm_90a's wgmma (EIN_CUDA_ATTENTION=wgmma, on H100/H200);
# cuda-simt: the scalar kernels (EIN_CUDA_ATTENTION=simt). The issue's target: forward
# >= 50% of the dense bf16 peak, here the cuBLASLt bf16 4096^3 GEMM rate of the measure part
# (the useful FLOPs of a causal forward: 2·b·h·t·t·e).
# Also at e 64, where dK and dV take one kernel (at e + f = 256 they take one each, and the
# WMMA backward tiles of 16: attention_cuda_mma.h), to tell the two apart.
"$bin/ein_attention_kernel_timings" 4 16 4096 128 5 \
  cuda:forward,cuda-ptx:forward,cuda-wgmma:forward,cuda,cuda-ptx,cuda-wgmma,cuda-simt:forward \
  >"$out/attention.jsonl" || status=1
"$bin/ein_attention_kernel_timings" 4 16 4096 64 5 \
  cuda:forward,cuda-wgmma:forward,cuda,cuda-ptx,cuda-wgmma >>"$out/attention.jsonl" || status=1
python3 - "$out/attention.jsonl" <<'PY' || status=1
import json, sys, time
rows = [json.loads(line) for line in open(sys.argv[1])]
wrong = False
for r in rows:
    name = f"attention ein {r['variant']}" + ("" if r["e"] == 128 else f" e {r['e']}")
    diff = r.get("max_diff")
    # against the scalar kernels (max |difference| / max |element|): bf16 rounding of P and dS
    # gives ~1e-2 at most; a wrong fragment layout or a race gives O(1)
    bad = diff is not None and not diff <= 0.05
    wrong = wrong or bad
    print(f"{name:<34} | {r['useful_tflops']:>10.3f} | TFLOP/s | "
          f"median {r['median_ms']:.3f} ms of 5, causal-useful FLOPs, "
          f"kernels {r.get('kernels', '?')}"
          + ("" if diff is None else f"; {diff:.2g} off the scalar kernels")
          + (" WRONG" if bad else ""))
if wrong:
    sys.exit(1)
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    raise SystemExit(0)
if not torch.cuda.is_available():
    raise SystemExit(0)
q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
           for _ in range(3))
flops = 2 * 4 * 16 * 4096 * 4096 * 128
for name, backward in (("forward", False), ("forward+backward", True)):
    times = []
    for rep in range(6):
        torch.cuda.synchronize()
        t = time.perf_counter()
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if backward:
            o.backward(torch.ones_like(o))
        torch.cuda.synchronize()
        if rep:
            times.append(time.perf_counter() - t)
    ms = sorted(times)[len(times) // 2] * 1e3
    tf = flops * (2.5 if backward else 1) / ms / 1e9
    print(f"{'attention torch sdpa ' + name:<34} | {tf:>10.3f} | TFLOP/s | median {ms:.3f} ms of 5")
PY
fi  # attention

if want gpt; then
echo
echo "== GPT training throughput: ein train --device cuda, torch eager and torch.compile"
if python3 -c 'import torch; raise SystemExit(not torch.cuda.is_available())' 2>/dev/null; then
  python3 bench/gpu/compare_gpt_gpu.py --ein "$bin/ein" || status=1
else
  echo "skipped: python3 has no torch with CUDA, which compare_gpt_gpu.py needs"
fi
fi  # gpt

if want sample; then
echo
echo "== sampling: ein sample --device cuda (its key-value cache) against torch's loop on the GPU"
# bench/compare_sample.py --mode cache: an 8-byte prompt and T - 7 tokens drawn greedily, all of
# them through ein's cache; torch's nanoGPT loop (eager, compile) and the same loop with gpt-fast's
# static cache (bench/sample_torch2.py --kv-cache). One round per config: a short lease.
if python3 -c 'import torch; raise SystemExit(not torch.cuda.is_available())' 2>/dev/null; then
  python3 bench/compare_sample.py --ein "$bin/ein" --python python3 --mode cache --rounds 1 \
    --device cuda --rows --config "64 2 4 128" --config "256 6 8 512" || status=1
else
  echo "skipped: python3 has no torch with CUDA, which compare_sample.py needs"
fi
fi  # sample

if want sanitize; then
# The attention kernels and the device tests under NVIDIA's compute-sanitizer: racecheck
# (shared-memory hazards between a block's threads), synccheck (barriers some threads of a block
# or warp miss) and memcheck (out-of-bounds and misaligned accesses). The host emulation checks
# these without a GPU (scripts/racecheck.sh, docs/cuda.md); this is the hardware's word. Each
# tool slows the kernels down tens of times, so the part runs only when named.
echo
echo "== compute-sanitizer on the attention kernels and the device tests"
sanitizer=$(command -v compute-sanitizer ||
            echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
if [ -x "$sanitizer" ]; then
  for tool in racecheck synccheck memcheck; do
    under=("$sanitizer" --tool "$tool" --error-exitcode 66 --print-limit 20)
    under_name="compute-sanitizer $tool"
    run_suite ein_attention_tests GTEST_FILTER='*AttentionOnCuda*'
    run_suite ein_device_tests GTEST_FILTER='Gpu/*'
  done
  under=()
  under_name=""
else
  echo "sanitize: skipped: no compute-sanitizer on PATH or in ${CUDA_HOME:-/usr/local/cuda}/bin"
fi
fi  # sanitize
return $status
}

main 2>&1 | tee "$out/run.log"
status=${PIPESTATUS[0]}
python3 bench/gpu/results_json.py "$out/run.log" "$bin" "$status" >"$json" &&
  echo "== the table as JSON: $json"
exit "$status"
