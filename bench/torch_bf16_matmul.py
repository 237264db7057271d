"""torch.matmul of two bf16 matrices (M × K times K × N) on the CPU threads OMP_NUM_THREADS
allows: PyTorch 2.15 from PyPI (its bundled oneDNN 3.13, AMX brgemm), best and median of 20
calls, for BENCHMARKS.md's comparison with Debian's oneDNN 2.6 (bench/matmul_bf16_shapes.c,
which takes M N K, this M K N).

    OMP_NUM_THREADS=2 ~/.cache/ein/torch2-venv/bin/python bench/torch_bf16_matmul.py 2048 2048 512
"""
import torch, time, sys
torch.set_num_threads(2)
M,K,N=[int(x) for x in sys.argv[1:4]]
a=torch.randn(M,K).bfloat16(); b=torch.randn(K,N).bfloat16()
for _ in range(5): c=a@b
ts=[]
for _ in range(20):
    t=time.perf_counter(); c=a@b; ts.append(time.perf_counter()-t)
print("torch", M,K,N, "best %.3f ms %.0f GFLOP/s, median %.3f"%(min(ts)*1e3, 2*M*K*N/min(ts)/1e9, sorted(ts)[10]*1e3))
