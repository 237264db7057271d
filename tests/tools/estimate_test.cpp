// The napkin math of `ein estimate` (tools/estimate.h, include/ein/hardware.h) against the
// lecture's scenarios and every napkin-math row of accounting_cases.tsv. Rows that need a
// model graph (op_*, params_*, whole-model FLOP counts) belong to `ein report` and are listed
// as skipped, with the reason, so that a new row in the file forces a decision here.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "conformance/tsv.h"
#include "ein/errors.h"
#include <ein/hardware.h>
#include "tools/estimate.h"

namespace ein::napkin {
namespace {

double bf16_peak(const char* hw) {
  return hardware(hw).peak(MathMode::bf16);
}

// `expected` as printed with `digits` significant figures: |got - expected| within half a
// unit in the last printed place.
void expect_rounds_to(double got, double expected, double half_unit) {
  EXPECT_LE(std::fabs(got - expected), half_unit) << "got " << got << ", expected " << expected;
}

// ---- hardware ----

TEST(Hardware, DensePeaksNeverSparsity) {
  // hw_h100_bf16_dense: 1979 with sparsity / 2.
  EXPECT_EQ(bf16_peak("h100"), 989.5e12);
  EXPECT_EQ(bf16_peak("h100"), 1979e12 / 2);
  // hw_a100_bf16
  EXPECT_EQ(bf16_peak("a100"), 312e12);
  // torchtitan uses 756e12 for the PCIe part; the datasheet's 1,513 / 2 is 756.5e12.
  expect_rounds_to(bf16_peak("h100-pcie"), 756e12, 0.5e12);
  EXPECT_EQ(bf16_peak("h200"), bf16_peak("h100"));
}

TEST(Hardware, Fp32Peaks) {
  // hw_fp32_peaks: 19.5e12 / 67.5e12 (CS336); NVIDIA's H100 SXM datasheet prints 67 TFLOPS.
  EXPECT_EQ(hardware("a100").peak(MathMode::fp32), 19.5e12);
  EXPECT_NEAR(hardware("h100").peak(MathMode::fp32), 67.5e12, 0.01 * 67.5e12);
}

TEST(Hardware, MemoryAndBandwidth) {
  EXPECT_EQ(hardware("h100").memory_bytes, 80e9);
  EXPECT_EQ(hardware("h200").memory_bytes, 141e9);
  EXPECT_EQ(hardware("h100").memory_bandwidth, 3.35e12);
  EXPECT_EQ(hardware("a100").memory_bandwidth, 2039e9);
  EXPECT_EQ(hardware("a100").peak(MathMode::fp8), 0);  // Ampere has no FP8 tensor cores
}

TEST(Hardware, AliasesAndUnknownNames) {
  EXPECT_EQ(&hardware("h100"), &hardware("H100 SXM"));
  EXPECT_EQ(&hardware("H100_SXM5"), &hardware("h100-sxm"));
  EXPECT_EQ(hardware("a100").name, "A100 SXM 80GB");
  EXPECT_EQ(hardware("h100-pcie").name, "H100 PCIe");
  EXPECT_EQ(find_hardware("v100"), nullptr);
  try {
    hardware("v100");
    FAIL() << "expected RuntimeError";
  } catch (const RuntimeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("unknown hardware 'v100'"), std::string::npos) << what;
    for (const char* name : {"a100", "h100", "h100-pcie", "h200"})
      EXPECT_NE(what.find(name), std::string::npos) << what;
  }
}

TEST(Hardware, MathModeNames) {
  EXPECT_EQ(parse_math_mode("bfloat16"), MathMode::bf16);
  EXPECT_EQ(parse_math_mode("f32"), MathMode::fp32);
  EXPECT_EQ(parse_math_mode("int4"), std::nullopt);
  for (int i = 0; i < kMathModeCount; ++i)
    EXPECT_EQ(parse_math_mode(math_mode_name(static_cast<MathMode>(i))), static_cast<MathMode>(i));
}

// ---- the lecture ----

TEST(Lecture, SeventyBOnFifteenTOn1024H100) {
  // cs336_70b_15T_1024h100: 143.93 days exactly; the lecture prints ~146.
  const TimeEstimate t = estimate_time(70e9, 15e12, 1024, bf16_peak("h100"), 0.5);
  EXPECT_EQ(t.total_flops, 6.3e24);
  expect_rounds_to(t.days, 143.93, 0.005);
  EXPECT_DOUBLE_EQ(t.gpu_hours, 1024 * t.seconds / 3600);
  // The lecture's path: 990e12 x 0.5 ~ 5e14 per GPU, 1024 x 5e14 ~ 5e17, 6.3e24 / 5e17 s.
  const double lecture_days = 6.3e24 / 5e17 / kSecondsPerDay;
  expect_rounds_to(lecture_days, 146, 0.5);
  // The gap is the lecture's rounding of the sustained rate (5.066e17 -> 5e17), nothing else.
  EXPECT_DOUBLE_EQ(lecture_days / t.days, t.sustained / 5e17);
}

TEST(Lecture, LargestModelOn8H100Fp32AdamW) {
  // cs336_max_params_8h100_fp32_adamw: 8 x 80e9 / 16 = 40e9.
  const ParamMemory m = param_memory(Optimizer::adamw, Precision::fp32);
  EXPECT_EQ(m.bytes_per_param(), 16);
  EXPECT_EQ(m.bytes_per_param(StatePart::params), 4);
  EXPECT_EQ(m.bytes_per_param(StatePart::grads), 4);
  EXPECT_EQ(m.bytes_per_param(StatePart::optimizer), 8);
  EXPECT_EQ(max_params(8 * hardware("h100").memory_bytes, m), 40e9);
}

TEST(Lecture, EightBMixedPrecisionBreakdown) {
  // multi-GPU notes: bf16 params 16 GB, fp32 master 32 GB, Adam m+v 64 GB, fp32 grads 32 GB.
  const ParamMemory m = param_memory(Optimizer::adamw, Precision::mixed);
  ASSERT_EQ(m.items.size(), 4u);
  EXPECT_EQ(m.items[0].bytes_per_param * 8e9, 16e9);  // parameters (bf16)
  EXPECT_EQ(m.items[1].bytes_per_param * 8e9, 32e9);  // fp32 master
  EXPECT_EQ(m.items[2].bytes_per_param * 8e9, 32e9);  // gradients (fp32)
  EXPECT_EQ(m.items[3].bytes_per_param * 8e9, 64e9);  // m and v
  EXPECT_EQ(m.bytes_per_param() * 8e9, 144e9);
}

TEST(Lecture, OptimizersByState) {
  EXPECT_EQ(param_memory(Optimizer::sgd, Precision::fp32).bytes_per_param(), 8);
  EXPECT_EQ(param_memory(Optimizer::momentum, Precision::fp32).bytes_per_param(), 12);
  EXPECT_EQ(param_memory(Optimizer::adam, Precision::fp32).bytes_per_param(), 16);
  EXPECT_EQ(parse_optimizer("adamw"), Optimizer::adamw);
  EXPECT_EQ(parse_optimizer("rmsprop"), std::nullopt);
  EXPECT_EQ(parse_precision("mixed-bf16-grads"), Precision::mixed_bf16_grads);
  EXPECT_EQ(parse_precision("fp16"), std::nullopt);
}

// ---- accounting_cases.tsv, napkin-math rows (named after their case) ----

TEST(AccountingCases, cs336_8h100_2weeks) {
  const double week = 7 * kSecondsPerDay;
  expect_rounds_to(8 * bf16_peak("h100") * 2 * week, 9.575e21, 0.0005e21);
  expect_rounds_to(8 * bf16_peak("h100") * week, 4.79e21, 0.005e21);  // the 2025 version
}

TEST(AccountingCases, cs336_max_params_8h100_bf16_adamw) {
  const ParamMemory m = param_memory(Optimizer::adamw, Precision::bf16);
  EXPECT_EQ(m.bytes_per_param(), 12);
  expect_rounds_to(max_params(8 * 80e9, m), 5.33e10, 0.005e10);
}

TEST(AccountingCases, gpt3_train_compute) {
  const double flops = training_flops(175e9, 300e9);
  expect_rounds_to(flops, 3.15e23, 0.005e23);
  EXPECT_NEAR(flops, 3.14e23, 0.005 * 3.14e23);  // the paper's 3640 PF-days, within 0.5%
  EXPECT_NEAR(flops / 1e15 / kSecondsPerDay, 3640, 0.005 * 3640);
}

TEST(AccountingCases, gpt3_palm_flops_per_token) {
  expect_rounds_to(palm_flops_per_token(175e9, 96, 96, 128, 2048), 1.079e12, 0.0005e12);
}

TEST(AccountingCases, llama2_7b_flops_per_token_conventions) {
  // The 6N and PaLM entries; the Megatron ones need the layer structure (ein report).
  const double n = 6738415616;
  const double n_nonembed = n - 32000.0 * 4096;  // input embedding only; lm_head counted
  expect_rounds_to(6 * n, 4.043e10, 0.0005e10);
  expect_rounds_to(6 * n_nonembed, 3.964e10, 0.0005e10);
  expect_rounds_to(palm_flops_per_token(n_nonembed, 32, 32, 128, 4096), 4.609e10, 0.0005e10);
}

TEST(AccountingCases, chinchilla_tokens_per_param) {
  EXPECT_EQ(kChinchillaTokensPerParam, 20);
  EXPECT_EQ(1.4e12 / 70e9, kChinchillaTokensPerParam);  // Chinchilla itself: 70B on 1.4T
}

TEST(AccountingCases, chinchilla_70b_budget) {
  expect_rounds_to(training_flops(70e9, 1.4e12), 5.88e23, 0.005e23);
}

TEST(AccountingCases, chinchilla_table3_10B) {
  expect_rounds_to(training_flops(10e9, 205.1e9), 1.23e22, 0.005e22);
}

TEST(AccountingCases, days_nanogpt_6ND) {
  const TimeEstimate t = estimate_time(124337664, 300e9, 8, bf16_peak("a100"), 0.30);
  expect_rounds_to(t.days, 3.46, 0.005);
}

TEST(AccountingCases, mfu_nanogpt_a100) {
  const double achieved = 874944921600.0 * 100 / 0.755;
  expect_rounds_to(model_flops_utilization(achieved, 1, bf16_peak("a100")), 0.3714, 0.00005);
}

TEST(AccountingCases, mfu_palm_540b) {
  const double per_token = palm_flops_per_token(540.35e9, 118, 48, 256, 2048);
  const double mfu = model_flops_utilization(238.3e3 * per_token, 6144, 275e12);  // TPU v4
  expect_rounds_to(mfu, 0.4623, 0.00005);
  expect_rounds_to(mfu, 0.462, 0.0005);
}

TEST(AccountingCases, narayanan_1T_throughput) {
  const double per_gpu = 502e15 / 3072;
  expect_rounds_to(per_gpu, 163e12, 0.5e12);
  expect_rounds_to(model_flops_utilization(502e15, 3072, bf16_peak("a100")), 0.52, 0.005);
}

// ZeRO Table 1 uses the K = 12 convention: fp16 params and grads, fp32 master, m and v.
const ParamMemory kZeroConvention = param_memory(Optimizer::adam, Precision::mixed_bf16_grads);

TEST(AccountingCases, mem_zero_table_nd4) {
  EXPECT_EQ(kZeroConvention.bytes_per_param(StatePart::optimizer), 12);  // K
  EXPECT_DOUBLE_EQ(zero_memory(kZeroConvention, 7.5e9, 4, 0).total, 120e9);
  EXPECT_DOUBLE_EQ(zero_memory(kZeroConvention, 7.5e9, 4, 1).total, 52.5e9);
  EXPECT_DOUBLE_EQ(zero_memory(kZeroConvention, 7.5e9, 4, 2).total, 41.25e9);
  EXPECT_DOUBLE_EQ(zero_memory(kZeroConvention, 7.5e9, 4, 3).total, 30.0e9);
}

TEST(AccountingCases, mem_zero_table_nd1024) {
  expect_rounds_to(zero_memory(kZeroConvention, 7.5e9, 1024, 1).total, 30.09e9, 0.005e9);
  expect_rounds_to(zero_memory(kZeroConvention, 7.5e9, 1024, 2).total, 15.10e9, 0.005e9);
  expect_rounds_to(zero_memory(kZeroConvention, 7.5e9, 1024, 3).total, 0.117e9, 0.0005e9);
  const ZeroMemory z = zero_memory(kZeroConvention, 7.5e9, 1024, 2);
  EXPECT_DOUBLE_EQ(z.params, 15e9);  // stage 2 keeps the fp16 params whole
  EXPECT_DOUBLE_EQ(z.grads + z.optimizer, 14 * 7.5e9 / 1024);
}

TEST(AccountingCases, mem_zero_gpt2_1p5b_states) {
  EXPECT_DOUBLE_EQ(kZeroConvention.bytes_per_param() * 1.5e9, 24e9);
  EXPECT_DOUBLE_EQ(kZeroConvention.bytes_per_param(StatePart::params) * 1.5e9, 3e9);
}

TEST(AccountingCases, mem_8b_mixed_precision) {
  // 16 + 16 + 32 + 64 = 128 GB with bf16 grads; the lecture's notes keep fp32 grads: 144 GB.
  EXPECT_DOUBLE_EQ(kZeroConvention.bytes_per_param() * 8e9, 128e9);
  EXPECT_DOUBLE_EQ(kZeroConvention.bytes_per_param(StatePart::grads) * 8e9, 16e9);
}

TEST(AccountingCases, mem_megatron_bytes_per_param) {
  // bf16 weights + fp32 grads + fp32 master + m + v = 18; the distributed optimizer is ZeRO-1.
  const ParamMemory m = param_memory(Optimizer::adam, Precision::mixed);
  EXPECT_EQ(m.bytes_per_param(), 18);
  EXPECT_DOUBLE_EQ(zero_memory(m, 1, 8, 1).total, 7.5);
}

TEST(AccountingCases, mem_deepspeed_zero2_estimate) {
  // DeepSpeed's estimate, 4P + 16P/N, also keeps a whole fp16 gradient buffer (2 B/param) next
  // to the sharded fp32 gradients; ZeRO stage 2 with fp32 gradients is 2P + 16P/N.
  const ParamMemory m = param_memory(Optimizer::adam, Precision::mixed);
  const double ours = zero_memory(m, 1e9, 8, 2).total;
  EXPECT_DOUBLE_EQ(ours, 4e9);
  EXPECT_DOUBLE_EQ(ours + 2 * 1e9, 6.0e9);
}

TEST(AccountingCases, mem_accelerate_adam_rule) {
  const ParamMemory m = param_memory(Optimizer::adam, Precision::fp32);
  EXPECT_EQ(m.bytes_per_param() / m.bytes_per_param(StatePart::params), 4);
}

// GPT-3 175B's layer: s=2048, b=1, h=12288, a=96.
TEST(AccountingCases, act_korthikanti_gpt3_layer) {
  const ActivationMemory m = activation_memory_per_layer({2048, 1, 12288, 96, 1, false});
  EXPECT_EQ(m.none, 2868903936);
  EXPECT_EQ(m.selective, 34.0 * 2048 * 12288);
  EXPECT_EQ(m.full, 2.0 * 2048 * 12288);
}

TEST(AccountingCases, act_korthikanti_mtnlg_reduction) {
  const ActivationMemory m = activation_memory_per_layer({2048, 1, 20480, 128, 1, false});
  expect_rounds_to(1 - m.selective / m.none, 0.653, 0.0005);
}

TEST(AccountingCases, act_korthikanti_tp_sp_selective) {
  const ActivationMemory m = activation_memory_per_layer({2048, 1, 12288, 96, 8, true});
  EXPECT_EQ(m.selective, 106954752);
  EXPECT_EQ(m.none, 2868903936.0 / 8);  // Table 2: sbh(34/t + 5as/(ht))
}

TEST(Korthikanti, TensorParallelWithoutSequenceParallel) {
  // Table 2: sbh(10 + 24/t + 5as/(ht)); selective sbh(10 + 24/t).
  const double sbh = 2048.0 * 1 * 12288;
  const ActivationMemory m = activation_memory_per_layer({2048, 1, 12288, 96, 8, false});
  EXPECT_DOUBLE_EQ(m.none, sbh * (10 + 24.0 / 8 + 5.0 * 96 * 2048 / (12288 * 8)));
  EXPECT_DOUBLE_EQ(m.selective, sbh * (10 + 24.0 / 8));
}

TEST(AccountingCases, kv_cache_llama3_8b) {
  EXPECT_EQ(kv_cache_bytes_per_token(32, 8, 128, 2), 131072);
}

TEST(AccountingCases, kv_cache_llama2_70b) {
  EXPECT_EQ(kv_cache_bytes_per_token(80, 8, 128, 2), 327680);
}

// Inference weights: bits per weight of each format, bytes, and the memory-bound decode rate.
TEST(InferenceWeights, BytesAndTheDecodeBound) {
  const auto q8 = parse_weight_format("q8_0"), q4 = parse_weight_format("q4_0");
  ASSERT_TRUE(q8 && q4);
  EXPECT_EQ(q8->bits_per_weight, (32 * 8 + 16) / 32.0);  // 32 int8 codes + an f16 scale
  EXPECT_EQ(q4->bits_per_weight, (32 * 4 + 16) / 32.0);
  EXPECT_EQ(parse_weight_format("bf16")->bits_per_weight, 16);
  EXPECT_EQ(parse_weight_format("fp32")->bits_per_weight, 32);
  EXPECT_FALSE(parse_weight_format("q5_1"));
  EXPECT_EQ(weight_bytes(8e9, *q8), 8.5e9);
  EXPECT_EQ(weight_bytes(70e9, *q4), 39.375e9);
  // H100 SXM, 3.35 TB/s: an 8B model in bf16 (16 GB) decodes at most 209.375 tokens/s
  EXPECT_DOUBLE_EQ(decode_tokens_per_s_bound(weight_bytes(8e9, *parse_weight_format("bf16")), 3.35e12),
                   209.375);
}

TEST(AccountingCases, roofline_matmul_intensity) {
  EXPECT_NEAR(square_matmul_intensity(1024, 2), 341, 0.5);
}

// Every row of the file is covered above or skipped here with its reason.
const std::set<std::string> kCovered = {
    "cs336_70b_15T_1024h100",
    "cs336_8h100_2weeks",
    "cs336_max_params_8h100_fp32_adamw",
    "cs336_max_params_8h100_bf16_adamw",
    "hw_h100_bf16_dense",
    "hw_a100_bf16",
    "hw_fp32_peaks",
    "gpt3_train_compute",
    "gpt3_palm_flops_per_token",
    "llama2_7b_flops_per_token_conventions",
    "chinchilla_tokens_per_param",
    "chinchilla_70b_budget",
    "chinchilla_table3_10B",
    "days_nanogpt_6ND",
    "mfu_nanogpt_a100",
    "mfu_palm_540b",
    "narayanan_1T_throughput",
    "mem_zero_table_nd4",
    "mem_zero_table_nd1024",
    "mem_zero_gpt2_1p5b_states",
    "mem_8b_mixed_precision",
    "mem_megatron_bytes_per_param",
    "mem_deepspeed_zero2_estimate",
    "mem_accelerate_adam_rule",
    "act_korthikanti_gpt3_layer",
    "act_korthikanti_mtnlg_reduction",
    "act_korthikanti_tp_sp_selective",
    "kv_cache_llama3_8b",
    "kv_cache_llama2_70b",
    "roofline_matmul_intensity",
};
// Rows that need a model graph or a model's layer structure: `ein report`'s, not napkin math.
const std::set<std::string> kSkippedNeedGraph = {
    "op_mm_flops",
    "op_conv2d_flops",
    "op_conv1d_flops",
    "op_mixed_sum",
    "op_backward_only_needed_grads",
    "op_sdpa_fwd_causal_counted_full",
    "op_sdpa_fwd_bwd_math",
    "op_sdpa_fwd_bwd_nonsquare_math",
    "model_resnet18_fwd_bwd",
    "fvcore_mac_convention",
    "resnet50_fwd_approx",
    "cs336_two_layer_linear_backward",
    "params_gpt2_small_hf",
    "params_gpt2_medium_hf",
    "params_gpt2_large_hf",
    "params_gpt2_xl_hf",
    "params_llama1_7b",
    "params_llama1_13b",
    "params_llama1_33b",
    "params_llama2_70b",
    "params_llama3_70b",
    "flops_nanogpt_fwd_T1024",
    "flops_nanogpt_train_T1024",
    "cookbook_gpt3_default",
};
// Rows with napkin inputs that the estimate does not model.
const std::set<std::string> kSkippedOther = {
    "hfu_palm_540b",                // needs PaLM's rematerialized FLOPs, not given
    "mfu_prior_models_palm_table",  // the row gives no throughputs to recompute from
    "mem_zero_gpt2_1p5b_acts",      // ZeRO §3.2's 12·h·b·s·L count, not Korthikanti's formula
};

TEST(AccountingCases, EveryRowIsCoveredOrSkippedWithAReason) {
  const auto rows = testing::read_tsv(testing::conformance_file("accounting_cases.tsv"));
  ASSERT_FALSE(rows.empty());
  for (const auto& r : rows) {
    const std::string& c = r["case"];
    const int where = kCovered.count(c) + kSkippedNeedGraph.count(c) + kSkippedOther.count(c);
    EXPECT_EQ(where, 1) << "line " << r.line << ": case '" << c
                        << "' must be covered or skipped exactly once";
  }
  EXPECT_EQ(rows.size(), kCovered.size() + kSkippedNeedGraph.size() + kSkippedOther.size());
}

}  // namespace
}  // namespace ein::napkin
