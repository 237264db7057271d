#!/usr/bin/env python3
"""Reference byte-level GPT (GPT-2 architecture) in PyTorch, written functionally so that it
matches ein's stdlib GPT by definition: weights are stored [in, out] (y = x @ W + b), the LM
head is tied to wte, parameter names are the safetensors keys ein reads and writes.

    /usr/bin/python3 tests/models/gpt_torch.py --make-init init.safetensors [--seed 0] [config]
    /usr/bin/python3 tests/models/gpt_torch.py --init init.safetensors --data corpus.txt \
        --steps 5 [--order sequential|random] [--json] [--save-final final.safetensors] [config]

config: --V 256 --T --L --H --D --B; optimizer: --lr --beta1 --beta2 --eps --weight-decay
(torch.optim.AdamW over every parameter, no clipping, no schedule). Without --init the model is
initialised in memory with --seed (the same values --make-init writes).

Data: the file's bytes are the tokens (V = 256). Sequential batch k, row r reads window
w = k*B + r at s = w*T (x = data[s:s+T], y = data[s+1:s+T+1]); w wraps modulo the number of
whole windows, (len(data) - 1) // T. Random batches draw starts uniform in [0, len(data) - T - 1]
with torch.randint (seeded by --seed), like CS336's get_batch.

--json prints {"losses": [...], "ms_per_step": [...]} on stdout: the loss of each step (computed
before that step's update, so losses[0] involves no optimizer) and each step's wall time
(batch + forward + backward + AdamW).

--device cuda (default cpu) trains on the GPU: the parameters are initialised (or loaded) on the
CPU as above and moved there, each batch is drawn on the CPU as above and moved there, and the
mask is built there. Each step's time still ends with loss.item(), which waits for the GPU's
queue, so it covers the step's GPU work (the optimizer's kernels included).
"""
import argparse
import json
import math
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- safetensors (f32 only)

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
           "I32": np.int32}


def save_safetensors(path, tensors, metadata=None):
    """tensors: ordered {name: torch.Tensor}; written as F32 in that order."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().to(torch.float32).contiguous().cpu().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # pad so the data starts 8-byte aligned (allowed by the format)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """Returns ({name: torch.Tensor (f32 for F32)}, metadata) in data-offset order."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode())
    meta = header.pop("__metadata__", {}) or {}
    data = raw[8 + n:]
    out = {}
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, end = e["data_offsets"]
        dt = np.dtype(_DTYPES[e["dtype"]]).newbyteorder("<")
        arr = np.frombuffer(data[b:end], dtype=dt).reshape(e["shape"]).copy()
        out[name] = torch.from_numpy(arr.astype(arr.dtype.newbyteorder("=")))
    return out, meta

# ---------------------------------------------------------------- model


def param_shapes(V, T, L, H, D):
    """Ordered (name, shape) of every parameter: the safetensors keys."""
    s = [("wte.weight", [V, D]), ("wpe.weight", [T, D])]
    for i in range(L):
        p = f"blocks.{i}."
        s += [(p + "ln1.weight", [D]), (p + "ln1.bias", [D]),
              (p + "attn.qkv.weight", [D, 3 * D]), (p + "attn.qkv.bias", [3 * D]),
              (p + "attn.proj.weight", [D, D]), (p + "attn.proj.bias", [D]),
              (p + "ln2.weight", [D]), (p + "ln2.bias", [D]),
              (p + "mlp.fc.weight", [D, 4 * D]), (p + "mlp.fc.bias", [4 * D]),
              (p + "mlp.proj.weight", [4 * D, D]), (p + "mlp.proj.bias", [D])]
    s += [("ln_f.weight", [D]), ("ln_f.bias", [D])]
    return s


def init_params(V, T, L, H, D, seed=0):
    """GPT-2 init: N(0, 0.02) for wte, wpe, qkv, fc; N(0, 0.02/sqrt(2L)) for attn.proj and
    mlp.proj weights; zero biases; LayerNorm weight 1, bias 0. Deterministic for a seed."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in param_shapes(V, T, L, H, D):
        if name.endswith(".bias"):
            t = torch.zeros(shape)
        elif ".ln" in name or name.startswith("ln_f"):
            t = torch.ones(shape)
        else:
            std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
            t = torch.randn(shape, generator=g) * std
        out[name] = t.to(torch.float32)
    return out


def gelu_tanh(x):
    try:
        return F.gelu(x, approximate="tanh")
    except TypeError:  # torch < 1.12
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def attention(x, p, pre, H):
    B, T, D = x.shape
    hd = D // H
    qkv = x @ p[pre + "qkv.weight"] + p[pre + "qkv.bias"]          # [B, T, 3D]
    qkv = qkv.view(B, T, 3, H, hd).permute(2, 0, 3, 1, 4)          # b t (three h d) -> three b h t d
    q, k, v = qkv[0], qkv[1], qkv[2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)                # [B, H, T, T]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
    att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, D)                 # b h t d -> b t (h d)
    return y @ p[pre + "proj.weight"] + p[pre + "proj.bias"]


def mlp(x, p, pre):
    h = gelu_tanh(x @ p[pre + "fc.weight"] + p[pre + "fc.bias"])
    return h @ p[pre + "proj.weight"] + p[pre + "proj.bias"]


def forward(p, idx, L, H):
    """idx: int64 [B, T'] with T' <= T; returns logits [B, T', V]."""
    Tp = idx.shape[1]
    x = p["wte.weight"][idx] + p["wpe.weight"][:Tp]
    for i in range(L):
        b = f"blocks.{i}."
        x = x + attention(layer_norm(x, p[b + "ln1.weight"], p[b + "ln1.bias"]), p, b + "attn.", H)
        x = x + mlp(layer_norm(x, p[b + "ln2.weight"], p[b + "ln2.bias"]), p, b + "mlp.")
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
    return x @ p["wte.weight"].t()


def loss_fn(p, x, y, L, H):
    logits = forward(p, x, L, H)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

# ---------------------------------------------------------------- data


def read_bytes(path):
    with open(path, "rb") as f:
        return torch.from_numpy(np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64))


def sequential_batch(data, k, B, T):
    n_windows = (len(data) - 1) // T
    if n_windows < 1:
        raise SystemExit(f"data has {len(data)} bytes; need at least T + 1 = {T + 1}")
    xs, ys = [], []
    for r in range(B):
        s = ((k * B + r) % n_windows) * T
        xs.append(data[s:s + T])
        ys.append(data[s + 1:s + T + 1])
    return torch.stack(xs), torch.stack(ys)


def random_batch(data, B, T, gen):
    starts = torch.randint(len(data) - T, (B,), generator=gen)    # uniform in [0, len - T - 1]
    x = torch.stack([data[s:s + T] for s in starts.tolist()])
    y = torch.stack([data[s + 1:s + T + 1] for s in starts.tolist()])
    return x, y

# ---------------------------------------------------------------- training


def train(params, data, cfg, steps, lr, betas, eps, wd, order="sequential", seed=0,
          device="cpu"):
    """Trains params (dict of leaf tensors, updated in place) on `device`; returns (losses,
    ms_per_step). Batches are drawn on the CPU (the same draws on every device) and moved."""
    ps = {k: v.detach().clone().to(device).requires_grad_(True) for k, v in params.items()}
    opt = torch.optim.AdamW(list(ps.values()), lr=lr, betas=betas, eps=eps, weight_decay=wd)
    gen = torch.Generator().manual_seed(seed)
    losses, ms = [], []
    for k in range(steps):
        t0 = time.perf_counter()
        if order == "sequential":
            x, y = sequential_batch(data, k, cfg["B"], cfg["T"])
        else:
            x, y = random_batch(data, cfg["B"], cfg["T"], gen)
        x, y = x.to(device), y.to(device)  # no copy on the CPU
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ps, x, y, cfg["L"], cfg["H"])
        loss.backward()
        opt.step()
        lv = loss.item()  # on a GPU this waits for the step's queued kernels
        ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(lv)
    for k in params:
        params[k] = ps[k].detach()
    return losses, ms


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in (("V", 256), ("T", 32), ("L", 2), ("H", 2), ("D", 32), ("B", 4)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--seed", type=int, default=0, help="init seed (and random-batch seed)")
    ap.add_argument("--make-init", metavar="FILE", help="write the seeded init and exit")
    ap.add_argument("--init", metavar="FILE", help="load the parameters from a safetensors file")
    ap.add_argument("--data", metavar="FILE")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--order", choices=("sequential", "random"), default="sequential")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where the parameters, batches and training step live")
    ap.add_argument("--json", action="store_true", help='print {"losses", "ms_per_step"} as JSON')
    ap.add_argument("--save-final", metavar="FILE", help="write the trained weights")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.D % a.H:
        ap.error(f"D={a.D} is not a multiple of H={a.H}")
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error(f"--device cuda: this torch {torch.__version__} sees no CUDA device")
    cfg = dict(V=a.V, T=a.T, L=a.L, H=a.H, D=a.D, B=a.B)
    shapes = param_shapes(a.V, a.T, a.L, a.H, a.D)

    if a.make_init:
        p = init_params(a.V, a.T, a.L, a.H, a.D, a.seed)
        save_safetensors(a.make_init, p, {"V": a.V, "T": a.T, "L": a.L, "H": a.H, "D": a.D,
                                          "seed": a.seed})
        if not a.steps:
            return 0
    if a.init:
        p, _ = load_safetensors(a.init)
        want = {n: s for n, s in shapes}
        if set(p) != set(want):
            missing, extra = sorted(set(want) - set(p)), sorted(set(p) - set(want))
            ap.error(f"{a.init}: missing {missing[:5]} extra {extra[:5]}")
        for n, s in shapes:
            if list(p[n].shape) != s:
                ap.error(f"{a.init}: {n} has shape {list(p[n].shape)}, expected {s}")
        p = {n: p[n].to(torch.float32) for n, _ in shapes}
    else:
        p = init_params(a.V, a.T, a.L, a.H, a.D, a.seed)

    losses, ms = [], []
    if a.steps:
        if not a.data:
            ap.error("--steps needs --data")
        data = read_bytes(a.data)
        if a.V < 256 and int(data.max()) >= a.V:
            ap.error(f"data has byte {int(data.max())} >= V={a.V}")
        losses, ms = train(p, data, cfg, a.steps, a.lr, (a.beta1, a.beta2), a.eps,
                           a.weight_decay, a.order, a.seed, a.device)
    if a.save_final:
        save_safetensors(a.save_final, p)
    if a.json:
        print(json.dumps({"losses": losses, "ms_per_step": ms}))
    else:
        for i, (l, t) in enumerate(zip(losses, ms), 1):
            print(f"step {i}: loss {l:.6f} ({t:.2f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
