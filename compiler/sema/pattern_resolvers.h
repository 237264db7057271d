// Internal entry points of the per-op sema files, dispatched from resolve_pattern().
#pragma once

#include <ein/patterns.h>

namespace ein::detail {

/// einsum: operands, contraction, diagonals, compositions and units (einsum_sema.cpp).
Recipe resolve_einsum(const Pattern& pattern, const ResolveRequest& request);
/// pack: inputs joined along `*` (pack.cpp).
Recipe resolve_pack(const Pattern& pattern, const ResolveRequest& request);
/// unpack: one input split along `*` into the packed shapes (pack.cpp).
Recipe resolve_unpack(const Pattern& pattern, const ResolveRequest& request);
/// parse_shape: names bound to an input's dimensions (pack.cpp).
Recipe resolve_parse_shape(const Pattern& pattern, const ResolveRequest& request);

}  // namespace ein::detail
