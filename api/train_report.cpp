// What `ein train` prints: the progress line, the summary (the lecture's accounting of FLOPs,
// MFU and memory per category) and sampled text. Numbers are formatted here and nowhere else,
// so the CLI and a C++ program print the same lines.
#include "api/train_report.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include <ein/source.h>
#include <fmt/format.h>

namespace ein {
namespace {

/// v with an SI prefix: "14.5 ktok".
std::string human(double v, const char* unit) {
  const char* prefixes[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  while (std::fabs(v) >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  return fmt::format("{:.3g} {}{}", v, prefixes[i], unit);
}

/// Seconds as m:ss or h:mm:ss; "?" when unknown.
std::string duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

/// Bytes in binary units: "1.5 MiB".
std::string bytes_str(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int i = 0;
  while (v >= 1024 && i < 4) {
    v /= 1024;
    ++i;
  }
  return fmt::format("{:.1f} {}", v, units[i]);
}

}  // namespace

namespace detail {

std::string progress_line(const StepStats& s, double average_seconds) {
  const double eta = average_seconds * static_cast<double>(s.steps - s.step);
  const std::string held_out = s.eval_loss ? fmt::format(" | eval loss {:.4g}", *s.eval_loss) : "";
  return fmt::format("step {}/{} | loss {:.4g}{} | {}/s | {}/s | MFU {:.1f}% | ETA {}", s.step,
                     s.steps, s.loss, held_out,
                     human(static_cast<double>(s.tokens) / s.seconds, "tok"),
                     human(s.flops / s.seconds, "FLOP"), 100 * s.mfu, duration(eta));
}

std::string printable_utf8(const std::string& bytes) {
  std::string text;
  for (size_t i = 0; i < bytes.size();) {
    const std::string_view rest = std::string_view(bytes).substr(i);
    const uint32_t n = utf8_char_size(rest);
    const auto c = static_cast<unsigned char>(bytes[i]);
    // C0 controls but newline and tab, DEL, and the C1 controls U+0080..U+009F (C2 80..C2 9F),
    // which some terminals take as escape sequences (U+009B is CSI).
    const bool control = n == 1 ? (c < 0x20 && c != '\n' && c != '\t') || c == 0x7F
                                : n == 2 && c == 0xC2 && static_cast<unsigned char>(rest[1]) < 0xA0;
    if ((n == 1 && c >= 0x80) || control)
      text += "\xEF\xBF\xBD";
    else
      text.append(rest.substr(0, n));
    i += n;
  }
  return text;
}

std::string PrintableUtf8Stream::add(const std::string& bytes) {
  pending_ += bytes;
  // The last byte that may begin a character (not 10xxxxxx), within the longest one's reach:
  // when it begins a longer character than the bytes from it hold, they wait for the next.
  size_t keep = 0;
  for (size_t k = 1; k <= std::min<size_t>(3, pending_.size()); ++k) {
    const auto c = static_cast<unsigned char>(pending_[pending_.size() - k]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    const size_t needed = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (needed > k) keep = k;
    break;
  }
  std::string settled = printable_utf8(pending_.substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return settled;
}

std::string PrintableUtf8Stream::finish() {
  std::string rest = printable_utf8(pending_);
  pending_.clear();
  return rest;
}

}  // namespace detail

std::string format_summary(const TrainResult& r, std::string_view what) {
  const int64_t grad_bytes = r.parameter_bytes;
  const int64_t activations =
      std::max<int64_t>(0, r.peak_memory - r.parameter_bytes - grad_bytes - r.state_bytes);
  std::string s = fmt::format(
      "trained {} for {} steps ({} to {}): final loss {:.6g}\n"
      "  parameters {} ({}), {} batch elements per step\n"
      "  {}FLOPs (model: forward and backward) in {:.2f} s: {}/s, MFU {:.2f}% of {} {} {} peak (2 FLOPs per multiply-add)\n"
      "  peak memory {}: parameters {}, gradients {}, optimizer state {}, activations and "
      "temporaries {}\n",
      what, r.done, r.start, r.last, r.final_loss, r.parameters, bytes_str(r.parameter_bytes),
      r.tokens_per_step, human(r.flops, ""), r.seconds,
      human(r.seconds > 0 ? r.flops / r.seconds : 0, "FLOP"), 100 * r.mfu, r.hardware,
      human(r.peak_flops, "FLOP/s"), r.math_mode, bytes_str(r.peak_memory),
      bytes_str(r.parameter_bytes), bytes_str(grad_bytes), bytes_str(r.state_bytes),
      bytes_str(activations));
  if (!r.peak_note.empty()) s += fmt::format("  ({})\n", r.peak_note);
  if (!r.eval_losses.empty()) {
    const auto best = std::min_element(
        r.eval_losses.begin(), r.eval_losses.end(),
        [](const auto& a, const auto& b) {  // a NaN is no one's lowest
          return a.second < b.second || (std::isnan(b.second) && !std::isnan(a.second));
        });
    s += fmt::format("  eval loss {:.6g} after step {} ({} batches, {} tokens held out; {} "
                     "evaluation{}: {}FLOPs in {:.2f} s){}\n",
                     r.eval_losses.back().second, r.eval_losses.back().first, r.eval_batches,
                     r.eval_tokens, r.eval_losses.size(), r.eval_losses.size() == 1 ? "" : "s",
                     human(r.eval_flops, ""), r.eval_seconds,
                     best->first != r.eval_losses.back().first
                         ? fmt::format("; lowest {:.6g} after step {}", best->second, best->first)
                         : "");
  }
  if (r.fp16)
    s += fmt::format("  fp16 loss scaling: {} step{} skipped for overflowing gradients, "
                     "final scale {}\n",
                     r.skipped_steps, r.skipped_steps == 1 ? "" : "s", r.loss_scale);
  return s;
}

}  // namespace ein
