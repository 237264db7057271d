// Intel AMX on this CPU: whether the process may use its bf16 tiles, and their sustained rate,
// the bf16 peak an MFU is measured against (cpu_peak.h). exec/amx_tiles.h has the kernels.
#pragma once

namespace ein {

/// Whether the CPU has AMX-TILE, AMX-BF16, AVX512-BF16, AVX512-BW and AVX512-VL and Linux
/// grants this process the tile state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once).
bool amx_usable();

/// Whether the CPU has AVX512-BF16 (vdpbf16ps: pairs of bf16 products summed into f32 lanes),
/// AVX512-BW and AVX512-VL: the bf16 tile products' kernel where there is no AMX (Zen 4).
bool avx512_bf16_usable();

/// Loads the tile configuration every AMX kernel of ein uses: palette 1, eight tiles of 16
/// rows × 64 bytes (16 × 16 f32, or 16 × 32 bf16). Call only where amx_usable(); release
/// with _tile_release() after the kernel.
void load_tile_config();

/// bf16 FLOP/s of tile dot products on register tiles (no memory traffic: AMX's sustained
/// peak, as measure_cpu_peak() is the FMA units'), `threads` threads (0: cpu_info().cores)
/// for about `seconds`; 0 where !amx_usable().
double measure_amx_peak(double seconds = 0.15, int threads = 0);

}  // namespace ein
