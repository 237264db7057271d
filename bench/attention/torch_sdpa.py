"""PyTorch 2's scaled_dot_product_attention(is_causal=True), forward + backward, as a PyTorch
user writes it: median ms per forward+backward and the allocator-free peak RSS growth is not
comparable, so only time is reported. One JSON line. Used by bench/attention/compare.sh."""
import argparse, json, time
import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--shape", nargs=4, type=int, default=[4, 8, 1024, 64])
p.add_argument("--rounds", type=int, default=5)
p.add_argument("--threads", type=int, default=2)
a = p.parse_args()
torch.set_num_threads(a.threads)
g = torch.Generator().manual_seed(0)
q, k, v, dy = (torch.randn(*a.shape, generator=g) for _ in range(4))
ms = []
for r in range(a.rounds + 1):
    qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
    start = time.perf_counter()
    y = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
    y.backward(dy)
    elapsed = (time.perf_counter() - start) * 1e3
    if r > 0:
        ms.append(elapsed)
print(json.dumps({"variant": f"torch {torch.__version__} sdpa", "median_ms": sorted(ms)[len(ms) // 2],
                  "ms": [round(x, 3) for x in ms]}))
