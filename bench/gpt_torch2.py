#!/usr/bin/env python3
"""The byte-level GPT of examples/gpt/byte_gpt.ein as a PyTorch 2 user writes it: nn.Module
blocks, F.scaled_dot_product_attention(is_causal=True), torch.optim.AdamW with clipping, eager
or torch.compile. The training-at-scale issue's reference (bench/compare_torch2.py runs it).

    python bench/gpt_torch2.py [--compile] [--precision fp32|bf16] [--steps 8] [--warmup 3]
        [--V 256 --T 64 --L 2 --H 4 --D 128 --B 16] [--threads 2] [--device cpu|cuda]
        [--fused-adamw]

Prints one JSON line: {"ms_per_step": [...], "losses": [...], "rss_idle": bytes,
"rss_peak": bytes}: each step's wall time (batch + forward + backward + clip + AdamW), the
resident memory after the model, optimizer and first batch exist and before the first step
(the idle baseline), and the process's peak resident memory (ru_maxrss). bf16 runs the
forward and backward under torch.autocast("cpu", torch.bfloat16), as PyTorch's CPU mixed
precision does; on --device cuda, under torch.autocast("cuda", torch.bfloat16), with the
data on the GPU, AdamW fused (as a PyTorch user on a GPU asks for) and each step ending in
loss.item(), which waits for its kernels. --fused-adamw asks for the fused AdamW on the CPU
too (one kernel for all parameters, as on the GPU, instead of a loop over them). The
architecture is ein's stdlib GPT: learned positions, pre-LayerNorm blocks, GELU (tanh) MLP of
width 4D, the LM head tied to the token embedding.
"""
import argparse
import json
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, h)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, v, t, layers, h, d):
        super().__init__()
        self.wte = nn.Embedding(v, d)
        self.wpe = nn.Embedding(t, d)
        self.blocks = nn.ModuleList(Block(d, h) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def logits(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T

    def forward(self, idx, targets):
        logits = self.logits(idx)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def rss_now():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compile", action="store_true")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--fused-adamw", action="store_true", help="the fused AdamW on the CPU too")
    for k, v in dict(V=256, T=64, L=2, H=4, D=128, B=16).items():
        p.add_argument(f"--{k}", type=int, default=v)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = GPT(a.V, a.T, a.L, a.H, a.D).to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=a.device == "cuda" or a.fused_adamw)
    step_fn = torch.compile(model) if a.compile else model
    data = torch.randint(0, a.V, (1 << 20,), dtype=torch.int64, device=a.device)

    def batch():
        starts = torch.randint(0, data.numel() - a.T - 1, (a.B,)).tolist()
        x = torch.stack([data[s:s + a.T] for s in starts])
        y = torch.stack([data[s + 1:s + a.T + 1] for s in starts])
        return x, y

    x, y = batch()
    idle = rss_now()
    ms, losses = [], []
    for _ in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        x, y = batch()
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        ms.append((time.perf_counter() - t0) * 1e3)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = {"ms_per_step": ms[a.warmup:], "losses": losses, "rss_idle": idle, "rss_peak": peak}
    if a.device == "cuda":
        result["gpu_peak"] = torch.cuda.max_memory_allocated()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
