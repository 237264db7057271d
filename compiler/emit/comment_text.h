// Internal to the emitters (emit_cuda.cpp, emit_mlir.cpp): user text (kernel names, origins
// built from map expressions, patterns and script sources) made safe to place in a `//`
// comment of generated CUDA C++ or MLIR. It does not make identifiers: emit_cuda.cpp's
// identifier() and emit_mlir.cpp's symbol spelling do that.
#pragma once

#include <string>
#include <string_view>

#include <ein/source.h>

namespace ein::detail {

/// `text` for the inside of one `//` comment line: control characters (newline, CR, VT, FF,
/// NUL, ESC, ... and DEL, the C1 controls) and invalid UTF-8 bytes as `\xNN` (printable()),
/// `*/` as `*\x2f`, and a backslash that ends the text (or is followed only by spaces, which
/// GCC and Clang also splice) as `\x5c`, so it cannot continue the comment onto the next line.
/// Printable ASCII and valid UTF-8 stay as they are.
inline std::string comment_text(std::string_view text) {
  std::string out = printable(text);
  for (size_t at = out.find("*/"); at != std::string::npos; at = out.find("*/", at + 2))
    out.replace(at + 1, 1, "\\x2f");
  const size_t last = out.find_last_not_of(' ');
  if (last != std::string::npos && out[last] == '\\') out.replace(last, 1, "\\x5c");
  return out;
}

}  // namespace ein::detail
