// The fused attention on tensor cores, for CUDA tensors (internal to exec/; launched by
// attention_cuda.cpp). For bf16 or f16 q, k and v with head dims that are multiples of 16 up
// to 128, on sm_80 and newer (sm_70 for f16). There are three sets of kernels with one
// contract: the WMMA ones (the default); under EIN_CUDA_ATTENTION=ptx on sm_80+ the ones
// through PTX (attention_ptx_*_source below: mma.sync with the scores in registers, cp.async),
// which are to become the default once a GPU has run them; and under EIN_CUDA_ATTENTION=wgmma
// on sm_90 (heads of 64 or 128) the same bodies through Hopper's wgmma (attention_wgmma_*).
// The WMMA forward:
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

/// The same three kernels written with PTX's mma.sync m16n8k16, ldmatrix and cp.async
/// (exec/attention_cuda_ptx.cpp; sm_80 and newer, bf16 or f16): `ein_attention_forward_ptx`,
/// `ein_attention_dq_ptx` and `ein_attention_dkv_ptx` take the WMMA kernels' arguments and give
/// their results, with every score, probability and accumulator in registers, in the layout
/// PTX documents:
///  - a block of 4 warps takes 64 query rows (forward, dQ) or 64 keys (dK/dV), 16 a warp; the
///    warp's own rows (q; q and dO; k and v) are A fragments read from global memory once;
///  - the other operand's tiles (k and v; q and dO) are copied by cp.async into padded shared
///    rows and read by ldmatrix (transposed where they are a product's B rows): the forward
///    takes tiles of 64 keys, dQ and dK/dV tiles of 32, all double-buffered (the next tile's
///    copies run under this one's products and softmax; the forward's tiles are dynamic shared
///    memory, attention_forward_shared_bytes);
///  - each lane holds 2 rows × 2 columns of every 16 × 8 score tile: a row's max and sum need
///    two shuffles within its group of four lanes, and P (or dS), rounded to the operands'
///    dtype, is the next product's A fragment as it stands (the accumulator's layout is A's);
///  - the softmax runs in base 2 (the scale, the bias and the logsumexp times log2 e);
///  - the forward and dQ take the query blocks from the last one down, so that under a causal
///    mask the longest rows start first; dK/dV starts at the first query tile that sees its
///    keys, and a warp skips a tile none of whose queries sees its keys;
///  - dK and dV split as the WMMA ones do (attention_mma_split_dkv; `part` as there).
std::string attention_ptx_forward_source(DType in, DType bias, int64_t e, int64_t f);
std::string attention_ptx_dq_source(DType in, DType bias, int64_t e, int64_t f);
std::string attention_ptx_dkv_source(DType in, DType bias, int64_t e, int64_t f, int part);

/// The same three kernels through sm_90a's wgmma (exec/attention_cuda_wgmma.cpp; bf16 or f16, e
/// and f 64 or 128): `ein_attention_forward_wgmma`, `ein_attention_dq_wgmma` and
/// `ein_attention_dkv_wgmma`, the PTX kernels' bodies and arguments with each 4 warps of a
/// block as a warpgroup whose products are wgmma.mma_async m64nNk16: the warpgroup's own
/// operand (q, p, k, dS, ...) as A fragments in registers, the staged tile as B from shared
/// memory in the 128-byte swizzled layout (K-major for q kᵀ-like products, N-major for p v-like
/// ones). A block is two warpgroups (attention_block_rows); the forward takes tiles of
/// attention_wgmma_key_tile keys, the backward tiles of 32; in dK/dV
/// the whole block skips a query tile that none of its keys' rows sees. Compiled for sm_90a
/// (CudaSource::arch_specific).
std::string attention_wgmma_forward_source(DType in, DType bias, int64_t e, int64_t f);
std::string attention_wgmma_dq_source(DType in, DType bias, int64_t e, int64_t f);
std::string attention_wgmma_dkv_source(DType in, DType bias, int64_t e, int64_t f, int part);

/// Keys a tile of the wgmma forward for head dims `e` and `f`: 128 or 64.
int attention_wgmma_key_tile(int64_t e, int64_t f);

/// The wgmma set's source without a kernel: the PTX prelude (EIN_TILE = `tile`, EIN_ROWS =
/// `rows`) and the set's tile contract (below), for kernels whose warps make warpgroups.
std::string attention_wgmma_prelude(DType in, DType bias, int64_t e, int64_t f, int tile,
                                    int rows = 64);

/// The set of tensor-core kernels a launch takes.
enum class AttentionCores {
  wmma,   ///< the WMMA kernels (the default)
  ptx,    ///< the PTX kernels (EIN_CUDA_ATTENTION=ptx on sm_80 and newer)
  wgmma,  ///< the wgmma kernels (EIN_CUDA_ATTENTION=wgmma on sm_90, head dims 64 or 128;
          ///< elsewhere that setting takes the PTX set)
};
AttentionCores attention_cores(int arch, int64_t e, int64_t f);

/// Query rows (forward, dQ) or keys (dK/dV) a block of set `cores` takes, 16 a warp, 2 · rows
/// threads: 128 in the wgmma set (two warpgroups reading each staged tile: half the copies a
/// FLOP of one), else 64.
int attention_block_rows(AttentionCores cores);

/// Bytes of dynamic shared memory a block of the forward of set `cores` takes (its k and v
/// tiles, double-buffered, and their alignment; 0 for WMMA's, whose are static). Its source
/// says the same number (EIN_SHARED_BYTES).
int attention_forward_shared_bytes(AttentionCores cores, int64_t e, int64_t f);

/// What the PTX and wgmma kernels' sources start with: the 16-bit types, the sizes (EIN_E,
/// EIN_F, EIN_TILE: keys a tile, or queries in dK/dV; EIN_ROWS: query rows a block of the
/// forward or dQ, keys of dK/dV), mma.sync, ldmatrix and cp.async (the host emulation defines
/// its own), and the fragment helpers they share.
std::string attention_ptx_prelude(DType in, DType bias, int64_t e, int64_t f, int tile,
                                  int rows = 64);

/// The forward, dQ and dK/dV kernels (entry `entry`) of a set whose source defines, after the
/// PTX prelude, the tile contract: EIN_TILE_ELEMENTS(W) and EIN_TILE_ALIGN (a tile of EIN_TILE
/// rows W wide in shared memory), ein_stage_rows<W> (start the copies of a tile),
/// ein_landed() (this thread's copies are in, for every reader after the next barrier),
/// ein_start_times_rows<W> (start acc = a · bᵀ for a tile b), ein_start_add_times<W> (start
/// acc += pa · b), ein_products_wait<N>() (all but the last N started have landed) and
/// ein_keep_all (a product's registers changed there), and EIN_BLOCK_UNIFORM_SKIP (dK/dV skips
/// query tiles per block, not per warp). The prelude's ein_times_rows<W> and ein_add_times<W>
/// are those products landed at once. The forward overlaps the scores of one key tile with
/// p · v of the one before (FlashAttention-3's overlap within a warpgroup, where products are
/// asynchronous: wgmma), its k and v tiles double-buffered in dynamic shared memory
/// (attention_forward_shared_bytes; its source says EIN_SHARED_BYTES). dQ overlaps the
/// scores' exponentials with dP = dO vᵀ; dK/dV Pᵀ with dPᵀ, and dSᵀ with dV += Pᵀ dO.
std::string attention_forward_kernel(const std::string& entry);
std::string attention_dq_kernel(const std::string& entry);
std::string attention_dkv_kernel(const std::string& entry, int part);

/// `kernel` with the sizes every tensor-core kernel takes spelt out where it says
/// EIN_SIZE_PARAMS (the host emulation reads an entry's parameters as written: not a macro).
std::string attention_with_sizes(std::string kernel);

/// The C++ that starts every tensor-core kernel's source: the 16-bit headers, bias_t, ein_bias
/// (one element of the bias as float), EIN_NEG_INF, and the block helpers ein_key_end (the keys
/// a block of query rows needs) and ein_first_query (the first query that sees a block's keys).
std::string attention_bias_prelude(DType bias);

/// The kernel `ein_attention_limits`: per query row of a [T, S] bias, the number of leading
/// zeros when the rest is -inf, else -1.
std::string attention_limits_source(DType bias);

}  // namespace ein::detail
