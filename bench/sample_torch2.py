#!/usr/bin/env python3
"""Sampling from an ein checkpoint of the byte-level GPT in PyTorch 2, as nanoGPT's sample.py
does it: bench/gpt_torch2.py's nn.Module with the checkpoint's weights, then generate(): the
last T tokens, the logits at the last position divided by the temperature, top-k, a draw
(argmax at temperature 0), under torch.inference_mode(), eager or torch.compile. The PyTorch
side of bench/compare_sample.py.

    python bench/sample_torch2.py CHECKPOINT --prompt-file F --length 200 --T 64 --L 2 --H 4
        --D 128 [--V 256] [--temperature 0] [--top-k 0] [--compile] [--threads 2]
        [--kv-cache] [--device cpu|cuda]

With --kv-cache, as a PyTorch user adds a key-value cache to that loop (gpt-fast's static
cache: per layer k and v buffers of T rows, the new token's row written with index_copy_, SDPA
over all T rows with the causal mask's row of the position, so every step has the same shapes
and torch.compile compiles once): the prompt goes through one token at a time, then each drawn
token; it holds T tokens at most.

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


class KVCache:
    """The GPT's logits one token at a time from static key-value buffers (see above)."""

    def __init__(self, model, T, H):
        self.m, self.T, self.H = model, T, H
        d, dev = model.wte.weight.shape[1], model.wte.weight.device
        self.k = [torch.zeros(1, H, T, d // H, device=dev) for _ in model.blocks]
        self.v = [torch.zeros(1, H, T, d // H, device=dev) for _ in model.blocks]
        self.mask = torch.ones(T, T, dtype=torch.bool, device=dev).tril()

    def step(self, token, pos):
        """Logits (1, V) after `token` (1, 1) at position `pos` (a 1-element int64 tensor)."""
        m, H = self.m, self.H
        x = m.wte(token) + m.wpe(pos)
        d = x.shape[-1]
        mask = self.mask[pos].view(1, 1, 1, self.T)
        for i, block in enumerate(m.blocks):
            q, k, v = block.attn.qkv(block.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(1, 1, H, d // H).transpose(1, 2) for z in (q, k, v))
            self.k[i].index_copy_(2, pos, k)
            self.v[i].index_copy_(2, pos, v)
            y = F.scaled_dot_product_attention(q, self.k[i], self.v[i], attn_mask=mask)
            x = x + block.attn.proj(y.transpose(1, 2).reshape(1, 1, d))
            x = x + block.out(F.gelu(block.fc(block.ln2(x)), approximate="tanh"))
        return (m.ln_f(x) @ m.wte.weight.T)[:, -1, :]


def draw(logits, temperature, top_k, gen):
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k:
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits[logits < v[:, [-1]]] = -float("inf")
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=gen)


def sync(device):
    """Waits for the GPU's queue, so that a token's time is its computation's, not its launch's."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def generate_cached(cache, step, idx, length, temperature, top_k, gen):
    times = []
    fed = 0
    for _ in range(length):
        t0 = time.perf_counter()
        while fed < idx.shape[1]:
            logits = step(idx[:, fed:fed + 1], torch.tensor([fed], device=idx.device))
            fed += 1
        idx = torch.cat((idx, draw(logits, temperature, top_k, gen)), dim=1)
        sync(idx.device)
        times.append(time.perf_counter() - t0)
    return idx, times


@torch.inference_mode()
def generate(step, idx, length, T, temperature, top_k, gen):
    times = []
    for _ in range(length):
        t0 = time.perf_counter()
        logits = step(idx[:, -T:])[:, -1, :]
        idx = torch.cat((idx, draw(logits, temperature, top_k, gen)), dim=1)
        sync(idx.device)
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
    p.add_argument("--kv-cache", action="store_true", help="a static key-value cache (above)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (each token's time then waits "
                   "for the GPU)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    for k, v in dict(V=256, T=64, L=2, H=4, D=128).items():
        p.add_argument(f"--{k}", type=int, default=v)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    model = GPT(a.V, a.T, a.L, a.H, a.D)
    load_ein_checkpoint(model, a.checkpoint, a.L)
    device = torch.device(a.device)
    model.to(device).eval()
    with open(a.prompt_file, "rb") as f:
        prompt = list(f.read())
    idx = torch.tensor([prompt], dtype=torch.int64, device=device)
    gen = torch.Generator(device=device).manual_seed(a.seed)
    if a.kv_cache:
        if len(prompt) + a.length - 1 > a.T:
            sys.exit(f"--kv-cache holds {a.T} tokens: the prompt and --length take more")
        cache = KVCache(model, a.T, a.H)
        step = torch.compile(cache.step) if a.compile else cache.step
        out, times = generate_cached(cache, step, idx, a.length, a.temperature, a.top_k, gen)
    else:
        step = torch.compile(model.logits) if a.compile else model.logits
        out, times = generate(step, idx, a.length, a.T, a.temperature, a.top_k, gen)
    print(json.dumps({"tokens": out[0].tolist(), "token_seconds": times}))


if __name__ == "__main__":
    main()
