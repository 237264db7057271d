#!/usr/bin/env python3
"""Model-level reference test: ein's stdlib GPT trained by `ein train` against the PyTorch
reference (tests/models/gpt_torch.py), from the same initial weights on the same byte batches.

    /usr/bin/python3 tests/models/test_gpt_reference.py --ein build/bin/ein --script FILE.ein

Exit 0 pass, 1 fail, 77 skipped (torch not importable). Flow: write a deterministic corpus and
init.safetensors (gpt_torch.py --make-init) in a temp dir; 5 AdamW steps in torch (lr 1e-3,
betas 0.9/0.95, eps 1e-8, wd 0.1, sequential batches); the same in ein (run_ein below, the one
place that knows ein's flags); compare the losses: step 1 (no optimizer involved yet) to 1e-5
relative, every step to 2e-4 * max(1, |torch|).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CFG = dict(V=256, T=32, L=2, H=2, D=32, B=4)
OPT = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)
STEPS = 5
TOL_FIRST = 1e-5   # relative, step 1
TOL_ALL = 2e-4     # times max(1, |torch loss|), every step


def run_ein(ein, script, tmp, init, data, steps, cfg, extra=()):
    """Trains with `ein train` and returns the per-step losses (log order by "step", 1-based).
    The only function that knows ein's command line: adapt flags here."""
    log = os.path.join(tmp, "log.jsonl")
    cmd = [ein, "train", script, "--init", init, "--data", data, "--steps", str(steps),
           "--log", log, "--seed", "0"]
    for k in ("B", "T", "L", "H", "D"):
        cmd += ["--set", f"{k}={cfg[k]}"]
    cmd += list(extra)
    print("ein:", " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ein exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    if not os.path.exists(log):
        raise RuntimeError(f"ein wrote no log {log}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    rows = []
    with open(log) as f:
        for line in f:
            line = line.strip()
            if line:
                row = json.loads(line)
                if "loss" in row:
                    rows.append(row)
    rows.sort(key=lambda row: row.get("step", 0))
    return [float(row["loss"]) for row in rows]


def run_torch(tmp, init, data, steps, cfg):
    cmd = [sys.executable, os.path.join(HERE, "gpt_torch.py"), "--init", init, "--data", data,
           "--steps", str(steps), "--order", "sequential", "--threads", "1", "--json",
           "--lr", str(OPT["lr"]), "--beta1", str(OPT["beta1"]), "--beta2", str(OPT["beta2"]),
           "--eps", str(OPT["eps"]), "--weight-decay", str(OPT["weight_decay"])]
    cmd += [f"--{k}={v}" for k, v in cfg.items()]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["losses"]


def make_corpus(path, nbytes=6000):
    """Deterministic English-like text (a fixed LCG over a word list), ASCII bytes."""
    words = ("the of and to in is that it was for on are as with his they at be this from have "
             "or by one had not but what all were when we there can an your which their said if "
             "do will each about how up out them then she many some so these would other into "
             "has more her two like him see time could no make than first been its who now "
             "people my made over did down only way find use may water long little very after "
             "words called just where most know model tensor gradient shape batch layer").split()
    state, out, n = 12345, [], 0
    while n < nbytes:
        sentence = []
        state = (state * 1103515245 + 12345) % 2 ** 31
        for _ in range(4 + state % 9):
            state = (state * 1103515245 + 12345) % 2 ** 31
            sentence.append(words[(state >> 8) % len(words)])
        s = " ".join(sentence).capitalize() + (". " if state % 5 else ".\n")
        out.append(s)
        n += len(s)
    with open(path, "w", encoding="ascii") as f:
        f.write("".join(out))


def check_reference_attention():
    """The reference's attention against a naive per-position loop (f64): guards the split
    "b t (three h d)" and the causal mask in gpt_torch.py itself."""
    import torch
    sys.path.insert(0, HERE)
    import gpt_torch
    g = torch.Generator().manual_seed(1)
    B, T, D, H = 2, 5, 8, 2
    hd = D // H
    p = {"a.qkv.weight": torch.randn(D, 3 * D, generator=g, dtype=torch.float64),
         "a.qkv.bias": torch.randn(3 * D, generator=g, dtype=torch.float64),
         "a.proj.weight": torch.randn(D, D, generator=g, dtype=torch.float64),
         "a.proj.bias": torch.randn(D, generator=g, dtype=torch.float64)}
    x = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    got = gpt_torch.attention(x, p, "a.", H)
    qkv = x @ p["a.qkv.weight"] + p["a.qkv.bias"]
    y = torch.zeros(B, T, D, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            q, k, v = (qkv[b, :, j * D + h * hd:j * D + (h + 1) * hd] for j in range(3))
            for t in range(T):
                sc = [float(q[t] @ k[s]) / math.sqrt(hd) for s in range(t + 1)]
                m = max(sc)
                e = [math.exp(s - m) for s in sc]
                for s in range(t + 1):
                    y[b, t, h * hd:(h + 1) * hd] += e[s] / sum(e) * v[s]
    ref = y @ p["a.proj.weight"] + p["a.proj.bias"]
    err = float((got - ref).abs().max())
    print(f"reference attention vs naive loop: max |diff| {err:.3g}")
    return err < 1e-10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ein", required=True, help="path to the ein binary")
    ap.add_argument("--script", required=True, help="the .ein training script")
    ap.add_argument("--ein-arg", action="append", default=[],
                    help="extra argument appended to the ein command (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (printed)")
    a = ap.parse_args()
    try:
        import torch  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as e:
        print(f"SKIP: torch/numpy not importable by {sys.executable}: {e}")
        return 77
    if not check_reference_attention():
        print("FAIL: the PyTorch reference's attention disagrees with the naive loop")
        return 1
    tmp = tempfile.mkdtemp(prefix="ein_gpt_ref_")
    try:
        data = os.path.join(tmp, "corpus.txt")
        init = os.path.join(tmp, "init.safetensors")
        make_corpus(data)
        subprocess.run([sys.executable, os.path.join(HERE, "gpt_torch.py"), "--make-init", init,
                        "--seed", "0"] + [f"--{k}={v}" for k, v in CFG.items()], check=True)
        ref = run_torch(tmp, init, data, STEPS, CFG)
        print("torch:", " ".join(f"{x:.6f}" for x in ref))
        try:
            got = run_ein(os.path.abspath(a.ein), os.path.abspath(a.script), tmp, init, data,
                          STEPS, CFG, a.ein_arg)
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            print(f"FAIL: {e}")
            return 1
        print("ein:  ", " ".join(f"{x:.6f}" for x in got))
        if len(got) != STEPS:
            print(f"FAIL: ein logged {len(got)} losses, expected {STEPS}")
            return 1
        if not all(math.isfinite(x) for x in got):
            print("FAIL: ein logged a non-finite loss")
            return 1
        diffs = [abs(e - t) for e, t in zip(got, ref)]
        print(f"max |ein - torch| = {max(diffs):.3g} (step {diffs.index(max(diffs)) + 1}); "
              f"step 1 relative {diffs[0] / abs(ref[0]):.3g}")
        ok = True
        if diffs[0] > TOL_FIRST * abs(ref[0]):
            print(f"FAIL: step 1 (no optimizer yet) differs by {diffs[0]:.3g} > "
                  f"{TOL_FIRST} * {abs(ref[0]):.4f}")
            ok = False
        for i, (d, t) in enumerate(zip(diffs, ref), 1):
            if d > TOL_ALL * max(1.0, abs(t)):
                print(f"FAIL: step {i} differs by {d:.3g} > {TOL_ALL} * max(1, {abs(t):.4f})")
                ok = False
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        if a.keep:
            print("kept", tmp)
        else:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
