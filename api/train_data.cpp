// Training batches: token windows from a file through TokenLoader, or a Trainable's batch().
// A text file ("bytes") is turned into a u16 token file once, in a cache directory, and
// reused; a GPU gets each batch through a pinned buffer and an asynchronous copy.
#include "api/train_data.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string_view>

#include <unistd.h>

#include <ein/device.h>
#include <ein/diagnostic.h>
#include <ein/errors.h>
#include <ein/ops.h>
#include <ein/token_file.h>
#include <fmt/format.h>

namespace ein::detail {
namespace {

namespace fs = std::filesystem;

/// Where byte-level token files of text corpora are kept: $EIN_CACHE_DIR/data, else
/// $XDG_CACHE_HOME/ein/data or ~/.cache/ein/data, else the temporary directory.
fs::path data_cache_dir() {
  if (const char* dir = std::getenv("EIN_CACHE_DIR"); dir && *dir) return fs::path(dir) / "data";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "ein" / "data";
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "ein" / "data";
  return fs::temp_directory_path() / "ein-data";
}

/// The u16 token file of a text's bytes, named by the text's hash and size: written once
/// (to a temporary name, then renamed, so a killed run leaves no half file) and reused.
std::string byte_token_file(const std::string& text) {
  const fs::path dir = data_cache_dir();
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path path = dir / fmt::format("bytes-{:016x}-{}.u16", std::hash<std::string>{}(text), text.size());
  if (fs::is_regular_file(path, ec) && fs::file_size(path, ec) == 2 * text.size()) return path.string();
  const fs::path temp = path.string() + fmt::format(".tmp.{}", getpid());
  write_byte_tokens(temp.string(), text, TokenDType::u16);
  fs::rename(temp, path, ec);
  if (ec) {
    fs::remove(temp, ec);
    throw UserError(fmt::format("cannot write the token file {}: {}", path.string(), ec.message()));
  }
  return path.string();
}

}  // namespace

std::unique_ptr<TokenLoader> open_tokens(const TokenDataOptions& spec,
                                         const std::string& override_path, uint64_t seed,
                                         int rank, int ranks, std::string_view setting) {
  const std::string path = override_path.empty() ? spec.path : override_path;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  const bool from_script = override_path.empty();
  std::string flag(setting);
  std::replace(flag.begin(), flag.end(), '_', '-');
  const std::string where =
      from_script ? fmt::format(" (set by the train block's {}; --{} overrides it)", setting, flag)
                  : "";
  // From a script: the error points at its `data = ...` (file:line:col and a caret).
  auto refuse = [&](const std::string& message) {
    if (from_script && spec.source) throw UserError(message, spec.source, spec.range);
    throw UserError(message);
  };
  if (!fs::exists(status)) refuse(fmt::format("data file '{}' does not exist{}", path, where));
  // A FIFO or device would block or never end: only regular files are read.
  if (!fs::is_regular_file(status))
    refuse(fmt::format("data file '{}' is not a regular file but {}{}", path,
                       fs::is_directory(status) ? "a directory"
                       : fs::is_fifo(status)    ? "a FIFO (named pipe)"
                       : fs::is_character_file(status) ? "a character device"
                                                       : "a device or socket",
                       where));
  LoaderOptions o;
  o.batch_size = spec.batch;
  o.context = spec.context;
  o.seed = seed;
  o.shard = rank;
  o.shards = ranks;
  o.order = spec.order == "sequential" ? BatchOrder::sequential : BatchOrder::random;
  o.prefetch = 2;
  o.drop_last = true;
  if (!(spec.part_begin >= 0 && spec.part_begin < spec.part_end && spec.part_end <= 1))
    refuse(fmt::format("data '{}': part ({}, {}); expected 0 <= begin < end <= 1", path,
                       spec.part_begin, spec.part_end));
  std::string token_path = path;
  std::optional<TokenDType> dtype;
  if (spec.kind == "bytes") {
    std::ifstream in(path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    token_path = byte_token_file(text);
    dtype = TokenDType::u16;
    o.vocab_size = 256;
  } else if (spec.dtype == "u16" || spec.dtype == "uint16") {
    dtype = TokenDType::u16;
  } else if (spec.dtype == "i32" || spec.dtype == "int32") {
    dtype = TokenDType::i32;
  }
  try {
    auto file = std::make_shared<const TokenFile>(token_path, dtype);
    // A part of the file: [floor(begin · n), floor(end · n)), exact for n below 2^53.
    const auto at = [n = file->size()](double f) {
      return f >= 1 ? n : static_cast<int64_t>(std::floor(f * static_cast<double>(n)));
    };
    o.token_begin = at(spec.part_begin);
    o.token_end = at(spec.part_end);
    if (o.token_end - o.token_begin < spec.context + 1)
      refuse(fmt::format("data '{}': its part ({}, {}) holds {} of its {} tokens; a window of "
                         "context {} needs {}",
                         path, spec.part_begin, spec.part_end, o.token_end - o.token_begin,
                         file->size(), spec.context, spec.context + 1));
    return std::make_unique<TokenLoader>(std::move(file), o);
  } catch (const RuntimeError& e) {
    refuse(fmt::format("data '{}': {}", path, e.what()));
  }
  return nullptr;  // not reached: refuse() throws
}

/// Token batches onto a GPU through page-locked staging: the loader's thread prefetches into
/// host tensors, each is copied into a pinned tensor and queued to the device asynchronously
/// (`to(device, non_blocking)`, the device backend's own path) on the current stream, where the
/// step's kernels then read it in stream order. Before a pinned tensor is refilled the device
/// is waited for, so its last copy has left it (in a training loop the loss's item() has already
/// drained the stream, and the wait returns at once).
class PinnedFeeder {
 public:
  explicit PinnedFeeder(Device device) : device_(device) {}

  /// `host` on the device, staged through pinned tensor `slot`.
  Tensor to_device(const Tensor& host, size_t slot) {
    if (slots_.size() <= slot) slots_.resize(slot + 1);
    Tensor& pinned = slots_[slot];
    if (pinned.defined()) backend_for(device_).synchronize(device_);
    if (pinned.defined() && pinned.shape() == host.shape() && pinned.dtype() == host.dtype())
      pinned.copy_(host);
    else
      pinned = host.pin_memory();
    return pinned.to(device_, /*non_blocking=*/true);
  }

 private:
  Device device_;
  std::vector<Tensor> slots_;
};

TrainBatches::TrainBatches(Trainable& model, const std::optional<TokenDataOptions>& data,
                           const std::string& override_path, uint64_t seed, Device device,
                           int rank, int ranks, std::string_view setting)
    : model_(model), rank_(rank), ranks_(ranks) {
  if (device.kind == DeviceKind::cuda) feeder_ = std::make_unique<PinnedFeeder>(device);
  if (data) loader_ = open_tokens(*data, override_path, seed, rank, ranks, setting);
  else if (!override_path.empty())
    throw UserError("--data: the train block has no data setting (its batches come from fn batch())");
}

TrainBatches::~TrainBatches() = default;

int64_t TrainBatches::pass_batches() const {
  return loader_ ? loader_->num_batches() : -1;
}

void TrainBatches::seek(int64_t k) {
  if (loader_) loader_->set_position(k);
}

std::vector<Tensor> TrainBatches::next(int64_t k) {
  if (!loader_) return model_.batch(k * ranks_ + rank_);
  if (!loader_->has_next()) loader_->set_position(0);  // sequential: another pass
  Batch b = loader_->next_batch();
  if (!feeder_) return {b.x, b.y};
  return {feeder_->to_device(b.x, 0), feeder_->to_device(b.y, 1)};
}

}  // namespace ein::detail
