#!/usr/bin/env python3
"""ein's CPU ops side by side with PyTorch (eager, CPU) and numpy, in one run.

Runs build-bench/bin/ein_cpu_timings (medians printed as JSON lines), then the same cases in
PyTorch and numpy in this process, and prints one table: medians, GB/s (bytes read + written)
or GFLOP/s, the ratio of each reference's time to ein's, and whether the target is met.
It measures and compares; it builds nothing (bench/compare_cpu.sh builds and installs).

    /usr/bin/python3 bench/compare_cpu.py [--driver PATH] [--reps N] [--rounds N] [--only GROUP]

--only GROUP runs one group of the driver's cases and the matching reference cases (e.g.
--only fused: the fused softmax and AdamW kernels against torch.softmax and
torch.optim.AdamW(foreach=True)).

With --rounds N > 1 every system runs N times, alternating; each time is the median of the N
per-round medians and each ratio the median of the N per-round ratios, which damps a noisy
neighbour that comes and goes.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

MIB = 1 << 20


def time_calls(f, reps, warmup=3, batch=1):
    """Per-call seconds of `f`, one entry per repetition (each repetition runs `batch` calls)."""
    for _ in range(max(warmup, 1) * batch):
        f()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(batch):
            f()
        out.append((time.perf_counter() - t0) / batch)
    return out


def torch_fused_cases(reps):
    """The fused kernels' references: torch.softmax over the last dim of (64, 1024, 512) f32, and
    one torch.optim.AdamW(foreach=True) step over 16M f32 parameters (the autograd issue's
    targets)."""
    import torch

    torch.set_num_threads(2)
    res = {}
    x = torch.randn(64, 1024, 512)
    res["softmax"] = time_calls(lambda: torch.softmax(x, -1), reps)
    del x
    n = 16 << 20
    p = torch.nn.Parameter(torch.randn(n))
    p.grad = torch.randn(n)
    opt = torch.optim.AdamW([p], lr=1e-3, foreach=True)
    res["adamw"] = time_calls(opt.step, reps)
    return res


def torch_cases(reps, only=None):
    import torch

    torch.set_num_threads(2)
    if only == "fused":
        return torch_fused_cases(reps), f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    res = {}
    b, s, h, d = 8, 1024, 8, 128
    x = torch.randn(b, s, h * d)
    src = torch.randn(b * s * h * d)
    dst = torch.empty_like(src)
    res["memcpy"] = time_calls(lambda: dst.copy_(src), reps)
    res["memcpy_fresh"] = time_calls(lambda: src.clone(), reps)  # allocates, like ein's ops
    res["rearrange_copy"] = time_calls(lambda: x.view(b, s, h, d).permute(0, 2, 1, 3).contiguous(), reps)
    into = torch.empty(b, h, s, d)
    xp = x.view(b, s, h, d).permute(0, 2, 1, 3)
    res["rearrange_copy_into"] = time_calls(lambda: into.copy_(xp), reps)
    res["rearrange_copy_into_input_order"] = res["rearrange_copy_into"]
    res["rearrange_view_contiguous"] = res["rearrange_copy"]
    res["mean"] = time_calls(lambda: x.mean(-1), reps)
    del x, src, dst, into, xp
    x = torch.randn(16, 1024, 1024)
    m, w, c = torch.randn(16, 1024), torch.randn(1024), torch.randn(1024)
    res["map_chain"] = time_calls(lambda: (x - m[..., None]) ** 2 * w + c, reps)
    out = torch.empty_like(x)
    res["map_chain_into"] = time_calls(
        lambda: torch.add(torch.mul((x - m[..., None]) ** 2, w, out=out), c, out=out), reps)
    del x, out
    xg, wg = torch.randn(8, 128, 1024), torch.randn(1024, 1024)
    res["gemm"] = time_calls(lambda: torch.matmul(xg, wg), reps)
    q, k = torch.randn(4, 8, 256, 64), torch.randn(4, 8, 256, 64)
    res["attn_scores"] = time_calls(lambda: torch.einsum("bhqd,bhkd->bhqk", q, k), reps)
    res["attn_scores_batch_parallel"] = res["attn_scores"]
    xs = torch.randn(2, 16, 64)
    res["view_call"] = time_calls(lambda: xs.view(2, 16, 8, 8).permute(0, 2, 1, 3), reps, batch=20000)
    res["rearrange_view_call"] = res["view_call"]
    small = torch.randn(16)
    res["small_map"] = time_calls(lambda: small * 2 + 1, reps, batch=20000)
    del xs, small, q, k, xg, wg
    res.update(torch_fused_cases(reps))
    return res, f"torch {torch.__version__} ({torch.get_num_threads()} threads)"


def numpy_cases(reps, only=None):
    import numpy as np

    if only == "fused":  # numpy has no softmax or AdamW of its own
        return {}, f"numpy {np.__version__}"
    rng = np.random.default_rng(0)
    res = {}
    b, s, h, d = 8, 1024, 8, 128
    x = rng.standard_normal((b, s, h * d), dtype=np.float32)
    src = rng.standard_normal(b * s * h * d, dtype=np.float32)
    dst = np.empty_like(src)
    res["memcpy"] = time_calls(lambda: np.copyto(dst, src), reps)
    res["memcpy_fresh"] = time_calls(lambda: src.copy(), reps)
    res["rearrange_copy"] = time_calls(
        lambda: np.ascontiguousarray(x.reshape(b, s, h, d).transpose(0, 2, 1, 3)), reps)
    into = np.empty((b, h, s, d), np.float32)
    res["rearrange_copy_into"] = time_calls(
        lambda: np.copyto(into, x.reshape(b, s, h, d).transpose(0, 2, 1, 3)), reps)
    res["rearrange_copy_into_input_order"] = res["rearrange_copy_into"]
    res["rearrange_view_contiguous"] = res["rearrange_copy"]
    res["mean"] = time_calls(lambda: x.mean(-1), reps)
    del x, src, dst, into
    x = rng.standard_normal((16, 1024, 1024), dtype=np.float32)
    m = rng.standard_normal((16, 1024), dtype=np.float32)
    w = rng.standard_normal(1024, dtype=np.float32)
    c = rng.standard_normal(1024, dtype=np.float32)
    res["map_chain"] = time_calls(lambda: (x - m[..., None]) ** 2 * w + c, reps)
    del x
    xg = rng.standard_normal((8, 128, 1024), dtype=np.float32)
    wg = rng.standard_normal((1024, 1024), dtype=np.float32)
    res["gemm"] = time_calls(lambda: xg @ wg, reps)
    q = rng.standard_normal((4, 8, 256, 64), dtype=np.float32)
    k = rng.standard_normal((4, 8, 256, 64), dtype=np.float32)
    res["attn_scores"] = time_calls(lambda: np.matmul(q, k.swapaxes(-1, -2)), reps)
    res["attn_scores_batch_parallel"] = res["attn_scores"]
    xs = rng.standard_normal((2, 16, 64), dtype=np.float32)
    res["view_call"] = time_calls(lambda: xs.reshape(2, 16, 8, 8).transpose(0, 2, 1, 3), reps, batch=20000)
    res["rearrange_view_call"] = res["view_call"]
    small = rng.standard_normal(16, dtype=np.float32)
    res["small_map"] = time_calls(lambda: small * 2 + 1, reps, batch=20000)
    return res, f"numpy {np.__version__}"


def run_driver(path, reps, only=None):
    cmd = [path, "--reps", str(reps)] + (["--only", only] if only else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {r["case"]: r for r in (json.loads(line) for line in out.splitlines() if line.startswith("{"))}


def fmt_time(t):
    if t is None:
        return "—"
    if t < 1e-6:
        return f"{t * 1e9:.0f} ns"
    if t < 1e-3:
        return f"{t * 1e6:.2f} µs"
    return f"{t * 1e3:.2f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--driver", default="build-bench/bin/ein_cpu_timings")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", help="also write the medians here")
    ap.add_argument("--only", help="one group of the driver's cases (bandwidth, map, gemm, overhead, compile, fused)")
    args = ap.parse_args()

    rounds = {"ein": [], "torch": [], "numpy": []}
    versions = {}
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}: ein ...", file=sys.stderr, flush=True)
        rounds["ein"].append(run_driver(args.driver, args.reps, args.only))
        print(f"round {r + 1}/{args.rounds}: torch ...", file=sys.stderr, flush=True)
        t, versions["torch"] = torch_cases(args.reps, args.only)
        rounds["torch"].append({k: statistics.median(v) for k, v in t.items()})
        print(f"round {r + 1}/{args.rounds}: numpy ...", file=sys.stderr, flush=True)
        n, versions["numpy"] = numpy_cases(args.reps, args.only)
        rounds["numpy"].append({k: statistics.median(v) for k, v in n.items()})

    info = {c: r for c, r in rounds["ein"][0].items()}
    ein = {c: statistics.median(rd[c]["median_s"] for rd in rounds["ein"]) for c in info}
    torch_t = {c: statistics.median(rd[c] for rd in rounds["torch"]) for c in rounds["torch"][0]}
    numpy_t = {c: statistics.median(rd[c] for rd in rounds["numpy"]) for c in rounds["numpy"][0]}
    have_memcpy = "memcpy" in info

    def rate(case, t):
        if t is None:
            return "—"
        if info[case]["bytes"] > 0:
            return f"{info[case]['bytes'] / t / 1e9:.1f} GB/s"
        if info[case]["flops"] > 0:
            return f"{info[case]['flops'] / t / 1e9:.1f} GFLOP/s"
        return ""

    def gbs(case):
        return info[case]["bytes"] / ein[case] / 1e9

    ceiling = max(gbs("memcpy"), gbs("memcpy_2t")) if have_memcpy else 0
    fresh = gbs("memcpy_fresh") if have_memcpy else 0
    def speedup(c):
        """torch time / ein time (>1: ein is faster): the median of the per-round ratios, so each
        ratio pairs two measurements taken seconds apart, under the same background load."""
        return statistics.median(rt[c] / re[c]["median_s"] for rt, re in zip(rounds["torch"], rounds["ein"]))

    # Each target is (target, measured, met), computed only for the cases this run has.
    targets = {
        "rearrange_copy": lambda: (
            "≥60% memcpy, ≥5× torch",
            f"{gbs('rearrange_copy') / ceiling:.0%} of memcpy ({gbs('rearrange_copy') / fresh:.0%} of "
            f"memcpy into fresh memory), {speedup('rearrange_copy'):.2f}× torch",
            gbs("rearrange_copy") >= 0.6 * ceiling and speedup("rearrange_copy") >= 5),
        "rearrange_copy_into": lambda: (
            "(diagnostic)",
            f"{gbs('rearrange_copy_into') / ceiling:.0%} of memcpy, {speedup('rearrange_copy_into'):.2f}× torch copy_",
            None),
        "map_chain_into": lambda: (
            "(diagnostic)", f"{gbs('map_chain_into') / ceiling:.0%} of memcpy", None),
        "mean": lambda: ("≥1.0× torch", f"{speedup('mean'):.2f}× torch", speedup("mean") >= 1.0),
        "map_chain": lambda: (
            "≥60% memcpy",
            f"{gbs('map_chain') / ceiling:.0%} of memcpy ({gbs('map_chain') / fresh:.0%} of memcpy into "
            f"fresh memory), {speedup('map_chain'):.2f}× torch",
            gbs("map_chain") >= 0.6 * ceiling),
        "gemm": lambda: ("≥0.8× torch", f"{speedup('gemm'):.2f}× torch", speedup("gemm") >= 0.8),
        "attn_scores": lambda: ("≥1.0× torch", f"{speedup('attn_scores'):.2f}× torch", speedup("attn_scores") >= 1.0),
        "view_call": lambda: ("≤1 µs", fmt_time(ein["view_call"]), ein["view_call"] <= 1e-6),
        "small_map": lambda: ("≤5 µs", fmt_time(ein["small_map"]), ein["small_map"] <= 5e-6),
        "compile_fused": lambda: ("≤50 ms", fmt_time(ein["compile_fused"]), ein["compile_fused"] <= 50e-3),
        "disk_hit": lambda: ("≤2 ms", fmt_time(ein["disk_hit"]), ein["disk_hit"] <= 2e-3),
        "softmax": lambda: ("≥5× torch", f"{speedup('softmax'):.2f}× torch.softmax", speedup("softmax") >= 5),
        "adamw": lambda: ("≥3× torch", f"{speedup('adamw'):.2f}× torch AdamW(foreach=True)",
                          speedup("adamw") >= 3),
    }
    needs = {"rearrange_copy": ["memcpy"], "rearrange_copy_into": ["memcpy"], "map_chain_into": ["memcpy"],
             "map_chain": ["memcpy"]}
    checks = {c: f() for c, f in targets.items()
              if c in info and all(n in info for n in needs.get(c, []))}

    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"{versions['torch']}, {versions['numpy']}; reps={args.reps}, rounds={args.rounds}, medians")
    head = ["case", "ein", "ein rate", "torch", "torch rate", "numpy", "numpy rate", "torch/ein", "target",
            "measured", "met"]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for case in info:
        tt, nt = torch_t.get(case), numpy_t.get(case)
        target, measured, ok = checks.get(case, ("", "", None))
        ratio = f"{speedup(case):.2f}" if tt else "—"
        met = "" if ok is None else ("yes" if ok else "**no**")
        print(f"| {case} | {fmt_time(ein[case])} | {rate(case, ein[case])} | {fmt_time(tt)} | {rate(case, tt)} "
              f"| {fmt_time(nt)} | {rate(case, nt)} | {ratio} | {target} | {measured} | {met} |")
    print()
    for case, r in info.items():
        note = f" — {r['note']}" if r["note"] else ""
        print(f"- {case}: {r['what']}{note}")
    print("- references: memcpy = torch dst.copy_(src) / np.copyto (preallocated); memcpy_fresh = "
          "torch clone() / ndarray.copy() (allocate); *_into = torch copy_/out= and np.copyto; "
          "diagnostic rows reuse the reference column of the op they dissect")
    spread = [c for c in ("rearrange_copy", "rearrange_copy_into", "mean", "map_chain", "gemm", "attn_scores",
                          "softmax", "adamw")
              if c in info and c in torch_t]
    if args.rounds > 1:
        for c in spread:
            per = ", ".join(f"{rt[c] / re[c]['median_s']:.2f}" for rt, re in zip(rounds["torch"], rounds["ein"]))
            print(f"- per-round torch/ein, {c}: {per}")
    if have_memcpy:
        print(f"- memcpy ceiling used for the % targets: {ceiling:.1f} GB/s (best of ein driver's "
              f"memcpy and memcpy_2t); memcpy into fresh memory: {fresh:.1f} GB/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ein": ein, "torch": torch_t, "numpy": numpy_t, "info": info}, f, indent=1)


if __name__ == "__main__":
    main()
