// AMX detection and its sustained bf16 rate (amx.h).
#include "runtime/amx.h"

#include <cstdint>

#include <ein/cpu_peak.h>

#include "runtime/cpu_measure.h"

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define EIN_HAS_AMX_CODE 1
#else
#define EIN_HAS_AMX_CODE 0
#endif

namespace ein {
namespace {

#if EIN_HAS_AMX_CODE
bool detect() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
  const bool avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
  if (!amx_bf16 || !amx_tile || !avx512bw || !avx512vl) return false;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !((a >> 5) & 1)) return false;  // AVX512-BF16
  // Linux hands out the tile registers' state (8 KiB per thread) only on request.
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
}

bool detect_avx512_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool avx512f = (b >> 16) & 1, avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
  if (!avx512f || !avx512bw || !avx512vl) return false;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1);  // AVX512-BF16
}

/// Palette 1, eight tiles of 16 rows × 64 bytes (static: ldtilecfg's asm names only the
/// operand's first 8 bytes, so a local's other bytes could be optimised away).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
const TileConfig kConfig;

/// `rounds` × 8 tile dot products into four independent accumulators; returns the FLOPs.
__attribute__((target("amx-tile,amx-bf16"))) double dot_products(int64_t rounds) {
  load_tile_config();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  for (int64_t r = 0; r < rounds; ++r) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
    _tile_dpbf16ps(0, 5, 7);
    _tile_dpbf16ps(1, 5, 6);
    _tile_dpbf16ps(2, 4, 7);
    _tile_dpbf16ps(3, 4, 6);
  }
  _tile_release();
  return static_cast<double>(rounds) * 8 * 2 * 16 * 16 * 32;  // 16 × 16 × 32 multiply-adds each
}
#endif

}  // namespace

#if EIN_HAS_AMX_CODE
__attribute__((target("amx-tile"))) void load_tile_config() {
  asm volatile("" ::: "memory");
  _tile_loadconfig(&kConfig);
}
#else
void load_tile_config() {}
#endif

bool amx_usable() {
#if EIN_HAS_AMX_CODE
  static const bool usable = detect();
  return usable;
#else
  return false;
#endif
}

bool avx512_bf16_usable() {
#if EIN_HAS_AMX_CODE
  static const bool usable = detect_avx512_bf16();
  return usable;
#else
  return false;
#endif
}

double measure_amx_peak(double seconds, int threads) {
#if EIN_HAS_AMX_CODE
  if (!amx_usable()) return 0;
  if (threads <= 0) threads = cpu_info().cores;
  constexpr int64_t kRounds = 1 << 12;
  return sustained_rate(seconds, threads, [] { return dot_products(kRounds); });
#else
  (void)seconds, (void)threads;
  return 0;
#endif
}

}  // namespace ein
