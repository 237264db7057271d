// The fused attention kernels alone (exec/attention.h), forward + backward of b h t e causal
// attention with bf16 q, k, v as a --precision bf16 step gives them (views of [b, t, (h e)]): on
// bf16 tile products (exec/attention_amx.h: AMX tiles, or AVX512-BF16 where there is no AMX;
// the variant is still called "amx", and the "tiles" field says which ran) and on the f32
// kernels that widen the operands (force_no_amx_tiles), the two alternating round by round;
// and f32 operands for reference. On a GPU (bench/gpu/run.sh): `cuda`, the bf16 operands on
// cuda:0 (the default tensor-core kernels, attention_cuda_mma.h: WMMA), `cuda-ptx`, the same
// with EIN_CUDA_ATTENTION=ptx (the kernels through PTX's mma.sync), `cuda-wgmma`, with
// EIN_CUDA_ATTENTION=wgmma (the kernels through sm_90a's wgmma), and `cuda-simt`, with
// EIN_CUDA_ATTENTION=simt (the scalar kernels). One JSON line per variant: median ms per
// forward + backward, every round, and the causal-useful TFLOP/s (2·b·h·t·t·e for a forward,
// 2.5 times that for a forward + backward). A variant with the suffix ":forward"
// (amx:forward, cuda:forward) times the forward alone. Each GPU variant's last result (the
// packed forward and, unless ":forward", the gradients) is compared with the scalar CUDA
// kernels' on the same bf16 operands, computed once before the timing: "max_diff" is the
// largest |difference| / (largest |reference element|) over both, so that a kernel that is fast
// but wrong on the hardware shows (bf16 rounding of P and dS gives ~1e-3 to 1e-2). "kernels"
// is the set a GPU variant ran (cuda_attention_kernel_set: wmma, ptx, wgmma or simt), so that
// one that fell back to another set (no mma.h for WMMA, no sm_90a for wgmma) says so.
//   ein_attention_kernel_timings B H T E [rounds = 5] [variants: amx,widened,f32]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <ein/ein.h>
#include <fmt/format.h>

#include "exec/amx_tiles.h"
#include "exec/attention.h"
#include "exec/attention_cuda.h"

int main(int argc, char** argv) {
  using namespace ein;
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s B H T E [rounds] [amx,widened,f32]\n", argv[0]);
    return 2;
  }
  const int64_t b = std::atoll(argv[1]), h = std::atoll(argv[2]), t = std::atoll(argv[3]),
                e = std::atoll(argv[4]);
  const int rounds = argc > 5 ? std::atoi(argv[5]) : 5;
  std::vector<std::string> variants;
  std::stringstream list(argc > 6 ? argv[6] : "amx,widened,f32");
  for (std::string v; std::getline(list, v, ',');) {
    const std::string kind = v.substr(0, v.find(':'));
    if (kind != "amx" && kind != "widened" && kind != "f32" && kind != "cuda" &&
        kind != "cuda-ptx" && kind != "cuda-wgmma" && kind != "cuda-simt") {
      std::fprintf(stderr, "unknown variant %s (amx, widened, f32, cuda, cuda-ptx, cuda-wgmma, "
                           "cuda-simt, each with an optional :forward)\n", v.c_str());
      return 2;
    }
    variants.push_back(v);
  }
  // q, k and v as a GPT's projections give them: [b, t, (h e)] read as [b, h, t, e].
  const auto heads = [&](uint64_t seed) {
    return randn({b, t, h, e}, DType::f32, cpu(), seed).permute({0, 2, 1, 3});
  };
  const Tensor q = heads(1), k = heads(2), v = heads(3), d = randn({b, h, t, e + 1}, DType::f32, cpu(), 4);
  std::vector<float> causal(static_cast<size_t>(t * t));
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j)
      causal[i * t + j] = j > i ? -std::numeric_limits<float>::infinity() : 0.0f;
  const Tensor mask = from_data(causal, {t, t}).as_strided({b, h, t, t}, {0, 0, t, 1}, 0);
  const double scale = 1 / std::sqrt(static_cast<double>(e));
  const Tensor qb = q.to(DType::bf16), kb = k.to(DType::bf16), vb = v.to(DType::bf16);
  bool on_gpu = false;
  for (const std::string& name : variants) on_gpu = on_gpu || name.starts_with("cuda");
  Tensor qg, kg, vg, dg, mask_g;
  if (on_gpu) {
    qg = qb.to(cuda()), kg = kb.to(cuda()), vg = vb.to(cuda()), dg = d.to(cuda());
    mask_g = from_data(causal, {t, t}).to(cuda()).as_strided({b, h, t, t}, {0, 0, t, 1}, 0);
  }
  // The scalar kernels' result, the reference of the GPU variants' values.
  Tensor ref_out, ref_grads;
  if (on_gpu) {
    setenv("EIN_CUDA_ATTENTION", "simt", 1);
    ref_out = attention_forward(qg, kg, vg, mask_g, scale, DType::f32);
    ref_grads = attention_backward(qg, kg, vg, mask_g, ref_out, dg, scale, DType::f32);
  }
  const auto max_diff = [](const Tensor& got, const Tensor& want) {
    const std::vector<float> x = got.to(cpu()).to_vector<float>(),
                             y = want.to(cpu()).to_vector<float>();
    double most = 0, size = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isfinite(y[i])) size = std::max(size, std::abs(static_cast<double>(y[i])));
      const double diff = std::abs(static_cast<double>(x[i]) - y[i]);
      // inf - inf (a -inf logsumexp on both sides) is no difference; NaN is the largest
      if (x[i] != y[i]) most = std::isnan(diff) ? std::numeric_limits<double>::infinity()
                                                : std::max(most, diff);
    }
    return size > 0 ? most / size : most;
  };
  std::map<std::string, double> diffs;
  std::map<std::string, std::string> kernel_sets;  // per GPU variant: the set that ran
  std::map<std::string, std::vector<double>> ms;
  for (int round = 0; round < rounds + 1; ++round)  // round 0 warms up
    for (const std::string& variant : variants) {
      const std::string kind = variant.substr(0, variant.find(':'));
      const bool f32 = kind == "f32", forward_only = variant.ends_with(":forward");
      const bool gpu = kind.starts_with("cuda");
      force_no_amx_tiles(kind == "widened");
      if (gpu)
        setenv("EIN_CUDA_ATTENTION",
               kind == "cuda" ? "" : kind.substr(5).c_str(), 1);  // cuda-ptx: "ptx", ...
      const Tensor &qq = gpu ? qg : f32 ? q : qb, &kk = gpu ? kg : f32 ? k : kb,
                   &vv = gpu ? vg : f32 ? v : vb, &dd = gpu ? dg : d, &mm = gpu ? mask_g : mask;
      if (gpu) {
        synchronize();
        kernel_sets[variant] = cuda_attention_kernel_set(qq, kk, vv, DType::f32);
      }
      const auto start = std::chrono::steady_clock::now();
      const Tensor out = attention_forward(qq, kk, vv, mm, scale, DType::f32);
      Tensor grads;
      if (!forward_only) grads = attention_backward(qq, kk, vv, mm, out, dd, scale, DType::f32);
      if (gpu) synchronize();
      const double spent =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (round > 0) ms[variant].push_back(spent);
      if (gpu && round == rounds)
        diffs[variant] = std::max(max_diff(out, ref_out),
                                  forward_only ? 0.0 : max_diff(grads, ref_grads));
    }
  force_no_amx_tiles(false);
  for (const std::string& variant : variants) {
    std::vector<double> sorted = ms[variant];
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    const double flops = 2.0 * static_cast<double>(b * h * t * t * e) *
                         (variant.ends_with(":forward") ? 1.0 : 2.5);
    const char* tiles = amx_tiles() ? "amx" : bf16_tiles() ? "avx512-bf16" : "none";
    // (Python's json reads Infinity, which a NaN in the results becomes)
    const std::string set = kernel_sets.contains(variant)
                                ? fmt::format(R"(, "kernels": "{}")", kernel_sets[variant])
                                : "";
    const std::string diff =
        !diffs.contains(variant) ? ""
        : std::isfinite(diffs[variant]) ? fmt::format(R"(, "max_diff": {:.3g})", diffs[variant])
                                        : R"(, "max_diff": Infinity)";
    fmt::print(R"({{"variant": "{}", "tiles": "{}", "b": {}, "h": {}, "t": {}, "e": {}, )"
               R"("median_ms": {:.3f}, "rounds_ms": [{:.3f}], "useful_tflops": {:.3f}{}{}}})"
               "\n",
               variant, tiles, b, h, t, e, median, fmt::join(ms[variant], ", "),
               flops / (median * 1e9), set, diff);
  }
}
