#!/usr/bin/env python3
"""Sampling from an ein checkpoint of the byte-level GPT in PyTorch 2, as nanoGPT's sample.py
does it: bench/gpt_torch2.py's nn.Module with the checkpoint's weights, then generate(): the
last T tokens, the logits at the last position divided by the temperature, top-k, a draw
(argmax at temperature 0), under torch.inference_mode(), eager or torch.compile. The PyTorch
side of bench/compare_sample.py.

    python bench/sample_torch2.py CHECKPOINT --prompt-file F --length 200 --T 64 --L 2 --H 4
        --D 128 [--V 256] [--temperature 0] [--top-k 0] [--compile] [--threads 2]

Prints one JSON line: {"tokens": [...], "token_seconds": [...]}: the prompt and the drawn
tokens, and each draw's time (torch.compile compiles in the first and, for the window's new
storage offset, the second).
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "models"))
from gpt_torch2 import GPT  # noqa: E402
from gpt_torch import load_safetensors  # noqa: E402


def load_ein_checkpoint(model, path, layers):
    """ein's names and [in, out] weights (y = x @ W + b) into the nn.Module's [out, in] Linears."""
    tensors, _ = load_safetensors(path)
    p = {k[len("model."):] if k.startswith("model.") else k: v for k, v in tensors.items()}
    linear = {"attn.qkv": "attn.qkv", "attn.proj": "attn.proj", "mlp.fc": "fc", "mlp.proj": "out"}
    state = {"wte.weight": p["wte.weight"], "wpe.weight": p["wpe.weight"],
             "ln_f.weight": p["ln_f.weight"], "ln_f.bias": p["ln_f.bias"]}
    for i in range(layers):
        b = f"blocks.{i}."
        for ln in ("ln1", "ln2"):
            state[b + ln + ".weight"] = p[b + ln + ".weight"]
            state[b + ln + ".bias"] = p[b + ln + ".bias"]
        for ours, theirs in linear.items():
            state[b + theirs + ".weight"] = p[b + ours + ".weight"].t().contiguous()
            state[b + theirs + ".bias"] = p[b + ours + ".bias"]
    model.load_state_dict(state, strict=True)


@torch.inference_mode()
def generate(step, idx, length, T, temperature, top_k, gen):
    times = []
    for _ in range(length):
        t0 = time.perf_counter()
        logits = step(idx[:, -T:])[:, -1, :]
        if temperature == 0:
            nxt = logits.argmax(dim=-1, keepdim=True)
        else:
            logits = logits / temperature
            if top_k:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("inf")
            nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=gen)
        idx = torch.cat((idx, nxt), dim=1)
        times.append(time.perf_counter() - t0)
    return idx, times


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint")
    p.add_argument("--prompt-file", required=True)
    p.add_argument("--length", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    for k, v in dict(V=256, T=64, L=2, H=4, D=128).items():
        p.add_argument(f"--{k}", type=int, default=v)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    model = GPT(a.V, a.T, a.L, a.H, a.D)
    load_ein_checkpoint(model, a.checkpoint, a.L)
    model.eval()
    step = torch.compile(model.logits) if a.compile else model.logits
    with open(a.prompt_file, "rb") as f:
        prompt = list(f.read())
    idx = torch.tensor([prompt], dtype=torch.int64)
    gen = torch.Generator().manual_seed(a.seed)
    out, times = generate(step, idx, a.length, a.T, a.temperature, a.top_k, gen)
    print(json.dumps({"tokens": out[0].tolist(), "token_seconds": times}))


if __name__ == "__main__":
    main()
