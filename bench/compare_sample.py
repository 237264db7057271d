#!/usr/bin/env python3
"""`ein sample` against PyTorch 2 sampling from the same checkpoint as nanoGPT's sample.py does
(bench/sample_torch2.py: eager and torch.compile), side by side in each round; and whether the
two draw the same greedy text. bench/compare_sample.sh makes the virtual environment.

    python3 bench/compare_sample.py --ein build/bin/ein --python VENV/bin/python
        [--rounds 3] [--length 200] [--train-steps 60] [--config "T L H D" ...]
        [--mode window|cache|quantized] [--prompt-bytes 8] [--device cpu|cuda]

--mode window (the default) measures a token that reads a full window: ein sample --no-cache
against nanoGPT's loop, both recomputing the window every token, and ein sample with its
decoder (past the window it recomputes the window too, by its own pass) from the f32
checkpoint and from a q8_0 file (its window's pass reads the matrices' codes). --mode cache measures the
key-value cache: the prompt is the corpus's first --prompt-bytes bytes of text and --length defaults
to what fills the window (T - prompt bytes), so every token fits in it; ein sample (its cache
derived from fn logits) against ein sample --no-cache, nanoGPT's loop (eager, compile) and the
same loop with a key-value cache as a PyTorch user adds one (bench/sample_torch2.py
--kv-cache, eager and compile). --mode quantized draws as --mode cache does, ein from `ein
quantize` files of the checkpoint (q8_0 and q4_0: its decode step reads their codes) against ein
from the f32 checkpoint and PyTorch's loop with the key-value cache (f32, eager and compile).

Per config: `ein train` of examples/gpt/byte_gpt.ein (B=8) for --train-steps steps writes the
checkpoint both sides read; the prompt is the corpus's first T bytes, so every draw reads a
full window of T tokens on both sides (ein always does; nanoGPT's loop crops to the last T).
Each round runs ein, torch eager and torch.compile once each, in an order that rotates per
round, on 2 threads, drawing --length tokens greedily (temperature 0). Tokens/s is one over
the median time of a draw (ein sample's own median, after its first draw, which traces and
compiles; torch's after its first two: torch.compile compiles in both). The
ratios are ein's tokens/s over the other's, per round, and their median. "Same text" counts the
drawn bytes up to the first difference between ein and torch eager (ASCII output compared).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "gpt", "byte_gpt.ein")
CORPUS = os.path.join(ROOT, "examples", "gpt", "corpus.txt")
CONFIGS = ["64 2 4 128", "256 6 8 512"]


def sets(config):
    t, l, h, d = config.split()
    return [x for name, value in zip("TLHDB", (t, l, h, d, "8")) for x in ("--set", f"{name}={value}")]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr}")
    return r


def ein_sample(a, config, ck, prompt, cache):
    r = run([a.ein, "sample", SCRIPT, ck, *sets(config), "--prompt-file", prompt, "--length",
             str(a.length), "--temperature", "0", "--device", a.device] + ([] if cache else ["--no-cache"]))
    m = re.search(r"ein sample: \d+ tokens in [\d.]+ s: ([\d.]+) ms a token \(median.*"
                  r"which took ([\d.]+) s", r.stderr)
    if not m:
        sys.exit(f"no timing line from ein sample:\n{r.stderr}")
    held = re.search(r"([\d.]+ [kMG]?B) of weights held", r.stderr)
    # less print's newline
    return 1e3 / float(m.group(1)), float(m.group(2)), r.stdout[:-1], held and held.group(1)


def torch_sample(a, config, ck, prompt, compiled, cache):
    t, l, h, d = config.split()
    cmd = [a.python, os.path.join(ROOT, "bench", "sample_torch2.py"), ck, "--prompt-file", prompt,
           "--length", str(a.length), "--T", t, "--L", l, "--H", h, "--D", d, "--threads", "2",
           "--device", a.device]
    cmd += (["--compile"] if compiled else []) + (["--kv-cache"] if cache else [])
    out = json.loads(run(cmd).stdout.strip().splitlines()[-1])
    times = out["token_seconds"]
    return 1 / statistics.median(times[2:]), times[0], out["tokens"], None


def same_prefix(ein_text, prompt_len, tokens):
    """Drawn bytes equal on both sides, up to the first difference or non-ASCII byte."""
    ours = ein_text.encode("utf-8", errors="replace")[prompt_len:]
    theirs = bytes(tokens[prompt_len:])
    n = 0
    while n < min(len(ours), len(theirs)) and ours[n] == theirs[n] and ours[n] < 128:
        n += 1
    return n


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ein", required=True)
    p.add_argument("--python", required=True, help="a Python with torch 2 (compare_sample.sh makes one)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--length", type=int, help="tokens to draw (default: 200; --mode cache: T - prompt bytes + 1)")
    p.add_argument("--train-steps", type=int, default=60)
    p.add_argument("--config", action="append", help='"T L H D" (default: the two of CONFIGS)')
    p.add_argument("--mode", choices=["window", "cache", "quantized"], default="window")
    p.add_argument("--prompt-bytes", type=int, default=8, help="--mode cache: the prompt's length")
    p.add_argument("--device", default="cpu", help="where both sides sample: cpu or cuda (the "
                   "checkpoint is trained on the CPU either way)")
    p.add_argument("--rows", action="store_true",
                   help='also print "name | value | unit | how" rows (bench/gpu/run.sh)')
    a = p.parse_args()
    length = a.length
    with tempfile.TemporaryDirectory(prefix="ein_compare_sample_") as tmp:
        for config in a.config or CONFIGS:
            t = int(config.split()[0])
            ck = os.path.join(tmp, config.replace(" ", "_"))
            run([a.ein, "train", SCRIPT, *sets(config), "--steps", str(a.train_steps), "--quiet",
                 "--checkpoint", ck, "--device", "cpu"])
            prompt = os.path.join(tmp, "prompt.txt")
            prompt_len = t if a.mode == "window" else a.prompt_bytes
            if length is None:  # --mode cache/quantized: the last one drawn is never read
                a.length = 200 if a.mode == "window" else t - prompt_len + 1
            with open(CORPUS, "rb") as f, open(prompt, "wb") as out:
                text = f.read()
                # --mode cache: the first words (the licence's title), not its indentation
                out.write(text[:prompt_len] if a.mode == "window" else text.lstrip()[:prompt_len])
            step = os.path.join(ck, f"step_{a.train_steps}.safetensors")
            files = {"ein": step}  # --mode quantized: the checkpoint each ein run reads
            if a.mode == "window":
                names = ["ein --no-cache", "ein", "ein q8_0", "torch eager", "torch compile"]
            elif a.mode == "cache":
                names = ["ein", "ein --no-cache", "torch eager", "torch compile",
                         "torch eager kv-cache", "torch compile kv-cache"]
            else:
                names = ["ein q8_0", "ein q4_0", "ein", "torch eager kv-cache",
                         "torch compile kv-cache"]
            for q in ("q8_0", "q4_0"):
                if f"ein {q}" in names:
                    files[f"ein {q}"] = os.path.join(ck, f"{q}.safetensors")
                    run([a.ein, "quantize", step, "--type", q, "-o", files[f"ein {q}"]])
            runs = {k: [] for k in names}
            firsts = {k: [] for k in runs}
            texts, held = {}, {}
            for r in range(a.rounds):
                k = r % len(names)
                for name in names[k:] + names[:k]:
                    if name.startswith("ein"):
                        rate, first, text, held[name] = ein_sample(
                            a, config, files.get(name, step), prompt, name != "ein --no-cache")
                    else:
                        rate, first, text, _ = torch_sample(a, config, step, prompt,
                                                            "compile" in name, "kv-cache" in name)
                    runs[name].append(rate)
                    firsts[name].append(first)
                    texts[name] = text
            tl, l, h, d = config.split()
            print(f"\n#### T L H D = {tl} {l} {h} {d}: {prompt_len} prompt bytes, {a.length} tokens "
                  f"drawn greedily, {a.rounds} rounds, after {a.train_steps} training steps\n")
            print(f"| run | tokens/s (median of rounds) | first draw s (median) | {names[0]}/this tokens/s per round | median |")
            print("|---|---:|---:|---|---:|")
            for name in names:
                ratios = [e / o for e, o in zip(runs[names[0]], runs[name])]
                print(f"| {name} | {statistics.median(runs[name]):.1f} | "
                      f"{statistics.median(firsts[name]):.3f} | "
                      f"{' '.join(f'{x:.2f}' for x in ratios)} | {statistics.median(ratios):.2f} |")
            if a.rows:  # bench/gpu/run.sh's "name | value | unit | how" rows
                for name in names:
                    ratios = [e / o for e, o in zip(runs[names[0]], runs[name])]
                    print(f"sample {config} {name} | {statistics.median(runs[name]):.1f} | "
                          f"tokens/s | {a.device}; {names[0]}/this {statistics.median(ratios):.2f}")
            for name in names:
                if held.get(name):
                    print(f"\n{name}: {held[name]} of weights held while sampling (its decoder's)")
            for other in names[1:]:
                if other.startswith("torch compile"):
                    continue
                theirs = texts[other]
                if isinstance(theirs, str):  # ein's text, not torch's tokens
                    theirs = list(theirs.encode("utf-8", errors="replace"))
                same = same_prefix(texts[names[0]], prompt_len, theirs)
                print(f"\nsame greedy text as {other}: {same} of {a.length} drawn bytes"
                      f"{'' if same == a.length else ' (then they differ, or a non-ASCII byte)'}")


if __name__ == "__main__":
    main()
