#!/usr/bin/env python3
"""Where NVRTC's cold compile time goes, for one CUDA source: NVRTC's own phase timings
(`--time`: the C++ front end, the NVVM optimizer, PTX to SASS) and the wall time of the compile,
for ein's options (with ptxas' -v for its report) and for variants of them and of the source
(the 16-bit types from the CUDA headers, and the generic max and min, as ein emitted them
before 2026-12-01; divisions as reciprocal products, plain or exact), and optionally another source
(`--compare`: the kernel as another build emits it), each compiled `--rounds` times, the
variants in turn (a comment line appended each time so that nothing is cached). No GPU needed.
BENCHMARKS.md and docs/cuda.md quote it for the softmax kernel that bench/gpu/run.sh compiles:

  build/bin/ein emit softmax --shape 64,1024,512 --dtype bf16 --target cuda > /tmp/softmax.cu
  python3 bench/gpu/nvrtc_phases.py /tmp/softmax.cu --rounds 5
"""
import argparse
import ctypes
import os
import re
import statistics
import tempfile
import time

LIGHT = b"#if defined(EIN_EMULATED_CUDA) || __CUDA_ARCH__ < 800\n"


def with_headers(source):
    """The source as ein emitted it before 2026-12-01: the CUDA 16-bit headers included instead
    of emit_cuda.cpp's light types (each block: #if LIGHT, the #include, #else, the light
    definitions with #if blocks of their own, #endif)."""
    out, lines = [], iter(source.splitlines(keepends=True))
    for line in lines:
        if line != LIGHT:
            out.append(line)
            continue
        out.append(next(lines))  # the #include
        depth = 1
        for inner in lines:
            depth += inner.startswith(b"#if") - (inner == b"#endif\n")
            if depth == 0:
                break
    return b"".join(out)


def generic_max_min(source):
    """The source without the prelude's f32 and f64 ein_max/ein_min (hardware max and min):
    the generic template's NaN, comparison and signbit chain for every type, as before
    2026-12-01. Each overload runs from its first line to a line "}"."""
    out, skipping = [], False
    for line in source.splitlines(keepends=True):
        if re.match(rb"__device__ __forceinline__ (float|double) ein_m(ax|in)\(", line):
            skipping = True
        if not skipping:
            out.append(line)
        elif line == b"}\n":
            skipping = False
    return b"".join(out)


def as_before(source):
    return generic_max_min(with_headers(source))


def reciprocal_product(source):
    """Each division of a point's value by a row's accumulator (`e[it] / a1`) as a product with
    its reciprocal, which NVVM hoists out of the unrolled loop: what the IEEE divisions cost.
    Not something ein can do: the product rounds twice, and an exact form (Markstein's
    correction, with a/b itself for zeros, infinities, NaN and subnormals) compiles slower than
    the division."""
    return re.sub(rb"(\w+\[it\]) / (a\d+)", rb"\1 * (1.0f / \2)", source)


# An exact quotient from the reciprocal (Markstein's correction; bench/gpu/markstein_check.cpp
# compares it with a / b on the host): with y = 1/b rounded, q = a*y, r = fma(-q, b, a) exactly,
# fma(r, y, q) is a / b rounded, where nothing under- or overflows; a / b itself elsewhere.
MARKSTEIN = b"""
struct EinDivisor { float b, y; bool fast; };
__device__ __forceinline__ EinDivisor ein_divisor(float b) {
  const float m = fabsf(b);
  return {b, 1.0f / b, m >= 0x1p-125f && m <= 0x1p125f};
}
__device__ __noinline__ float ein_div_exact(float a, float b) { return a / b; }
__device__ __forceinline__ float ein_div(float a, const EinDivisor& d) {
  const float q = a * d.y, m = fabsf(q);
  if (d.fast && fabsf(a) >= 0x1p-100f && m >= 0x1p-125f && m <= 0x1p126f)
    return fmaf(fmaf(-q, d.b, a), d.y, q);
  return ein_div_exact(a, d.b);
}
"""


def markstein(source):
    """Each division of a point's value by a row's accumulator through MARKSTEIN's ein_div, the
    divisor's reciprocal taken once: exact, unlike reciprocal_product."""
    source = source.replace(b'extern "C" __global__', MARKSTEIN + b'extern "C" __global__', 1)
    divisors = sorted(set(re.findall(rb"\w+\[it\] / (a\d+)", source)))
    for a in divisors:
        reduced = re.compile(rb"( *)(%s = ein_(?:warp|block)_reduce\([^\n]*\n)" % a)
        source = reduced.sub(rb"\1\2\1const EinDivisor inv_%s = ein_divisor(%s);\n" % (a, a),
                             source)
    return re.sub(rb"(\w+\[it\]) / (a\d+)", rb"ein_div(\1, inv_\2)", source)


# name: (source transform, options added, options removed)
VARIANTS = {
    "ein's options": (None, [], []),
    "--Ofast-compile=min": (None, ["--Ofast-compile=min"], []),
    "--Ofast-compile=mid": (None, ["--Ofast-compile=mid"], []),
    "without -minimal": (None, [], ["-minimal"]),
    "with the 16-bit headers": (with_headers, [], []),
    "the generic max and min": (generic_max_min, [], []),
    "ein before 2026-12-01": (as_before, [], ["-minimal"]),
    "reciprocal, not IEEE": (reciprocal_product, [], []),
    "reciprocal, Markstein": (markstein, [], []),
}


def load(path):
    for name in [path, "libnvrtc.so.13", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so"]:
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    raise SystemExit("no libnvrtc found (set --nvrtc)")


def compile_once(lib, source, options, timing_file):
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), source, b"bench.cu", 0, None, None) != 0:
        raise SystemExit("nvrtcCreateProgram failed")
    opts = [o.encode() for o in options] + [b"--time=" + timing_file.encode()]
    argv = (ctypes.c_char_p * len(opts))(*opts)
    start = time.perf_counter()
    status = lib.nvrtcCompileProgram(prog, len(opts), argv)
    wall = (time.perf_counter() - start) * 1e3
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    if status != 0:
        return None, log.value.decode(errors="replace")
    phases = {}
    with open(timing_file) as f:
        for line in f:
            cells = [c.strip() for c in line.split(",")]
            if len(cells) >= 3 and cells[0] != "File name":
                phases[cells[1]] = float(cells[2])
    return (wall, phases), log.value.decode(errors="replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("source")
    ap.add_argument("--arch", default="90")
    ap.add_argument("--include", default="/usr/local/cuda/include")
    ap.add_argument("--nvrtc", default=os.environ.get("EIN_NVRTC", ""))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compare", metavar="OTHER.cu",
                    help="also time this source with ein's options in the same rounds (the same "
                         "kernel as another build of ein emits it)")
    args = ap.parse_args()
    lib = load(args.nvrtc)
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    # As runtime/cuda/nvrtc.cpp compiles (-minimal from NVRTC 12.4), with ptxas' report.
    base = [f"--gpu-architecture=sm_{args.arch}", "-std=c++17", f"-I{args.include}",
            "--ptxas-options=-v"]
    if (major.value, minor.value) >= (12, 4):
        base.insert(2, "-minimal")
    with open(args.source, "rb") as f:
        source = f.read()
    variants = dict(VARIANTS)
    if args.compare:
        with open(args.compare, "rb") as f:
            other = f.read()
        variants["--compare source"] = (lambda _: other, [], [])
    print(f"NVRTC {major.value}.{minor.value}, sm_{args.arch}, {args.rounds} rounds; medians in ms")
    print(f"{'variant':<24} | {'wall':>6} | {'front end':>9} | {'NVVM':>6} | {'ptxas':>6} | "
          "ptxas' report")
    results = {}  # variant: [(wall and phases, or None; log)] per round
    with tempfile.TemporaryDirectory() as tmp:
        timing = os.path.join(tmp, "time.csv")
        for round_ in range(args.rounds + 1):  # round 0 warms NVRTC up
            for name, (transform, added, removed) in variants.items():
                tag = f"\n// round {round_} {name}\n".encode()
                text = transform(source) if transform else source
                options = [o for o in base if o not in removed] + added
                result, log = compile_once(lib, text + tag, options, timing)
                if round_ > 0:
                    results.setdefault(name, []).append((result, log))
    for name, runs in results.items():
        if runs[0][0] is None:
            print(f"{name:<24} | not accepted: {runs[0][1].strip().splitlines()[0]}")
            continue
        wall = statistics.median(r[0][0] for r in runs)
        phase = lambda key: statistics.median(r[0][1].get(key, float("nan")) for r in runs)
        report = re.findall(r"\d+ bytes stack frame|Used \d+ registers", runs[-1][1])
        print(f"{name:<24} | {wall:6.1f} | {phase('CUDA C++ Frontend'):9.0f} | "
              f"{phase('NVVM Optimizer'):6.0f} | {phase('PTX Translation'):6.0f} | "
              f"{'; '.join(report)}")


if __name__ == "__main__":
    main()
