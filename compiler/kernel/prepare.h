// The one preparation every emitter's input goes through (docs/architecture.md): a Kernel IR
// kernel, in either form, becomes the general form with its total stores rewritten as row
// stores into a per-point scratch, coalesced. The CPU executor (MLIR JIT) and the CUDA emitter
// both take kernels from here; neither re-forms or re-coalesces on its own.
#pragma once

#include "compiler/kernel/kernel_ir.h"

namespace ein {

/// Rewrites each total store (a value combined over the whole domain) as a row store into a
/// scratch buffer of the compute type: one value per point of the parallel dims, row-major
/// (element strides; 0 along the reduced dims). The caller combines those values afterwards.
/// Returns whether any store was rewritten.
bool rewrite_total_stores(Kernel& kernel);

/// `kernel` ready for an emitter: in the general form (to_general_form), total stores
/// rewritten (rewrite_total_stores), adjacent dims merged and unit dims dropped (coalesce).
/// Semantics are kept except that totals land per point in their (now scratch) buffers.
/// verify() is the emitters' (once per compiled kernel, not per launch).
Kernel prepare_kernel(Kernel kernel);

}  // namespace ein
