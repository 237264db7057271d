// GGUF-style block quantization (include/ein/quantize.h): quantize(), dequantize() and the
// checkpoint form. Everything runs on the host, one row of blocks per task; the arithmetic is
// in double, so the codes are the exact rounding of x / d.
#include <ein/quantize.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <ein/errors.h>
#include <ein/scalar_convert.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/parallel.h"
#include "runtime/quantize_layout.h"

namespace ein {
namespace {

/// The smallest-magnitude f16 at least |v| in magnitude, with v's sign (v finite); nullopt when
/// that is beyond f16's largest finite value.
std::optional<Half> f16_away_from_zero(double v) {
  const double a = std::fabs(v);
  Half h = round_to<Half>(a);
  if (static_cast<double>(to_float(h)) < a) ++h.bits;  // the next f16 up (0x7c00 is inf)
  if ((h.bits & 0x7fff) >= 0x7c00) return std::nullopt;
  if (v < 0) h.bits |= 0x8000;
  return h;
}

/// The largest code magnitude a block's scale is sized for.
double code_range(QuantType t) {
  return t == QuantType::q8_0 ? 127.0 : 8.0;
}

int64_t blocks_of(int64_t n) {
  return (n + kQuantBlock - 1) / kQuantBlock;
}

Shape with_last(Shape s, int64_t last) {
  s.back() = last;
  return s;
}

std::string index_str(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return fmt::format("[{}]", fmt::join(idx, ", "));
}

/// Quantizes rows of `n` values (x, as T) into codes (i8 or packed u8) and f16 scales.
template <typename T>
void quantize_rows(const T* x, int64_t rows, int64_t n, QuantType type, int8_t* codes8,
                   uint8_t* codes4, Half* scales, const std::string& what, const Shape& shape) {
  const int64_t nb = blocks_of(n), row_bytes4 = (n + 1) / 2;
  parallel_for(
      0, rows, std::max<int64_t>(1, 65536 / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          const T* row = x + r * n;
          for (int64_t b = 0; b < nb; ++b) {
            const int64_t begin = b * kQuantBlock, end = std::min(n, begin + kQuantBlock);
            double extreme = 0;  // the value of largest magnitude (the first of equals)
            for (int64_t i = begin; i < end; ++i) {
              const double v = static_cast<double>(row[i]);
              if (!std::isfinite(v))
                throw RuntimeError(fmt::format("{} has {} at {}: only finite values quantize", what,
                                               v, index_str(shape, r * n + i)));
              if (std::fabs(v) > std::fabs(extreme)) extreme = v;
            }
            // q8_0: d = max|x| / 127 (positive); q4_0: d = m / -8, so m reads back as -8 · d.
            const double d = type == QuantType::q8_0 ? std::fabs(extreme) / 127.0 : extreme / -8.0;
            const std::optional<Half> h = f16_away_from_zero(d);
            if (!h)
              throw RuntimeError(fmt::format(
                  "{} has {} at {}: beyond {}'s reach (its f16 block scale holds at most 65504, so "
                  "values up to {:g} in magnitude)",
                  what, extreme, index_str(shape, r * n + begin), quant_type_name(type),
                  65504.0 * code_range(type)));
            scales[r * nb + b] = *h;
            const double scale = static_cast<double>(to_float(*h));
            for (int64_t i = begin; i < end; ++i) {
              const double q = scale == 0 ? 0.0 : std::round(static_cast<double>(row[i]) / scale);
              if (type == QuantType::q8_0) {
                codes8[r * n + i] = static_cast<int8_t>(std::clamp(q, -127.0, 127.0));
              } else {
                const auto c = static_cast<uint8_t>(std::clamp(q, -8.0, 7.0) + 8.0);
                uint8_t& byte = codes4[r * row_bytes4 + i / 2];
                byte =
                    static_cast<uint8_t>(i % 2 == 0 ? (byte & 0xf0) | c : (byte & 0x0f) | (c << 4));
              }
            }
          }
        }
      });
}

}  // namespace

namespace detail {

void check_quantized_layout(const QuantizedTensor& q, std::string_view op) {
  if (q.shape.empty())
    throw RuntimeError(fmt::format("{}: a quantized tensor has at least one dimension", op));
  const int64_t n = q.shape.back();
  const Shape codes = with_last(q.shape, q.type == QuantType::q8_0 ? n : (n + 1) / 2);
  const DType code_dtype = q.type == QuantType::q8_0 ? DType::i8 : DType::u8;
  const Shape scales = with_last(q.shape, blocks_of(n));
  const auto describe = [](const Tensor& t) {
    return t.defined() ? fmt::format("{} {}", dtype_name(t.dtype()), shape_str(t.shape()))
                       : std::string("undefined");
  };
  if (!q.codes.defined() || q.codes.dtype() != code_dtype || q.codes.shape() != codes)
    throw RuntimeError(fmt::format("{}: the {} codes of {} {} are {}, expected {} {}", op,
                                   quant_type_name(q.type), dtype_name(q.dtype), shape_str(q.shape),
                                   describe(q.codes), dtype_name(code_dtype), shape_str(codes)));
  if (!q.scales.defined() || q.scales.dtype() != DType::f16 || q.scales.shape() != scales)
    throw RuntimeError(fmt::format("{}: the scales of {} {} are {}, expected f16 {}", op,
                                   dtype_name(q.dtype), shape_str(q.shape), describe(q.scales),
                                   shape_str(scales)));
  if (!is_float(q.dtype))
    throw RuntimeError(fmt::format("{}: {} is not a floating dtype", op, dtype_name(q.dtype)));
}

}  // namespace detail

std::string_view quant_type_name(QuantType type) {
  return type == QuantType::q8_0 ? "q8_0" : "q4_0";
}

std::optional<QuantType> parse_quant_type(std::string_view name) {
  if (name == "q8_0" || name == "Q8_0") return QuantType::q8_0;
  if (name == "q4_0" || name == "Q4_0") return QuantType::q4_0;
  return std::nullopt;
}

double quant_bits_per_weight(QuantType type) {
  // a block: 32 codes and a 2-byte scale
  return type == QuantType::q8_0 ? (32 * 8 + 16) / 32.0 : (32 * 4 + 16) / 32.0;
}

QuantizedTensor quantize(const Tensor& x, QuantType type, const std::string& name) {
  const std::string what = name.empty() ? std::string("the tensor") : fmt::format("'{}'", name);
  if (!x.defined()) throw RuntimeError(fmt::format("quantize: {} is undefined", what));
  if (!is_float(x.dtype()))
    throw RuntimeError(
        fmt::format("quantize: {} is {}; only f64, f32, f16 and bf16 tensors quantize", what,
                    dtype_name(x.dtype())));
  if (x.dim() == 0)
    throw RuntimeError(
        fmt::format("quantize: {} is a scalar; blocks run along the last axis of "
                    "a tensor of at least one dimension",
                    what));
  QuantizedTensor q;
  q.type = type;
  q.dtype = x.dtype();
  q.shape = x.shape();
  const int64_t n = q.shape.back();
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  q.codes = zeros(with_last(q.shape, type == QuantType::q8_0 ? n : (n + 1) / 2),
                  type == QuantType::q8_0 ? DType::i8 : DType::u8);
  q.scales = empty(with_last(q.shape, blocks_of(n)), DType::f16);
  if (rows == 0) return q;
  auto* codes8 = type == QuantType::q8_0 ? q.codes.data<int8_t>() : nullptr;
  auto* codes4 = type == QuantType::q4_0 ? q.codes.data<uint8_t>() : nullptr;
  auto* scales = static_cast<Half*>(q.scales.data_ptr());
  if (x.dtype() == DType::f64) {
    const Tensor c = x.to(cpu()).contiguous();
    quantize_rows(c.data<double>(), rows, n, type, codes8, codes4, scales, what, q.shape);
  } else {  // f32, f16 and bf16 values are exact in f32
    const Tensor c = x.to(cpu()).to(DType::f32).contiguous();
    quantize_rows(c.data<float>(), rows, n, type, codes8, codes4, scales, what, q.shape);
  }
  return q;
}

Tensor dequantize(const QuantizedTensor& q) {
  detail::check_quantized_layout(q, "dequantize");
  const int64_t n = q.shape.back();
  const int64_t rows = n == 0 ? 0 : checked_numel(q.shape) / n;
  const int64_t nb = blocks_of(n), row_bytes4 = (n + 1) / 2;
  Tensor out = empty(q.shape, DType::f32);
  const Tensor codes = q.codes.contiguous(), scale_t = q.scales.contiguous();
  const auto* codes8 = q.type == QuantType::q8_0 ? codes.data<int8_t>() : nullptr;
  const auto* codes4 = q.type == QuantType::q4_0 ? codes.data<uint8_t>() : nullptr;
  const auto* scales = static_cast<const Half*>(scale_t.data_ptr());
  float* y = rows ? out.data<float>() : nullptr;
  parallel_for(
      0, rows, std::max<int64_t>(1, 65536 / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r)
          for (int64_t i = 0; i < n; ++i) {
            const float d = to_float(scales[r * nb + i / kQuantBlock]);
            int code = 0;
            if (codes8) {
              code = codes8[r * n + i];
            } else {
              const uint8_t byte = codes4[r * row_bytes4 + i / 2];
              code = (i % 2 == 0 ? byte & 0x0f : byte >> 4) - 8;
            }
            y[r * n + i] = static_cast<float>(code) * d;  // exact: 8 and 11 significant bits
          }
      });
  return q.dtype == DType::f32 ? out : out.to(q.dtype);
}

QuantError quant_error(const Tensor& original, const Tensor& dequantized) {
  if (original.shape() != dequantized.shape())
    throw RuntimeError(fmt::format("quant_error: shapes {} and {} differ",
                                   shape_str(original.shape()), shape_str(dequantized.shape())));
  // In f64, a chunk at a time: an embedding's two f64 copies would take 16 bytes a weight.
  const int64_t n = original.numel();
  const Tensor x = original.contiguous().reshape({n}), y = dequantized.contiguous().reshape({n});
  constexpr int64_t kChunk = 1 << 16;
  double sq = 0, ref = 0, mx = 0;
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t stop = std::min(n, start + kChunk);
    const std::vector<double> a = x.slice(0, start, stop).to_vector<double>();
    const std::vector<double> b = y.slice(0, start, stop).to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) {
      const double e = b[i] - a[i];
      sq += e * e;
      ref += a[i] * a[i];
      mx = std::max(mx, std::fabs(e));
    }
  }
  QuantError r;
  if (n == 0) return r;
  r.rms = std::sqrt(sq / static_cast<double>(n));
  r.relative_rms = ref > 0 ? std::sqrt(sq / ref) : 0;
  r.max_abs = mx;
  return r;
}

bool quantizes(DType dtype, const Shape& shape, const QuantizeCheckpointOptions& options) {
  return is_float(dtype) &&
         static_cast<int64_t>(shape.size()) >= std::max<int64_t>(1, options.min_dims) &&
         checked_numel(shape) >= options.min_elements && shape.back() >= kQuantBlock;
}

int64_t quantized_nbytes(const Shape& shape, QuantType type) {
  if (shape.empty())
    throw RuntimeError("quantized_nbytes: a quantized tensor has at least one dimension");
  const int64_t n = shape.back(), rows = n == 0 ? 0 : checked_numel(shape) / n;
  const int64_t code_bytes = type == QuantType::q8_0 ? n : (n + 1) / 2;
  return rows * (code_bytes + blocks_of(n) * 2);  // f16 scales
}

bool drops(const std::string& name, const QuantizeCheckpointOptions& options) {
  return std::any_of(options.drop_prefixes.begin(), options.drop_prefixes.end(),
                     [&](const std::string& p) { return name.rfind(p, 0) == 0; });
}

std::pair<StateDict, std::map<std::string, std::string>> quantize_checkpoint(
    const Checkpoint& checkpoint, const QuantizeCheckpointOptions& options,
    std::vector<QuantizedEntry>* entries) {
  if (is_quantized(checkpoint))
    throw RuntimeError(
        fmt::format("'{}' is quantized already; quantize the checkpoint it was "
                    "made from",
                    checkpoint.path));
  StateDict out;
  std::map<std::string, std::string> metadata = checkpoint.metadata;
  for (const auto& [name, t] : checkpoint.tensors) {
    QuantizedEntry e{name, t.dtype(), t.shape(), "kept", t.nbytes(), t.nbytes(), {}};
    if (drops(name, options)) {
      e.action = "dropped";
      e.bytes_after = 0;
    } else if (quantizes(t.dtype(), t.shape(), options)) {
      for (const char* suffix : {".qcodes", ".qscales"})
        if (checkpoint.find(name + suffix))
          throw RuntimeError(
              fmt::format("'{}' holds both '{}' and '{}{}': the quantized names "
                          "would clash",
                          checkpoint.path, name, name, suffix));
      QuantizedTensor q = quantize(t, options.type, name);
      e.action = std::string(quant_type_name(options.type));
      e.bytes_after = q.nbytes();
      e.error = quant_error(t, dequantize(q));
      nlohmann::json info = {{"type", e.action},
                             {"dtype", std::string(safetensors_dtype_name(t.dtype()))},
                             {"shape", t.shape()}};
      metadata[kQuantMetadataPrefix + name] = info.dump();
      out.emplace_back(name + ".qcodes", std::move(q.codes));
      out.emplace_back(name + ".qscales", std::move(q.scales));
    } else {
      out.emplace_back(name, t);
    }
    if (entries) entries->push_back(std::move(e));
  }
  return {std::move(out), std::move(metadata)};
}

bool is_quantized(const Checkpoint& checkpoint) {
  return std::any_of(checkpoint.metadata.begin(), checkpoint.metadata.end(),
                     [](const auto& kv) { return kv.first.rfind(kQuantMetadataPrefix, 0) == 0; });
}

std::optional<QuantType> quantized_type(const Checkpoint& checkpoint) {
  for (const auto& [key, value] : checkpoint.metadata) {
    if (key.rfind(kQuantMetadataPrefix, 0) != 0) continue;
    try {
      const nlohmann::json info = nlohmann::json::parse(value);
      if (info.contains("type") && info["type"].is_string())
        if (auto type = parse_quant_type(info["type"].get<std::string>())) return type;
    } catch (const nlohmann::json::exception&) {
      // dequantize_checkpoint() says what is wrong with it
    }
  }
  return std::nullopt;
}

std::map<std::string, QuantizedTensor> quantized_tensors(const Checkpoint& checkpoint) {
  const std::string prefix = kQuantMetadataPrefix;
  std::map<std::string, QuantizedTensor> out;
  for (const auto& [key, value] : checkpoint.metadata) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string name = key.substr(prefix.size());
    const auto fail = [&](const std::string& why) {
      return RuntimeError(fmt::format("invalid quantized checkpoint '{}': tensor '{}': {}",
                                      checkpoint.path, name, why));
    };
    QuantizedTensor q;
    try {
      const nlohmann::json info = nlohmann::json::parse(value);
      const std::optional<QuantType> type = parse_quant_type(info.at("type").get<std::string>());
      if (!type) throw fail(fmt::format("unknown quantization type {}", info.at("type").dump()));
      const std::optional<DType> dtype =
          dtype_from_safetensors_name(info.at("dtype").get<std::string>());
      if (!dtype) throw fail(fmt::format("unknown dtype {}", info.at("dtype").dump()));
      q.type = *type;
      q.dtype = *dtype;
      q.shape = info.at("shape").get<Shape>();
    } catch (const nlohmann::json::exception& e) {
      throw fail(fmt::format("metadata {} is not {{\"type\", \"dtype\", \"shape\"}} ({})", value,
                             e.what()));
    }
    for (int64_t s : q.shape)
      if (s < 0) throw fail(fmt::format("negative size in shape {}", shape_str(q.shape)));
    const Tensor* codes = checkpoint.find(name + ".qcodes");
    const Tensor* scales = checkpoint.find(name + ".qscales");
    if (!codes || !scales)
      throw fail(fmt::format("'{}{}' is missing", name, codes ? ".qscales" : ".qcodes"));
    q.codes = *codes;
    q.scales = *scales;
    try {
      detail::check_quantized_layout(q, "dequantize");
    } catch (const RuntimeError& e) {
      throw fail(e.what());
    }
    out.emplace(name, std::move(q));
  }
  return out;
}

Checkpoint dequantize_checkpoint(const Checkpoint& checkpoint) {
  if (!is_quantized(checkpoint)) return checkpoint;
  Checkpoint out;
  out.path = checkpoint.path;
  out.checksummed = checkpoint.checksummed;
  for (const auto& [key, value] : checkpoint.metadata)
    if (key.rfind(kQuantMetadataPrefix, 0) != 0) out.metadata.emplace(key, value);
  std::map<std::string, Tensor> dequantized;  // by the quantized tensor's name
  for (const auto& [name, q] : quantized_tensors(checkpoint))
    dequantized.emplace(name, dequantize(q));
  // The codes' place in the file takes the dequantized tensor; the scales' place, nothing.
  const auto quantized_part = [&](const std::string& name, std::string_view suffix) {
    const bool ends = name.size() > suffix.size() &&
                      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    const std::string base = ends ? name.substr(0, name.size() - suffix.size()) : "";
    return ends && dequantized.count(base) ? base : std::string();
  };
  for (const auto& [name, t] : checkpoint.tensors) {
    if (const std::string base = quantized_part(name, ".qcodes"); !base.empty())
      out.tensors.emplace_back(base, dequantized.at(base));
    else if (quantized_part(name, ".qscales").empty())
      out.tensors.emplace_back(name, t);
  }
  return out;
}

}  // namespace ein
