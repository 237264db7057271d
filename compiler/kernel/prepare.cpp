// prepare_kernel(): general form → total stores as scratch rows → coalesce (prepare.h).
#include "compiler/kernel/prepare.h"

#include <algorithm>
#include <utility>

namespace ein {

bool rewrite_total_stores(Kernel& k) {
  const int p = k.parallel_dims();
  bool any = false;
  for (KernelStore& st : k.stores) {
    if (st.total == Combine::none) continue;
    Shape strides(k.domain.size(), 0);
    int64_t step = 1;
    for (int d = p - 1; d >= 0; --d) {  // row-major over P; an empty dim keeps step 1
      strides[d] = step;
      step *= std::max<int64_t>(k.domain[d], 1);
    }
    k.buffers[st.buffer].strides = strides;
    k.buffers[st.buffer].dtype = k.compute;
    st.total = Combine::none;
    any = true;
  }
  return any;
}

Kernel prepare_kernel(Kernel kernel) {
  if (!kernel.general()) kernel = to_general_form(std::move(kernel));
  rewrite_total_stores(kernel);
  return coalesce(std::move(kernel));
}

}  // namespace ein
