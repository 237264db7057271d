// The training checkpoint directory: step files and `latest`, the fallback to the newest valid
// checkpoint when `latest` names a missing or corrupt file, leftover temp files ignored, and a
// writer killed with SIGKILL at random moments always leaving a valid checkpoint behind.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>
#include <iostream>
#include <thread>

#include <ein/training_checkpoint.h>

extern char** environ;

namespace ein {
namespace {

namespace fs = std::filesystem;

/// Set in the child process of KilledWhileWritingKeepsTheLastGoodCheckpoint: the directory
/// the child writes checkpoints into until it is killed.
constexpr const char* kChildDirVariable = "EIN_CHECKPOINT_KILL_TARGET_DIR";

/// A fresh directory per test, removed afterwards.
class TrainingCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ein_training_ckpt_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// A path inside the test's directory.
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  /// dir_ as a string.
  std::string dir() const { return dir_.string(); }

  fs::path dir_;
};

/// Model and optimizer tensors whose values encode `step`.
std::vector<std::pair<std::string, Tensor>> state_at(int64_t step, int64_t n = 6) {
  return {{"model.w", full({n}, static_cast<double>(step), DType::f32)},
          {"optim.m.w", full({n}, static_cast<double>(-step), DType::f32)},
          {"optim.t", full({}, static_cast<double>(step), DType::i64)}};
}

/// The contents of a small text file.
std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST_F(TrainingCheckpointTest, SaveWritesTheStepFileThenLatest) {
  EXPECT_EQ(find_latest_checkpoint(dir()), std::nullopt);  // no directory yet
  EXPECT_EQ(save_training_checkpoint(dir(), 10, state_at(10), {{"seed", "7"}}),
            path("step_10.safetensors"));
  EXPECT_EQ(save_training_checkpoint(dir(), 20, state_at(20), {{"seed", "7"}}),
            path("step_20.safetensors"));
  EXPECT_EQ(read_text(path("latest")), "step_20.safetensors\n");
  const std::optional<LatestCheckpoint> latest = find_latest_checkpoint(dir());
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->path, path("step_20.safetensors"));
  EXPECT_EQ(latest->step, 20);
  EXPECT_TRUE(latest->skipped.empty());
  const Checkpoint c = load_safetensors(latest->path);
  EXPECT_EQ(c.metadata, (std::map<std::string, std::string>{{"seed", "7"}, {"step", "20"}}));
  EXPECT_EQ(c.at("model.w").to_vector<float>(), std::vector<float>(6, 20.0f));
  EXPECT_EQ(c.at("optim.t").item(), 20);
  // Nothing else in the directory: no temp files survive a successful save.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 3);
}

TEST_F(TrainingCheckpointTest, BadArgumentsAreRefused) {
  EXPECT_THROW(save_training_checkpoint(dir(), -1, state_at(1)), RuntimeError);
  try {
    save_training_checkpoint(dir(), 1, state_at(1), {{"step", "1"}});
    ADD_FAILURE() << "a metadata key \"step\" was accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("reserved"), std::string::npos) << e.what();
  }
}

TEST_F(TrainingCheckpointTest, LeftoverTempFilesAreIgnored) {
  save_training_checkpoint(dir(), 5, state_at(5));
  // What a writer killed mid-write leaves: a partial temp file of a newer step.
  std::ofstream(path("step_6.safetensors.tmp.4242")) << "partial";
  std::ofstream(path("latest.tmp.4242")) << "step_6.safetensors\n";
  const std::optional<LatestCheckpoint> latest = find_latest_checkpoint(dir());
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 5);
  EXPECT_TRUE(latest->skipped.empty());
}

TEST_F(TrainingCheckpointTest, FallsBackWhenTheNewestIsTruncated) {
  save_training_checkpoint(dir(), 100, state_at(100));
  save_training_checkpoint(dir(), 200, state_at(200));
  fs::resize_file(path("step_200.safetensors"), fs::file_size(path("step_200.safetensors")) - 5);
  const std::optional<LatestCheckpoint> latest = find_latest_checkpoint(dir());
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 100);
  ASSERT_EQ(latest->skipped.size(), 1u);
  EXPECT_TRUE(latest->skipped[0].starts_with(path("step_200.safetensors") + ": "));
  EXPECT_NE(latest->skipped[0].find("truncated"), std::string::npos) << latest->skipped[0];
  EXPECT_EQ(load_safetensors(latest->path).at("model.w").to_vector<float>()[0], 100.0f);
}

TEST_F(TrainingCheckpointTest, FallsBackWhenLatestIsMissingOrWrong) {
  save_training_checkpoint(dir(), 1, state_at(1));
  save_training_checkpoint(dir(), 3, state_at(3));
  save_training_checkpoint(dir(), 2, state_at(2));    // `latest` now names step 2
  EXPECT_EQ(find_latest_checkpoint(dir())->step, 2);  // latest is authoritative when valid

  fs::remove(path("latest"));
  EXPECT_EQ(find_latest_checkpoint(dir())->step, 3);  // the highest step, not the newest file

  std::ofstream(path("latest")) << "step_9.safetensors\n";  // names a missing file
  std::optional<LatestCheckpoint> latest = find_latest_checkpoint(dir());
  EXPECT_EQ(latest->step, 3);
  ASSERT_EQ(latest->skipped.size(), 1u);
  EXPECT_NE(latest->skipped[0].find("No such file"), std::string::npos) << latest->skipped[0];

  std::ofstream(path("latest")) << "../../etc/passwd";  // not a step file name
  latest = find_latest_checkpoint(dir());
  EXPECT_EQ(latest->step, 3);
  EXPECT_NE(latest->skipped.at(0).find("not a step_<N>.safetensors file"), std::string::npos);

  // A step file whose metadata disagrees with its name (copied by hand) is passed over.
  fs::copy_file(path("step_1.safetensors"), path("step_7.safetensors"));
  latest = find_latest_checkpoint(dir());
  EXPECT_EQ(latest->step, 3);
  EXPECT_NE(latest->skipped.back().find("its metadata says step 1, its name says 7"),
            std::string::npos);

  for (int step : {1, 2, 3, 7})
    fs::resize_file(path("step_" + std::to_string(step) + ".safetensors"), 4);
  EXPECT_EQ(find_latest_checkpoint(dir()), std::nullopt);
}

TEST_F(TrainingCheckpointTest, PruningKeepsTheResumePointAndNewer) {
  for (int step = 1; step <= 5; ++step)
    save_training_checkpoint(dir(), step * 10, state_at(step * 10));
  EXPECT_EQ(prune_checkpoints(dir(), 2),
            (std::vector<std::string>{path("step_30.safetensors"), path("step_20.safetensors"),
                                      path("step_10.safetensors")}));
  EXPECT_TRUE(fs::exists(path("step_40.safetensors")));
  EXPECT_EQ(find_latest_checkpoint(dir())->step, 50);
  // With `latest` at 40, the newer 50 stays too, and keep = 1 leaves exactly those two.
  std::ofstream(path("latest")) << "step_40.safetensors\n";
  EXPECT_TRUE(prune_checkpoints(dir(), 1).empty());
  EXPECT_TRUE(fs::exists(path("step_50.safetensors")));
  EXPECT_THROW(prune_checkpoints(dir(), 0), RuntimeError);
  // No valid checkpoint: nothing is deleted.
  fs::resize_file(path("step_40.safetensors"), 3);
  fs::resize_file(path("step_50.safetensors"), 3);
  EXPECT_TRUE(prune_checkpoints(dir(), 1).empty());
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 3);
}

// With held-out losses in the metadata, the lowest one's checkpoint stays besides the `keep`
// newest (nanoGPT's best checkpoint); a missing, unreadable or NaN loss never counts, and of
// equal losses the earliest is kept.
TEST_F(TrainingCheckpointTest, PruningKeepsTheLowestEvalLoss) {
  const auto save = [&](int64_t step, const std::string& loss) {
    std::map<std::string, std::string> metadata;
    if (!loss.empty()) metadata[kEvalLossMetadataKey] = loss;
    save_training_checkpoint(dir(), step, state_at(step), metadata);
  };
  save(10, "5.5");
  save(20, "2.25");  // the lowest
  save(30, "3");
  save(40, "nan");
  save(50, "");
  save(60, "4");
  EXPECT_EQ(prune_checkpoints(dir(), 2),
            (std::vector<std::string>{path("step_40.safetensors"), path("step_30.safetensors"),
                                      path("step_10.safetensors")}));
  EXPECT_TRUE(fs::exists(path("step_20.safetensors")));
  EXPECT_TRUE(fs::exists(path("step_50.safetensors")));
  // A newer, lower loss takes its place; the earliest of two equal ones stays.
  save(70, "1.5");
  save(80, "1.5");
  save(90, "");
  EXPECT_EQ(prune_checkpoints(dir(), 1),
            (std::vector<std::string>{path("step_80.safetensors"), path("step_60.safetensors"),
                                      path("step_50.safetensors"), path("step_20.safetensors")}));
  EXPECT_TRUE(fs::exists(path("step_70.safetensors")));
  // An unreadable file's loss does not count: 70 truncated, nothing with a loss is left but it.
  fs::resize_file(path("step_70.safetensors"), 10);
  EXPECT_EQ(prune_checkpoints(dir(), 1), (std::vector<std::string>{path("step_70.safetensors")}));
}

// Not a test on its own: the child process of the next test. It writes checkpoints of ~8 MB
// into $EIN_CHECKPOINT_KILL_TARGET_DIR, resuming after the latest one, until it is killed.
// A sharded checkpoint's shards go with their step file; a shard whose step file never came
// (a save that crashed before rank 0 committed it) goes once a newer checkpoint is the resume
// point; shard files are never resume candidates themselves.
TEST_F(TrainingCheckpointTest, PruningRemovesShardsWithTheirStepAndOrphans) {
  const auto shard = [&](int64_t step, int r) {
    save_safetensors(shard_file_path(dir(), step, r), state_at(step),
                     {{kStepMetadataKey, std::to_string(step)}});
  };
  fs::create_directories(dir_);
  for (int step = 1; step <= 3; ++step) {
    shard(step * 10, 1);
    shard(step * 10, 2);
    save_training_checkpoint(dir(), step * 10, state_at(step * 10), {{kShardsMetadataKey, "3"}});
  }
  shard(25, 1);  // an uncommitted save between 20 and 30
  shard(35, 1);  // one after the resume point: a save that may still be under way
  EXPECT_EQ(shard_file_path(dir(), 10, 2), path("step_10.shard_2.safetensors"));
  EXPECT_EQ(find_latest_checkpoint(dir())->step, 30);
  std::vector<std::string> removed = prune_checkpoints(dir(), 2);
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{path("step_10.safetensors"),
                                               path("step_10.shard_1.safetensors"),
                                               path("step_10.shard_2.safetensors"),
                                               path("step_25.shard_1.safetensors")}));
  for (const char* kept : {"step_20.shard_1.safetensors", "step_20.shard_2.safetensors",
                           "step_30.shard_2.safetensors", "step_35.shard_1.safetensors"})
    EXPECT_TRUE(fs::exists(path(kept))) << kept;
}

TEST(TrainingCheckpointKillTarget, WritesUntilKilled) {
  const char* dir = std::getenv(kChildDirVariable);
  if (dir == nullptr) GTEST_SKIP() << "runs only as the child of the SIGKILL test";
  const std::optional<LatestCheckpoint> latest = find_latest_checkpoint(dir);
  // Stops by itself if the parent died without killing it (then reparented) or after 2000
  // checkpoints, so a failed parent never leaves a writer filling the disk.
  const pid_t parent = ::getppid();
  const int64_t first = latest ? latest->step + 1 : 0;
  for (int64_t step = first; step < first + 2000 && ::getppid() == parent; ++step)
    save_training_checkpoint(dir, step, state_at(step, 1 << 20));
}

TEST_F(TrainingCheckpointTest, KilledWhileWritingKeepsTheLastGoodCheckpoint) {
  fs::create_directories(dir_);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string filter = "--gtest_filter=TrainingCheckpointKillTarget.WritesUntilKilled";
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e)
    env_strings.emplace_back(*e);
  env_strings.push_back(std::string(kChildDirVariable) + "=" + dir());
  std::vector<char*> envp;
  for (std::string& s : env_strings)
    envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string arg0 = self, arg1 = filter;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};

  // The child's gtest banner would clutter this test's output.
  posix_spawn_file_actions_t quiet;
  ::posix_spawn_file_actions_init(&quiet);
  ::posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
  ::posix_spawn_file_actions_addopen(&quiet, 2, "/dev/null", O_WRONLY, 0);

  int64_t previous_step = -1;
  int torn_writes = 0;
  int misses = 0;  // rounds that killed a writer mid-file (a temp file left behind)
  for (int round = 0; round < 6; ++round) {
    pid_t pid = 0;
    ASSERT_EQ(::posix_spawn(&pid, self.c_str(), &quiet, nullptr, argv, envp.data()), 0);
    // Kill times spread over a write (a few ms each), different every round; doubled after
    // each round that ended before the first checkpoint, so a slow machine still gets one.
    std::this_thread::sleep_for(std::chrono::milliseconds((60 + 17 * round) << misses));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited by itself with status " << status;

    // Every step file that exists is complete (renames are atomic), and the latest one loads
    // with the values of its step.
    for (const fs::directory_entry& entry : fs::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (name.find(".tmp.") != std::string::npos) {
        ++torn_writes;
        fs::remove(entry.path());  // as an operator might; the next round counts afresh
      }
      if (name.starts_with("step_") && name.ends_with(".safetensors")) {
        EXPECT_NO_THROW(check_safetensors(entry.path().string())) << name;
      }
    }
    const std::optional<LatestCheckpoint> latest = find_latest_checkpoint(dir());
    if (!latest) {  // killed before its first checkpoint was durable
      misses = std::min(misses + 1, 5);
      continue;
    }
    EXPECT_TRUE(latest->skipped.empty());
    EXPECT_GE(latest->step, previous_step);
    previous_step = latest->step;
    const Checkpoint c = load_safetensors(latest->path);
    EXPECT_EQ(c.metadata.at("step"), std::to_string(latest->step));
    const std::vector<float> w = c.at("model.w").to_vector<float>();
    EXPECT_EQ(w.front(), static_cast<float>(latest->step));
    EXPECT_EQ(w.back(), static_cast<float>(latest->step));
  }
  ::posix_spawn_file_actions_destroy(&quiet);
  EXPECT_GE(previous_step, 0) << "no checkpoint was ever completed";
  std::cout << "killed 6 writers, " << torn_writes << " of them mid-file; last step "
            << previous_step << "\n";
}


// A newest checkpoint whose data fails its checksum passes the header checks, so
// find_latest_checkpoint() still picks it; load_latest_checkpoint() loads it, sees the
// mismatch and falls back to the one before, saying why.
TEST_F(TrainingCheckpointTest, LoadFallsBackPastAChecksumMismatch) {
  save_training_checkpoint(dir(), 1, state_at(1));
  const std::string newest = save_training_checkpoint(dir(), 2, state_at(2));
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-10, std::ios::end);  // inside optim.m.w's data
    f.put('\x7f');
  }
  ASSERT_EQ(find_latest_checkpoint(dir())->step, 2);
  const LoadedCheckpoint loaded = load_latest_checkpoint(dir());
  ASSERT_TRUE(loaded.checkpoint);
  EXPECT_EQ(loaded.latest.step, 1);
  EXPECT_TRUE(loaded.checkpoint->checksummed);
  EXPECT_EQ(loaded.checkpoint->at("model.w").to_vector<float>(), std::vector<float>(6, 1.0f));
  ASSERT_EQ(loaded.latest.skipped.size(), 1u);
  EXPECT_NE(loaded.latest.skipped[0].find("step_2.safetensors"), std::string::npos);
  EXPECT_NE(loaded.latest.skipped[0].find("does not match its checksum"), std::string::npos)
      << loaded.latest.skipped[0];

  // Nothing loads: no checkpoint, and every candidate with its reason.
  fs::remove(path("step_1.safetensors"));
  const LoadedCheckpoint none = load_latest_checkpoint(dir());
  EXPECT_FALSE(none.checkpoint);
  EXPECT_EQ(none.latest.skipped.size(), 1u);
}

// `latest` as a FIFO (reading would block) or a link to /dev/zero (reading would never end,
// then std::bad_alloc): passed over with the reason, the newest step file is used.
TEST_F(TrainingCheckpointTest, LatestThatIsNotARegularFileIsSkipped) {
  save_training_checkpoint(dir(), 3, state_at(3));
  fs::remove(path("latest"));
  ASSERT_EQ(::mkfifo(path("latest").c_str(), 0644), 0);
  std::optional<LatestCheckpoint> latest = find_latest_checkpoint(dir());
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 3);
  ASSERT_EQ(latest->skipped.size(), 1u);
  EXPECT_NE(latest->skipped[0].find("FIFO"), std::string::npos) << latest->skipped[0];

  fs::remove(path("latest"));
  fs::create_symlink("/dev/zero", path("latest"));
  latest = find_latest_checkpoint(dir());
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 3);
  ASSERT_EQ(latest->skipped.size(), 1u);
  EXPECT_NE(latest->skipped[0].find("not a regular file"), std::string::npos)
      << latest->skipped[0];

  // A FIFO as a step file is skipped too (check_safetensors opens without blocking).
  fs::remove(path("latest"));
  ASSERT_EQ(::mkfifo(path("step_9.safetensors").c_str(), 0644), 0);
  const LoadedCheckpoint loaded = load_latest_checkpoint(dir());
  ASSERT_TRUE(loaded.checkpoint);
  EXPECT_EQ(loaded.latest.step, 3);
  ASSERT_EQ(loaded.latest.skipped.size(), 1u);
  EXPECT_NE(loaded.latest.skipped[0].find("not a regular file but a FIFO"), std::string::npos)
      << loaded.latest.skipped[0];
}

// check_checkpoint_directory() creates a missing directory and fails, naming the path, where
// no file can be created (tested through a regular file in the path, which fails for root too).
TEST_F(TrainingCheckpointTest, DirectoryCheckCreatesOrRefuses) {
  check_checkpoint_directory(path("a/b"));
  EXPECT_TRUE(fs::is_directory(path("a/b")));
  EXPECT_TRUE(fs::is_empty(path("a/b")));  // the probe file is gone
  std::ofstream(path("file")) << "x";
  for (const std::string& bad : {path("file"), path("file/ck")}) {
    try {
      check_checkpoint_directory(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("cannot write checkpoints to '" + bad + "'"),
                std::string::npos)
          << e.what();
    }
  }
  if (::geteuid() != 0) {  // root writes into read-only directories
    fs::create_directories(path("ro"));
    fs::permissions(path("ro"), fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(check_checkpoint_directory(path("ro")), RuntimeError);
    fs::permissions(path("ro"), fs::perms::owner_all);
  }
}

}  // namespace
}  // namespace ein
