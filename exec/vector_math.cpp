// exec/vector_math.h. Branch-free loops with independent lanes so that GCC vectorises them
// without -ffast-math (with -fno-trapping-math: exec/CMakeLists.txt says why).
#include "exec/vector_math.h"

#include <cmath>

namespace ein {

// Cephes' expf range reduction (x = k·ln2 + r, |r| ≤ ln2/2); the sum kept in 16 lanes.
__attribute__((target_clones("avx512f", "avx2", "default"))) float exp_shift_sum(float* x,
                                                                                  int64_t n,
                                                                                  float shift) {
  for (int64_t i = 0; i < n; ++i) {
    const float in = x[i] - shift;
    const bool under = in < -87.33654f;  // below: exp underflows (subnormals flushed to 0)
    float a = under ? -87.33654f : in;
    a = a > 88.72283f ? 88.72283f : a;
    // k = round(a / ln2) by the 1.5·2^23 trick (|a / ln2| < 128): floorf would not vectorise.
    const float kf = (a * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = a - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = (static_cast<int32_t>(kf) + 127) << 23;
    float scale;
    __builtin_memcpy(&scale, &bits, sizeof scale);
    float e = p * scale;
    e = under ? 0.0f : e;
    x[i] = in != in ? in : e;  // NaN
  }
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) lanes[l] += x[i + l];
  float sum = 0;
  for (; i < n; ++i) sum += x[i];
  for (float l : lanes) sum += l;
  return sum;
}

/// The largest of x[0..n) and `start`; NaN when any is NaN (as the unfused max reduction).
__attribute__((target_clones("avx512f", "avx2", "default"))) float row_max(const float* x,
                                                                            int64_t n,
                                                                            float start) {
  float lanes[16], nan[16] = {};
  for (float& l : lanes) l = start;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) {
      const float v = x[i + l];
      lanes[l] = v > lanes[l] ? v : lanes[l];
      nan[l] += v != v ? 1.0f : 0.0f;
    }
  float m = start, bad = start != start ? 1.0f : 0.0f;
  for (; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    bad += x[i] != x[i] ? 1.0f : 0.0f;
  }
  for (int l = 0; l < 16; ++l) {
    m = lanes[l] > m ? lanes[l] : m;
    bad += nan[l];
  }
  if (bad != 0) {  // a NaN somewhere: the first one, as the unfused reduction gives
    m = start;
    for (int64_t j = 0; j < n; ++j) m = x[j] > m || x[j] != x[j] ? x[j] : m;
  }
  return m;
}

double row_max(const double* x, int64_t n, double start) {
  double m = start;
  for (int64_t j = 0; j < n; ++j) m = x[j] > m || x[j] != x[j] ? x[j] : m;
  return m;
}

namespace {

inline float widen(float x) { return x; }
inline float widen(uint16_t x) {  // bf16 is f32's upper half
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

/// One key row's dot product with q, in 16 lanes (a vector register's worth).
template <class K>
[[gnu::always_inline]] inline float dot(const float* q, const K* k, int64_t e) {
  float lanes[16] = {};
  int64_t c = 0;
  for (; c + 16 <= e; c += 16)
    for (int l = 0; l < 16; ++l) lanes[l] += q[c + l] * widen(k[c + l]);
  float sum = 0;
  for (; c < e; ++c) sum += q[c] * widen(k[c]);
  for (float l : lanes) sum += l;
  return sum;
}

template <class K>
[[gnu::always_inline]] inline void dots(const float* q, const K* k, int64_t ld, int64_t count,
                                        int64_t e, float scale, float* out) {
  for (int64_t j = 0; j < count; ++j) out[j] = scale * dot(q, k + j * ld, e);
}

template <class V>
[[gnu::always_inline]] inline void weighted_rows(const float* p, const V* v, int64_t ld,
                                                 int64_t count, int64_t f, float* acc) {
  for (int64_t j = 0; j < count; ++j) {
    const float w = p[j];
    const V* row = v + j * ld;
    for (int64_t c = 0; c < f; ++c) acc[c] += w * widen(row[c]);
  }
}

}  // namespace

__attribute__((target_clones("avx512f", "avx2", "default"))) void scaled_dots(
    const float* q, const float* k, int64_t ld, int64_t count, int64_t e, float scale,
    float* out) {
  dots(q, k, ld, count, e, scale, out);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void scaled_dots(
    const float* q, const uint16_t* k, int64_t ld, int64_t count, int64_t e, float scale,
    float* out) {
  dots(q, k, ld, count, e, scale, out);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void add_weighted_rows(
    const float* p, const float* v, int64_t ld, int64_t count, int64_t f, float* acc) {
  weighted_rows(p, v, ld, count, f, acc);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void add_weighted_rows(
    const float* p, const uint16_t* v, int64_t ld, int64_t count, int64_t f, float* acc) {
  weighted_rows(p, v, ld, count, f, acc);
}

double exp_shift_sum(double* x, int64_t n, double shift) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}

}  // namespace ein
