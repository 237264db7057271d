// The Trainer's text (api/trainer.cpp): the progress line of a step, the summary of a run and
// sampled bytes made printable. Formatting only: nothing here measures or trains. Internal to
// api/; format_summary() is public (include/ein/trainer.h).
#pragma once

#include <string>

#include <ein/trainer.h>

namespace ein::detail {

/// "step 30/30 | loss 2.951 | 14.5 ktok/s | 40.9 GFLOP/s | MFU 12.3% | ETA 0:00", the ETA
/// from `average_seconds` per step so far.
std::string progress_line(const StepStats& s, double average_seconds);
/// `bytes` as valid UTF-8 safe to print on a terminal: a byte that starts no valid character,
/// and a control character other than newline and tab (C0, DEL, C1), becomes U+FFFD.
std::string printable_utf8(const std::string& bytes);

/// printable_utf8() of bytes that come one at a time (`ein sample` printing each token as it is
/// drawn): add() takes the next bytes and returns what of them is settled, holding back a last
/// character begun but not finished; finish() returns the rest. The pieces put together are
/// printable_utf8() of all the bytes.
class PrintableUtf8Stream {
 public:
  std::string add(const std::string& bytes);
  std::string finish();

 private:
  std::string pending_;  ///< the bytes of a character that may still be completed
};

}  // namespace ein::detail
