// The shape type shared by every layer: sizes (and strides) are int64 element counts.
#pragma once

#include <cstdint>
#include <vector>

namespace ein {

/// Sizes of a tensor's dimensions, outermost first; also used for strides (in elements).
using Shape = std::vector<int64_t>;

}  // namespace ein
