// Fuzz target: token files (raw uint16 or int32 ids, memory-mapped) through TokenFile and the
// batcher, TokenLoader. An input is an 8-byte header of options, then the file's bytes:
//   0: bit 0 dtype (u16/i32), bit 1 sequential order, bit 2 check_all_tokens, bit 3 drop_last,
//      bit 4 dtype from the file's extension instead of given
//   1: batch size, 2: context (signed bytes: nonsense options must be refused, too)
//   3-4: vocabulary size (int16), 5: token_begin, 6: token_end, 7: a batch number (int8)
// RuntimeError is the expected outcome of a bad file or bad options; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <ein/errors.h>
#include <ein/token_data.h>
#include <ein/token_file.h>

#include "fuzz_support.h"

namespace {

constexpr size_t kHeader = 8;

void read_file(const ein::TokenFile& file, int64_t vocab) {
  const int64_t n = file.size();
  if (n == 0) return;
  file.token(0);
  file.token(n - 1);
  std::vector<int64_t> out(static_cast<size_t>(n));
  file.read(0, n, out.data(), vocab < 0 ? 0 : vocab);
}

void load_batches(std::shared_ptr<const ein::TokenFile> file, ein::LoaderOptions options,
                  int64_t k) {
  ein::TokenLoader loader(std::move(file), options);
  for (int i = 0; i < 3 && loader.has_next(); ++i) loader.next_batch();
  loader.num_batches();
  loader.num_windows();
  loader.batch_at(k < 0 ? -k : k);
  loader.set_position(k < 0 ? -k : k);
  if (loader.has_next()) loader.next_batch();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kHeader) return 0;
  const uint8_t flags = data[0];
  const auto dtype = (flags & 1) ? ein::TokenDType::i32 : ein::TokenDType::u16;
  const bool by_extension = flags & 16;
  int16_t vocab = 0;
  std::memcpy(&vocab, data + 3, sizeof vocab);
  ein::LoaderOptions options;
  options.order = (flags & 2) ? ein::BatchOrder::sequential : ein::BatchOrder::random;
  options.check_all_tokens = flags & 4;
  options.drop_last = flags & 8;
  options.batch_size = static_cast<int8_t>(data[1]);
  options.context = static_cast<int8_t>(data[2]);
  options.vocab_size = vocab;
  options.token_begin = static_cast<int8_t>(data[5]);
  options.token_end = static_cast<int8_t>(data[6]);
  options.prefetch = 0;  // one thread: a finding then points at the line that made it
  const int64_t k = static_cast<int8_t>(data[7]);
  const std::string path = ein::fuzz::scratch_file(
      (flags & 1) ? "tokens.i32" : "tokens.u16", data + kHeader, size - kHeader);
  try {
    auto file = std::make_shared<const ein::TokenFile>(
        path, by_extension ? std::nullopt : std::optional<ein::TokenDType>(dtype));
    try {
      read_file(*file, vocab);
    } catch (const ein::RuntimeError&) {
    }
    load_batches(std::move(file), options, k);
  } catch (const ein::RuntimeError&) {
  }
  return 0;
}
