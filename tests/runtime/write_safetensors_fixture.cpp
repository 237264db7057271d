// The C++ side of tests/cli/test_safetensors_numpy.py.
//   ein_safetensors_fixture OUT.safetensors   writes every dtype with values the script
//       recomputes, a transposed (non-contiguous) source, a 0-d and a zero-size tensor, metadata;
//   ein_safetensors_fixture --dump IN.safetensors   loads a file (one numpy wrote) and prints
//       the metadata ("meta KEY VALUE") and each tensor in file order ("tensor NAME DTYPE
//       SHAPE v0 v1 ..." with values as %.17g), one per line.
#include <cstdio>
#include <cstring>
#include <exception>

#include <ein/checkpoint.h>

namespace {

/// Writes the fixture the script reads with numpy.
void write_fixture(const char* path) {
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
  ein::save_safetensors(path, tensors, {{"seed", "1234"}, {"note", "written by ein"}});
}

/// Prints what load_safetensors() makes of `path`.
void dump(const char* path) {
  const ein::Checkpoint c = ein::load_safetensors(path);
  for (const auto& [key, value] : c.metadata)
    std::printf("meta %s %s\n", key.c_str(), value.c_str());
  for (const auto& [name, t] : c.tensors) {
    std::printf("tensor %s %s %s", name.c_str(), std::string(ein::dtype_name(t.dtype())).c_str(),
                ein::shape_str(t.shape()).c_str());
    for (double v : t.to_vector<double>())
      std::printf(" %.17g", v);
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool dumping = argc == 3 && std::strcmp(argv[1], "--dump") == 0;
  if (argc != 2 && !dumping) {
    std::fprintf(stderr, "usage: %s OUT.safetensors | --dump IN.safetensors\n", argv[0]);
    return 2;
  }
  try {
    if (dumping) {
      dump(argv[2]);
    } else {
      write_fixture(argv[1]);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
