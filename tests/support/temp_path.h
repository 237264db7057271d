// Files a test writes, in a folder of its process's own: test processes running at once (of
// one `ctest -j` run, of two checkouts on one machine, the FakeCuda and Gpu instances of a
// suite) never truncate a file another is reading. The folder is removed at the process' exit.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace ein::testing {

/// `name` in this process' folder under the temporary directory (ein_tests_<pid>), created.
inline std::filesystem::path temp_path(std::string_view name) {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("ein_tests_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(
          std::filesystem::temp_directory_path() / ("ein_tests_" + std::to_string(::getpid())), ec);
    });
    return d;
  }();
  return dir / name;
}

}  // namespace ein::testing
