// Where `import name` finds the .ein standard library: beside the installed binary or
// library, never in the source tree the build came from. A build tree mirrors the install
// (the build copies stdlib/ to <build>/share/ein/stdlib), so a build in one place and an
// install in another both resolve `import nn`, from any working directory.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ein::script {

/// The standard library's directories, searched in order after the script's own folder:
///   1. $EIN_STDLIB, when set (a user's override);
///   2. <prefix>/share/ein/stdlib, where <prefix> is the parent (or grandparent, for
///      lib/<multiarch>/) of the folder holding the executable or shared library this code
///      is linked into: an installed bin/ein or lib/libein.so, or a build tree's bin/.
/// Directories that do not exist are left out, so the list may be empty.
std::vector<std::string> default_stdlib_dirs();

/// `path` as a diagnostic shows it: "stdlib/<path relative to the root>" when it lies under
/// one of `roots`, else nothing (the caller keeps the path it was given).
std::optional<std::string> stdlib_display_name(const std::string& path,
                                               const std::vector<std::string>& roots);

}  // namespace ein::script
