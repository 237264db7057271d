// The generic strided copy-and-convert loop on host memory behind contiguous(), copy_(),
// to(dtype) and to_vector(). It handles any strides (0 included) and any pair of dtypes;
// it does not broadcast, check overlap or allocate: Tensor::copy_ does those first.
#pragma once

#include <cstdint>

#include <ein/dtype.h>
#include <ein/shape.h>

namespace ein {

/// One side of a copy: the host address of element (0, ..., 0), its dtype and its strides
/// in elements (one per dimension of the shared sizes).
struct StridedBuffer {
  void* data;            ///< address of the element at index (0, ..., 0)
  DType dtype;           ///< element type
  const Shape& strides;  ///< in elements, one per dimension
};

/// dst[i] = convert(src[i]) for every index i of `sizes`. Steps:
///  1. drop size-1 dims (nothing to do when a size is 0);
///  2. order dims by |dst stride| descending so the inner loop walks dst most densely;
///  3. coalesce neighbours that are contiguous in both buffers;
///  4. run the inner dim as memcpy (same dtype, both unit stride), a strided move or a
///     converting loop; when the next dim walks src more densely (a transpose), run the two
///     innermost dims in 32 x 32 tiles; parallel over the outer index above ~1M elements.
/// dst must not overlap src and must not map two indices to one address.
void copy_strided(const Shape& sizes, const StridedBuffer& dst, const StridedBuffer& src);

}  // namespace ein
