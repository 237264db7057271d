// default_stdlib_dirs() and stdlib display names (stdlib_dirs.h). The binary's own location
// comes from dladdr() on a function of this file, so it is right for a static `ein`, a test
// binary and a program linked against libein.so alike.
#include "script/stdlib_dirs.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace ein::script {
namespace fs = std::filesystem;

namespace {

/// The folder of the executable or shared object holding this function.
fs::path own_folder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_folder), &info) == 0 || !info.dli_fname) return {};
  std::error_code ec;
  const fs::path object = fs::weakly_canonical(info.dli_fname, ec);
  return ec ? fs::path{} : object.parent_path();
}

}  // namespace

std::vector<std::string> default_stdlib_dirs() {
  std::vector<std::string> dirs;
  std::error_code ec;
  if (const char* env = std::getenv("EIN_STDLIB"); env && *env) dirs.emplace_back(env);
  const fs::path here = own_folder();
  // bin/ and lib/ sit one level under the prefix; Debian's lib/x86_64-linux-gnu/ two.
  for (const fs::path& prefix : {here.parent_path(), here.parent_path().parent_path()}) {
    if (here.empty()) break;
    const fs::path dir = prefix / "share" / "ein" / "stdlib";
    if (fs::is_directory(dir, ec)) {
      dirs.push_back(dir.string());
      break;
    }
  }
  return dirs;
}

std::optional<std::string> stdlib_display_name(const std::string& path,
                                               const std::vector<std::string>& roots) {
  std::error_code ec;
  const fs::path file = fs::weakly_canonical(path, ec);
  if (ec) return std::nullopt;
  for (const std::string& root : roots) {
    const fs::path base = fs::weakly_canonical(root, ec);
    if (ec) continue;
    const fs::path rel = file.lexically_relative(base);
    if (!rel.empty() && *rel.begin() != "..") return "stdlib/" + rel.generic_string();
  }
  return std::nullopt;
}

}  // namespace ein::script
