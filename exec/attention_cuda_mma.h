// The fused attention on tensor cores, for CUDA tensors (internal to exec/; launched by
// attention_cuda.cpp). For bf16 or f16 q, k and v with head dims that are multiples of 16 up
// to 128, on sm_80 and newer (sm_70 for f16), the forward:
//  - a block of 4 warps takes 64 query rows of one batch index, 16 rows a warp; each warp
//    keeps its rows' q as WMMA fragments and its output accumulator (f32) in registers;
//  - per tile of BK keys (64, or 32 where 64 does not fit 48 KB of shared memory) the block
//    stages k and v in shared memory; each warp computes its 16 × BK scores with mma_sync,
//    its lanes (two per row) apply scale, mask and the online softmax in f32 and write the
//    probabilities as bf16/f16 (as FlashAttention-2 rounds them) for the P · V product;
//  - which row each accumulator element holds is read back from a tile whose element (r, c)
//    is r, so the rescaling of the output rows needs no assumption about the fragment layout;
//  - a mask that is the same for every batch row (causal, padding) is turned into per-row
//    key limits once per call (ein_attention_limits: a warp per row checks "zeros, then -inf")
//    and is then never read: keys past a row's limit are -inf, tiles past the block's largest
//    limit are skipped. Any other bias is read per element, in its own dtype.
// The result is the packed [..., T, F + 1] f32 rows of attention_forward(), logsumexp last.
// The backward is FlashAttention-2's, in two kernels so that no gradient needs atomics (the
// sums are in a fixed order: the same bits run to run): dQ per block of 64 query rows over key
// tiles, and dK, dV per block of 64 keys over the query tiles of every query head that reads
// them; both recompute P from the logsumexp, take dO in the operands' dtype and round dS to it
// for the products (as FlashAttention-2 does), and skip the tiles a mask's limits rule out.
#pragma once

#include <cstdint>
#include <string>

#include <ein/dtype.h>

namespace ein::detail {

/// Keys (or queries) per tile of the forward, or of the backward kernels, for head dims `e` and
/// `f` (0: the tensor-core kernels do not take them).
int attention_mma_key_tile(int64_t e, int64_t f, bool backward = false);

/// Whether dK and dV take a kernel each (`part` 2 and 1 of the dK/dV source): wide heads,
/// whose accumulators and fragments of both would not fit a thread's registers.
bool attention_mma_split_dkv(int64_t e, int64_t f);

/// The forward kernel `ein_attention_forward_mma` for operands of dtype `in` (bf16 or f16),
/// a bias of dtype `bias` (f32 when there is none), head dims `e`, `f` and `key_tile` keys.
std::string attention_mma_forward_source(DType in, DType bias, int64_t e, int64_t f, int key_tile);

/// The backward kernels `ein_attention_dq_mma` (dQ; `key_tile` keys a tile) and
/// `ein_attention_dkv_mma` (dK and dV; tiles of `key_tile` queries), which read dO in `in`,
/// the packed f32 result for the logsumexp and delta_i = dO_i · O_i, and write f32 gradients.
std::string attention_mma_dq_source(DType in, DType bias, int64_t e, int64_t f, int key_tile);
std::string attention_mma_dkv_source(DType in, DType bias, int64_t e, int64_t f, int key_tile,
                                     int part);

/// The kernel `ein_attention_limits`: per query row of a [T, S] bias, the number of leading
/// zeros when the rest is -inf, else -1.
std::string attention_limits_source(DType bias);

}  // namespace ein::detail
