// A full disk, simulated with RLIMIT_FSIZE in the child (writes past the limit
// fail with EFBIG; SIGXFSZ is ignored by AtomicFile so the error is reported):
// a clear error naming the file, a non-zero exit, no partial target file and
// no temporary left, and the previous file (or checkpoint) intact.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "reliability/child_process.hpp"
#include "test_paths.hpp"
#include "train/trainer_fixtures.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/checksum.hpp"
#include "trex/core/jsonl.hpp"

namespace {

namespace fs = std::filesystem;
using trex::test::run_child;
using trex::test::TempDir;

std::vector<std::string> temps_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp.") != std::string::npos || name.rfind(".tmp-", 0) == 0)
      out.push_back(e.path().string());
  }
  return out;
}

trex::test::ChildOptions limited(long long bytes) {
  trex::test::ChildOptions o;
  o.file_size_limit = bytes;
  return o;
}

std::string first_error_line(const std::string& output) {
  const size_t at = output.find("trex: error: ");
  if (at == std::string::npos) return output;
  return output.substr(at, output.find('\n', at) - at);
}

TEST(FullDisk, DatasetWriteFailsClearlyAndKeepsTheOldFile) {
  TempDir tmp;
  const std::string out = tmp.file("records.jsonl");
  auto args = [&](int n) {
    return "or synth --n " + std::to_string(n) +
           " --families knapsack --seed 3 --reproducible --quiet --jobs 0 --out " + out;
  };
  // The old file: a small complete run.
  auto r = run_child(args(2), tmp.file("old.log"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string old = trex::read_file(out);
  ASSERT_LT(old.size(), 20000u);
  // The new run's file is larger than the limit.
  r = run_child(args(40), tmp.file("full.log"), limited(20000));
  EXPECT_FALSE(r.killed) << "SIGXFSZ killed the process";
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("trex: error: " + out + ": write failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("File too large (errno 27); nothing was written (the file keeps its "
                          "previous content, if any)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(trex::read_file(out), old);  // the previous file, intact
  EXPECT_TRUE(temps_in(tmp.path()).empty());
  std::printf("[full-disk] or synth under RLIMIT_FSIZE=20000: exit %d, %s\n", r.exit_code,
              first_error_line(r.output).c_str());
  // Without a previous file: no partial file at all.
  fs::remove(out);
  r = run_child(args(40), tmp.file("full2.log"), limited(20000));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(temps_in(tmp.path()).empty());
}

TEST(FullDisk, CheckpointWriteFailsClearlyAndKeepsThePreviousCheckpoint) {
  TempDir tmp;
  trex::test::write_tiny_training_data(tmp.path());
  const nlohmann::json run = trex::test::tiny_cpt_run_json(1, 16);
  trex::write_file_atomic(tmp.file("run.json"), run.dump(2));
  const std::string args = "train --quiet --config " + tmp.file("run.json");
  auto r = run_child(args, tmp.file("first.log"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ckpts = tmp.file("out/checkpoints");
  const uintmax_t model_bytes = fs::file_size(ckpts + "/step-00000001/model.safetensors");
  // Room for everything but a second model file.
  r = run_child(args + " --resume --steps 2", tmp.file("full.log"),
                limited(static_cast<long long>(model_bytes / 2)));
  EXPECT_FALSE(r.killed) << "SIGXFSZ killed the process";
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("trex: error: " + ckpts + "/step-00000002: checkpoint not written (" +
                          ckpts + "/latest still names the previous one): "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("/model.safetensors: write failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("File too large (errno 27)"), std::string::npos) << r.output;
  EXPECT_EQ(trex::read_file(ckpts + "/latest"), "step-00000001\n");
  EXPECT_FALSE(fs::exists(ckpts + "/step-00000002"));
  EXPECT_TRUE(trex::verify_checksum_manifest(ckpts + "/step-00000001").has_manifest);
  EXPECT_TRUE(temps_in(ckpts).empty());
  std::printf("[full-disk] trex train checkpoint under RLIMIT_FSIZE=%ju: exit %d, %s\n",
              model_bytes / 2, r.exit_code, first_error_line(r.output).c_str());
  // With room again, the resume continues from the intact checkpoint.
  r = run_child(args + " --resume --steps 2", tmp.file("again.log"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(trex::read_file(ckpts + "/latest"), "step-00000002\n");
  EXPECT_EQ(trex::read_jsonl(tmp.file("out/metrics.jsonl")).size(), 2u);
}

}  // namespace
