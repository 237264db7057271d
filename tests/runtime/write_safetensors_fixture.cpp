// Writes the safetensors file tests/cli/test_safetensors_numpy.py reads with numpy alone:
// every dtype with values the script recomputes, a transposed (non-contiguous) source, a 0-d
// and a zero-size tensor, and metadata. Usage: ein_safetensors_fixture OUT.safetensors
#include <cstdio>
#include <exception>

#include "runtime/checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.safetensors\n", argv[0]);
    return 2;
  }
  try {
    using ein::DType;
    // x: (r c) with x[r, c] = (r * 4 + c) * 0.5 - 3, exact in every float dtype here.
    const ein::Tensor x = ein::arange(-3.0, 3.0, 0.5, DType::f64).view({3, 4});
    // i: 0, 1, ..., 11 minus 6, exact in every integer dtype.
    const ein::Tensor i = ein::arange(-6.0, 6.0, 1.0, DType::f64).view({3, 4});
    std::vector<std::pair<std::string, ein::Tensor>> tensors;
    for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2})
      tensors.emplace_back(std::string(ein::dtype_name(d)), x.to(d));
    for (DType d : {DType::i64, DType::i32, DType::i8})
      tensors.emplace_back(std::string(ein::dtype_name(d)), i.to(d));
    tensors.emplace_back("u8", ein::arange(250.0, 256.0, 1.0, DType::u8));
    tensors.emplace_back("bool", ein::from_data<bool>({true, false, false, true, true}, {5}));
    tensors.emplace_back("transposed", x.to(DType::f32).transpose(0, 1));  // (c r)
    tensors.emplace_back("scalar", ein::full({}, 2.5, DType::f32));
    tensors.emplace_back("empty", ein::zeros({2, 0}, DType::f32));
    ein::save_safetensors(argv[1], tensors, {{"seed", "1234"}, {"note", "written by ein"}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
