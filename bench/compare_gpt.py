#!/usr/bin/env python3
"""Training throughput of a byte-level GPT: `ein train` against the PyTorch reference
(tests/models/gpt_torch.py), side by side in each round.

    /usr/bin/python3 bench/compare_gpt.py [--ein PATH] [--script examples/gpt/byte_gpt.ein]
        [--device cpu|cuda] [--rounds 5] [--steps 20] [--warmup 5]
        [--V 256 --T 64 --L 2 --H 4 --D 128 --B 16] [--data FILE] [--threads 2] [--torch-only]
        [--ein-arg ARG ...]

Each round runs torch (gpt_torch.py, random batches, AdamW, --threads threads) for warmup +
steps steps, then ein (`ein train SCRIPT --steps N --log F --set ...`) for as many; the first
--warmup steps of each are dropped. torch's per-step wall time covers batch + forward + backward
+ AdamW; ein's is the `ms` of each log line (tokens/s from `tokens_per_s` where logged).
Prints median ms/step, tokens/s (B*T tokens per step), the per-round ratio ein/torch tokens/s
and its median, against the target: on the CPU (--device cpu, the default) ein ≥ 1.3× torch's
tokens/s; on a GPU (--device cuda: `ein train ... --device cuda` against gpt_torch.py --device
cuda, torch eager) ein ≥ 1.0× torch's. On cuda both sides' times cover the GPU work: a torch
step ends with loss.item(), which waits for its kernels; an ein step ends without waiting, and
its queued backward and AdamW kernels are waited for by the next step's loss.item(): time moves
to the next step, and the steady-state median after the warm-up is unchanged.
bench/compare_gpt.sh installs and builds (CPU). Without --data a deterministic ~1 MB
English-like corpus is generated.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

TARGETS = {"cpu": 1.3, "cuda": 1.0}  # ein/torch tokens/s, per --device
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "tests", "models")


class BenchError(Exception):
    pass


def torch_round(a, data):
    cmd = [sys.executable, os.path.join(MODELS, "gpt_torch.py"), "--data", data, "--order",
           "random", "--steps", str(a.warmup + a.steps), "--threads", str(a.threads), "--json",
           "--seed", "0", "--device", a.device] + [f"--{k}={getattr(a, k)}" for k in "VTLHDB"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"torch failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    ms = res["ms_per_step"][a.warmup:]
    return statistics.median(ms), res["losses"]


def ein_round(a, data, tmp):
    if not os.path.isfile(a.ein) or not os.access(a.ein, os.X_OK):
        raise BenchError(f"ein binary not found or not executable: {a.ein} "
                         "(bench/compare_gpt.sh builds build-bench/bin/ein)")
    if not os.path.isfile(a.script):
        raise BenchError(f"ein script not found: {a.script}")
    log = os.path.join(tmp, "ein_log.jsonl")
    if os.path.exists(log):
        os.remove(log)
    cmd = [a.ein, "train", a.script, "--data", data, "--steps", str(a.warmup + a.steps),
           "--log", log, "--seed", "0", "--device", a.device]
    for k in "VTLHDB":
        if k != "V":  # the vocabulary of a byte-level script is fixed at 256
            cmd += ["--set", f"{k}={getattr(a, k)}"]
    cmd += a.ein_arg
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads))
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env)
    if r.returncode != 0:
        raise BenchError(f"ein failed ({r.returncode}): {' '.join(cmd)}\n"
                         f"stdout:\n{r.stdout[-2000:]}\nstderr:\n{r.stderr[-2000:]}")
    if not os.path.exists(log):
        raise BenchError(f"ein wrote no log {log}: {' '.join(cmd)}")
    rows = []
    with open(log) as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                if "ms" in row or "tokens_per_s" in row:
                    rows.append(row)
    rows.sort(key=lambda row: row.get("step", 0))
    rows = rows[a.warmup:]
    if not rows:
        raise BenchError(f"ein log {log} has no step lines after the {a.warmup} warm-up steps")
    tokens = a.B * a.T
    if all("ms" in row for row in rows):
        ms = statistics.median(float(row["ms"]) for row in rows)
    else:
        ms = statistics.median(tokens / float(row["tokens_per_s"]) * 1e3 for row in rows)
    if all("tokens_per_s" in row for row in rows):
        tps = statistics.median(float(row["tokens_per_s"]) for row in rows)
    else:
        tps = tokens / ms * 1e3
    return ms, tps, [row.get("loss") for row in rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ein", default=os.path.join(ROOT, "build-bench", "bin", "ein"))
    ap.add_argument("--script", default=os.path.join(ROOT, "examples", "gpt", "byte_gpt.ein"))
    ap.add_argument("--data", help="training text (bytes are tokens); default: generated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per round and side")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=sorted(TARGETS), default="cpu",
                    help="where both sides train (target: ein/torch ≥ 1.3 on cpu, 1.0 on cuda)")
    for name, default in (("V", 256), ("T", 64), ("L", 2), ("H", 4), ("D", 128), ("B", 16)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--torch-only", action="store_true", help="measure torch alone")
    ap.add_argument("--ein-arg", action="append", default=[], help="extra ein argument")
    a = ap.parse_args()
    a.ein, a.script = os.path.abspath(a.ein), os.path.abspath(a.script)
    tokens = a.B * a.T
    tmp = tempfile.mkdtemp(prefix="ein_bench_gpt_")
    data = a.data
    if not data:
        sys.path.insert(0, MODELS)
        from test_gpt_reference import make_corpus
        data = os.path.join(tmp, "corpus.txt")
        make_corpus(data, 1 << 20)
    print(f"# GPT V={a.V} T={a.T} L={a.L} H={a.H} D={a.D} B={a.B} ({tokens} tokens/step) on "
          f"{a.device}, {a.rounds} rounds x {a.steps} timed steps after {a.warmup} warm-up, "
          f"{a.threads} threads; data {os.path.getsize(data)} bytes")
    load = float(open("/proc/loadavg").read().split()[0])
    if load > 0.5 * (os.cpu_count() or 1):
        print(f"# warning: load {load:.2f} on {os.cpu_count()} cores. On a busy machine torch's "
              "OpenMP threads spin-wait and its step times inflate many-fold (seen: 45 ms at 1 "
              "thread, ~1200 ms at 2); rerun idle, or compare with OMP_WAIT_POLICY=passive",
              flush=True)
    torch_ms, ein_ms, ein_tps, ratios = [], [], [], []
    try:
        for i in range(a.rounds):
            t, _ = torch_round(a, data)
            torch_ms.append(t)
            if a.torch_only:
                print(f"round {i + 1}: torch {t:.2f} ms/step", flush=True)
                continue
            e, tps, _ = ein_round(a, data, tmp)
            ein_ms.append(e)
            ein_tps.append(tps)
            ratios.append(tps / (tokens / t * 1e3))
            print(f"round {i + 1}: torch {t:.2f} ms/step, ein {e:.2f} ms/step, "
                  f"ein/torch {ratios[-1]:.2f}", flush=True)
    except BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        if torch_ms:
            t = statistics.median(torch_ms)
            print(f"torch alone: median {t:.2f} ms/step, {tokens / t * 1e3:.0f} tokens/s "
                  f"over {len(torch_ms)} round(s)", file=sys.stderr)
        return 2
    finally:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    t = statistics.median(torch_ms)
    target = TARGETS[a.device]
    print()
    print("| side | ms/step | tokens/s | ein/torch tokens/s | target |")
    print("|---|---:|---:|---:|---|")
    if ein_ms:
        q = statistics.median(ratios)
        print(f"| ein (`ein train`) | {statistics.median(ein_ms):.2f} | "
              f"{statistics.median(ein_tps):.0f} | {q:.2f} | "
              f"≥{target}× {'met' if q >= target else 'MISSED'} |")
    print(f"| torch (gpt_torch.py) | {t:.2f} | {tokens / t * 1e3:.0f} | 1.00 | |")
    per = (f"; per-round ratios {', '.join(f'{x:.2f}' for x in ratios)}" if ratios else "")
    print(f"\n(medians over {a.rounds} rounds of {a.steps} steps; ratio = median of per-round "
          f"ein/torch tokens/s{per}; load: {' '.join(open('/proc/loadavg').read().split()[:3])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
