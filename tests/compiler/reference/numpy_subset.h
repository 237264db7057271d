// The few numpy functions that the einops identity table compares against (x.sum(axis=...),
// x.transpose, np.stack, np.einsum, ...), written for the test with their own index loops so
// that they check the reference interpreter rather than repeat it.
#pragma once

#include <string>
#include <vector>

#include "compiler/reference/reference.h"

namespace ein::testing::np {

using reference::Array;

/// x.min/max/sum/mean/prod(axis=axes), np.any/np.all; `axes` empty means every axis.
Array reduce(const Array& x, const std::string& op, std::vector<int64_t> axes, bool keepdims);
/// np.transpose(x, perm).
Array transpose(const Array& x, std::vector<int64_t> perm);
/// x.reshape(shape), one entry may be -1.
Array reshape(const Array& x, std::vector<int64_t> shape);
/// x.repeat(n, axis=axis): each element `n` times along `axis`.
Array repeat(const Array& x, int64_t n, int64_t axis);
/// np.tile(x, reps) with len(reps) == x.ndim.
Array tile(const Array& x, const std::vector<int64_t>& reps);
/// np.broadcast_to(x, shape).
Array broadcast_to(const Array& x, const Shape& shape);
/// np.stack(xs, axis).
Array stack(const std::vector<Array>& xs, int64_t axis);
/// np.concatenate(xs, axis).
Array concatenate(const std::vector<Array>& xs, int64_t axis);
/// np.einsum in numpy's own notation ("abcd,ad->ac", "...abc,cde->...be"); explicit '->'.
Array einsum(const std::string& spec, const std::vector<Array>& operands);

}  // namespace ein::testing::np
