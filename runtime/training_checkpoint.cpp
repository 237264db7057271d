// The training-run checkpoint directory. The commit order is what makes SIGKILL safe:
// 1. step_<N>.safetensors is written to a temp file, fsynced and renamed (AtomicFile);
// 2. only then is `latest` rewritten, again through AtomicFile.
// A kill before 1 completes leaves a stray temp file and the old `latest`; a kill between 1
// and 2 leaves `latest` at the previous checkpoint, which is still there and valid.
#include <ein/training_checkpoint.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cctype>
#include <filesystem>
#include <optional>
#include <set>
#include <system_error>
#include <utility>
#include <vector>

#include "runtime/atomic_file.h"

namespace ein {
namespace {

namespace fs = std::filesystem;

/// The file `latest` lives in.
constexpr const char* kLatestName = "latest";

/// "step_<N>.safetensors".
std::string step_file_name(int64_t step) {
  return "step_" + std::to_string(step) + ".safetensors";
}

/// N for a name "step_<N>.safetensors" (decimal digits only, fits int64), else nullopt.
std::optional<int64_t> parse_step_file_name(const std::string& name) {
  const std::string prefix = "step_", suffix = ".safetensors";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix))
    return std::nullopt;
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoll(digits);
}

/// (N, r) for a shard file "step_<N>.shard_<r>.safetensors", else nullopt.
std::optional<std::pair<int64_t, int64_t>> parse_shard_file_name(const std::string& name) {
  const size_t dot = name.find(".shard_");
  if (dot == std::string::npos) return std::nullopt;
  const std::optional<int64_t> step = parse_step_file_name(name.substr(0, dot) + ".safetensors");
  const std::optional<int64_t> shard = parse_step_file_name("step_" + name.substr(dot + 7));
  if (!step || !shard) return std::nullopt;
  return std::pair{*step, *shard};
}
/// Why `dir/name` is not a usable checkpoint of `step`, or "" when it is.
std::string problem_with(const fs::path& file, int64_t step) {
  try {
    const std::map<std::string, std::string> metadata = check_safetensors(file.string());
    const auto it = metadata.find(kStepMetadataKey);
    if (it == metadata.end()) return "no \"step\" in its metadata";
    if (it->second != std::to_string(step))
      return "its metadata says step " + it->second + ", its name says " + std::to_string(step);
    return "";
  } catch (const RuntimeError& e) {
    return e.what();
  }
}

/// `latest` holds one file name; anything longer is not a `latest` we wrote.
constexpr off_t kMaxLatestBytes = 4096;

/// The file name `dir/latest` holds (whitespace trimmed), or "" when it is missing. When it is
/// not a small regular file (a FIFO would block the read, /dev/zero never end) or cannot be
/// read, "" with the reason in `problem`.
std::string read_latest(const fs::path& dir, std::string& problem) {
  const fs::path path = dir / kLatestName;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) problem = std::strerror(errno);
    return "";
  }
  if (!S_ISREG(st.st_mode)) {
    problem = S_ISDIR(st.st_mode)    ? "it is a directory, not a regular file"
              : S_ISFIFO(st.st_mode) ? "it is a FIFO (named pipe), not a regular file"
              : S_ISCHR(st.st_mode)  ? "it is a character device, not a regular file"
                                     : "it is a block device or socket, not a regular file";
    return "";
  }
  if (st.st_size > kMaxLatestBytes) {
    problem = "it has " + std::to_string(st.st_size) + " bytes, more than a file name (at most " +
              std::to_string(kMaxLatestBytes) + ")";
    return "";
  }
  // O_NONBLOCK: the file may have been swapped for a FIFO since the stat.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    problem = std::strerror(errno);
    return "";
  }
  std::string s(static_cast<size_t>(kMaxLatestBytes), '\0');
  const ssize_t n = ::read(fd, s.data(), s.size());
  const int err = errno;
  ::close(fd);
  if (n < 0) {
    problem = std::strerror(err);
    return "";
  }
  s.resize(static_cast<size_t>(n));
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  s.erase(std::find_if_not(s.rbegin(), s.rend(), space).base(), s.end());
  s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), space));
  return s;
}

/// The checkpoints a resume tries, in order: what `latest` names, then every other step file,
/// highest step first. Temp files never qualify. What `latest` cannot offer goes to `skipped`.
std::vector<std::pair<int64_t, fs::path>> candidates(const fs::path& root,
                                                     std::vector<std::string>& skipped) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  std::string problem;
  const std::string named = read_latest(root, problem);
  if (!problem.empty()) skipped.push_back((root / kLatestName).string() + ": " + problem);
  std::string named_path;
  if (!named.empty()) {
    named_path = (root / named).string();
    if (const std::optional<int64_t> step = parse_step_file_name(named)) {
      out.emplace_back(*step, root / named);
    } else {
      named_path.clear();
      skipped.push_back((root / kLatestName).string() + ": names '" + named +
                        "', not a step_<N>.safetensors file");
    }
  }
  std::vector<std::pair<int64_t, fs::path>> others;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    const std::optional<int64_t> step = parse_step_file_name(entry.path().filename().string());
    if (step && entry.path().string() != named_path) others.emplace_back(*step, entry.path());
  }
  std::sort(others.begin(), others.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  out.insert(out.end(), others.begin(), others.end());
  return out;
}

}  // namespace

std::string save_training_checkpoint(const std::string& dir, int64_t step,
                                     const std::vector<std::pair<std::string, Tensor>>& tensors,
                                     std::map<std::string, std::string> metadata) {
  if (step < 0)
    throw RuntimeError("cannot save a checkpoint in '" + dir + "': step " + std::to_string(step) +
                       " is negative");
  if (metadata.contains(kStepMetadataKey))
    throw RuntimeError("cannot save a checkpoint in '" + dir +
                       "': the metadata key \"step\" is reserved for the step");
  metadata[kStepMetadataKey] = std::to_string(step);

  std::error_code ec;
  const fs::path root(dir);
  if (!fs::is_directory(root, ec)) {
    fs::create_directories(root, ec);
    if (ec) throw RuntimeError("cannot create checkpoint directory '" + dir + "': " + ec.message());
    // The new directory's own entry must survive a power loss too.
    const fs::path parent = fs::absolute(root).parent_path();
    sync_directory(parent.string());
  }

  const std::string name = step_file_name(step);
  const std::string path = (root / name).string();
  save_safetensors(path, tensors, metadata);  // durable once it returns
  AtomicFile latest((root / kLatestName).string());
  latest.write(name + "\n");
  latest.commit();
  return path;
}

std::string shard_file_path(const std::string& dir, int64_t step, int shard) {
  return (fs::path(dir) / ("step_" + std::to_string(step) + ".shard_" + std::to_string(shard) +
                           ".safetensors"))
      .string();
}

std::optional<LatestCheckpoint> find_latest_checkpoint(const std::string& dir) {
  LatestCheckpoint result;
  for (const auto& [step, path] : candidates(fs::path(dir), result.skipped)) {
    const std::string problem = problem_with(path, step);
    if (problem.empty()) {
      result.path = path.string();
      result.step = step;
      return result;
    }
    result.skipped.push_back(path.string() + ": " + problem);
  }
  return std::nullopt;
}

LoadedCheckpoint load_latest_checkpoint(const std::string& dir) {
  LoadedCheckpoint result;
  for (const auto& [step, path] : candidates(fs::path(dir), result.latest.skipped)) {
    std::string problem = problem_with(path, step);
    if (problem.empty()) {
      try {
        result.checkpoint = load_safetensors(path.string());
        result.latest.path = path.string();
        result.latest.step = step;
        return result;
      } catch (const RuntimeError& e) {
        problem = e.what();
      }
    }
    result.latest.skipped.push_back(path.string() + ": " + problem);
  }
  return result;
}

void check_checkpoint_directory(const std::string& dir) {
  const std::string what = "cannot write checkpoints to '" + dir + "': ";
  std::error_code ec;
  const fs::path root(dir);
  const fs::file_status status = fs::status(root, ec);
  if (fs::exists(status) && !fs::is_directory(status))
    throw RuntimeError(what + "it exists and is not a directory");
  if (!fs::exists(status)) {
    fs::create_directories(root, ec);
    if (ec) throw RuntimeError(what + "cannot create the directory: " + ec.message());
    sync_directory(fs::absolute(root).parent_path().string());
  }
  // A real file, written and removed: access(W_OK) says yes to root on a read-only mount.
  const std::string probe = (root / (".write_test.tmp." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeError(what + "cannot create a file in it: " + std::strerror(errno));
  const char byte = '\n';
  const bool wrote = ::write(fd, &byte, 1) == 1;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!wrote) throw RuntimeError(what + "cannot write a file in it: " + std::strerror(err));
}

std::vector<std::string> prune_checkpoints(const std::string& dir, int keep) {
  if (keep < 1)
    throw RuntimeError("cannot prune checkpoints in '" + dir + "': keep is " +
                       std::to_string(keep) + ", it must be at least 1");
  const std::optional<LatestCheckpoint> latest = find_latest_checkpoint(dir);
  if (!latest) return {};
  std::vector<std::pair<int64_t, fs::path>> older;  // step files below the resume point
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(fs::path(dir), ec)) {
    const std::optional<int64_t> step = parse_step_file_name(entry.path().filename().string());
    if (step && *step < latest->step) older.emplace_back(*step, entry.path());
  }
  std::sort(older.begin(), older.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> removed;
  auto remove = [&](const fs::path& path) {
    if (!fs::remove(path, ec) && ec)
      throw RuntimeError("cannot remove old checkpoint '" + path.string() + "': " + ec.message());
    removed.push_back(path.string());
  };
  std::set<int64_t> kept{latest->step};
  for (size_t i = 0; i < older.size() && i < static_cast<size_t>(keep - 1); ++i)
    kept.insert(older[i].first);
  // The best held-out loss among the files the rule above keeps and those it would remove.
  std::optional<std::pair<double, int64_t>> best;
  const auto consider = [&](int64_t step, const fs::path& path) {
    std::map<std::string, std::string> metadata;
    try {
      metadata = check_safetensors(path.string());
    } catch (const RuntimeError&) {
      return;
    }
    const auto it = metadata.find(kEvalLossMetadataKey);
    if (it == metadata.end()) return;
    char* end = nullptr;
    const double loss = std::strtod(it->second.c_str(), &end);
    if (end == it->second.c_str() || *end != '\0' || !std::isfinite(loss)) return;
    if (!best || std::make_pair(loss, step) < *best) best = std::make_pair(loss, step);
  };
  consider(latest->step, fs::path(latest->path));
  for (const auto& [step, path] : older)
    consider(step, path);
  if (best) kept.insert(best->second);
  for (const auto& [step, path] : older)
    if (!kept.contains(step)) remove(path);
  // Shards go with their step file; below the resume point, a shard whose step file is gone
  // (pruned, or a save that crashed before committing) is removed too.
  std::vector<fs::path> orphans;
  for (const fs::directory_entry& entry : fs::directory_iterator(fs::path(dir), ec)) {
    const auto shard = parse_shard_file_name(entry.path().filename().string());
    if (shard && shard->first < latest->step && !kept.contains(shard->first)) orphans.push_back(entry.path());
  }
  for (const fs::path& path : orphans)
    remove(path);
  return removed;
}

}  // namespace ein
