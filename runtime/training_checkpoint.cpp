// The training-run checkpoint directory. The commit order is what makes SIGKILL safe:
// 1. step_<N>.safetensors is written to a temp file, fsynced and renamed (AtomicFile);
// 2. only then is `latest` rewritten, again through AtomicFile.
// A kill before 1 completes leaves a stray temp file and the old `latest`; a kill between 1
// and 2 leaves `latest` at the previous checkpoint, which is still there and valid.
#include <ein/training_checkpoint.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

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

/// The file name `dir/latest` holds (whitespace trimmed), or "" when it cannot be read.
std::string read_latest(const fs::path& dir) {
  std::ifstream in(dir / kLatestName);
  if (!in) return "";
  std::ostringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  s.erase(std::find_if_not(s.rbegin(), s.rend(), space).base(), s.end());
  s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), space));
  return s;
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

std::optional<LatestCheckpoint> find_latest_checkpoint(const std::string& dir) {
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return std::nullopt;
  LatestCheckpoint result;

  // 1. What `latest` names, when it names a step file that checks out.
  const std::string named = read_latest(root);
  std::string named_path;
  if (!named.empty()) {
    named_path = (root / named).string();
    if (const std::optional<int64_t> step = parse_step_file_name(named)) {
      const std::string problem = problem_with(root / named, *step);
      if (problem.empty()) {
        result.path = named_path;
        result.step = *step;
        return result;
      }
      result.skipped.push_back(named_path + ": " + problem);
    } else {
      result.skipped.push_back((root / kLatestName).string() + ": names '" + named +
                               "', not a step_<N>.safetensors file");
    }
  }

  // 2. Otherwise the newest step file that checks out.
  std::vector<std::pair<int64_t, fs::path>> candidates;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    const std::optional<int64_t> step = parse_step_file_name(entry.path().filename().string());
    if (step && entry.path().string() != named_path) candidates.emplace_back(*step, entry.path());
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [step, path] : candidates) {
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
  for (size_t i = static_cast<size_t>(keep - 1); i < older.size(); ++i) {
    if (!fs::remove(older[i].second, ec) && ec)
      throw RuntimeError("cannot remove old checkpoint '" + older[i].second.string() +
                         "': " + ec.message());
    removed.push_back(older[i].second.string());
  }
  return removed;
}

}  // namespace ein
