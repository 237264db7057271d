// One query row per batch row: the attention of a decode step, which reads one new token's
// query against a key-value cache (compiler/decode/decode_step.h). The tiled kernels of
// attention.cpp transpose the keys a block at a time for a product with many query rows; a
// single row needs no transpose: its logits are dot products with the key rows where they
// lie (f32, or bf16 read as they are: a bf16 cache), then one softmax over the row and one
// pass over the value rows. The keys and values a mask leaves out are not read, as in the
// tiles: a cache's rows past the new position cost nothing. Internal to exec/.
#pragma once

#include <ein/tensor.h>

#include "exec/attention_operands.h"

namespace ein::attention_detail {

/// attention_forward's packed result ([B..., 1, F + 1]) for operands with one query row (o.t
/// is 1): the same values as the tiles' up to rounding, the same for NaN, ±inf and fully
/// masked rows.
Tensor forward_one_query(const Operands<float>& o, double scale, const Shape& out_shape);

}  // namespace ein::attention_detail
