// Training fault injection (docs/training.md, "Fault injection"): a NaN / Inf
// in a gradient, an activation and a loaded weight, a loss spike, and a
// corrupted checkpoint file are each detected and reported with what was done.
// Each case runs the real `trex train` and prints the message it gives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "train/trainer_fixtures.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/checksum.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/train/checkpoint.hpp"
#include "trex/train/run_config.hpp"
#include "trex/train/trainer.hpp"

namespace {

namespace fs = std::filesystem;
using trex::test::run_trex;
using trex::test::TempDir;

// A tiny `trex train` setup in `dir`: tiny-v4, one sequence per step.
nlohmann::json tiny_run(const TempDir& dir, int steps) {
  trex::test::write_tiny_training_data(dir.path());
  nlohmann::json run = trex::test::tiny_cpt_run_json(steps, 24);
  run["schedule"] = {{"peak_lr", 3e-3}, {"min_lr", 3e-4}, {"warmup_steps", 1}};
  run["checkpoint_interval"] = 1;
  return run;
}

trex::test::CliRun train(const TempDir& dir, const nlohmann::json& run,
                         const std::string& extra = "") {
  trex::write_file_atomic(dir.file("run.json"), run.dump(2));
  return run_trex("train --config " + dir.file("run.json") + " --quiet " + extra);
}

// The lines of `output` containing `needle` (for the printed figures).
std::string lines_with(const std::string& output, const std::string& needle) {
  std::string out, line;
  std::istringstream in(output);
  while (std::getline(in, line))
    if (line.find(needle) != std::string::npos || line.find("fault injection") != std::string::npos)
      out += "    " + line + "\n";
  return out;
}

void report(const std::string& fault, const std::string& output, const std::string& needle) {
  std::printf("[fault] %s ->\n%s", fault.c_str(), lines_with(output, needle).c_str());
  std::fflush(stdout);
}

std::vector<nlohmann::json> metrics(const TempDir& dir) {
  return trex::read_jsonl(dir.file("out/metrics.jsonl"));
}

void flip_byte(const std::string& path, double where) {
  std::string bytes = trex::read_file(path);
  ASSERT_FALSE(bytes.empty()) << path;
  const size_t at = static_cast<size_t>(where * static_cast<double>(bytes.size() - 1));
  bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);  // in place, as a bad disk would
  out << bytes;
}

TEST(FaultChecksum, Crc32cKnownValuesAndChunking) {
  EXPECT_EQ(trex::crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(trex::crc32c(""), 0u);
  std::mt19937 rng(5);
  std::string data(1000, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  // Bitwise reference.
  uint32_t slow = 0xFFFFFFFFu;
  for (unsigned char c : data) {
    slow ^= c;
    for (int k = 0; k < 8; ++k) slow = (slow >> 1) ^ (0x82F63B78u & (0u - (slow & 1u)));
  }
  slow = ~slow;
  EXPECT_EQ(trex::crc32c(data), slow);
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{333}, size_t{999}})
    EXPECT_EQ(trex::crc32c(std::string_view(data).substr(split),
                           trex::crc32c(std::string_view(data).substr(0, split))),
              slow)
        << split;
}

TEST(FaultInject, ConfigKeyIsParsedAndChecked) {
  const auto f = trex::train::FaultInjection::parse("nan_grad@step=3");
  EXPECT_EQ(f.kind, "nan_grad");
  EXPECT_EQ(f.step, 3);
  EXPECT_EQ(f.text(), "nan_grad@step=3");
  EXPECT_EQ(trex::train::FaultInjection::parse("nan_weight_on_load").step, 0);
  for (const char* bad : {"nan_grad", "nan_grad@3", "nan_grad@step=0", "nan_grad@step=x",
                          "fire@step=2", "nan_weight_on_load@step=1"})
    EXPECT_THROW(trex::train::FaultInjection::parse(bad), trex::Error) << bad;
  TempDir dir;
  nlohmann::json run = tiny_run(dir, 2);
  run["debug"] = {{"inject", {"explode@step=1"}}};
  const auto r = train(dir, run);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("field 'debug.inject': unknown fault \"explode@step=1\""),
            std::string::npos)
      << r.output;
}

// NaN / Inf in a gradient: the global norm is not finite, the step is skipped.
TEST(FaultInject, NonFiniteGradientSkipsTheStep) {
  for (const std::string kind : {"nan_grad", "inf_grad"}) {
    TempDir dir;
    nlohmann::json run = tiny_run(dir, 3);
    run["debug"] = {{"inject", {kind + "@step=2"}}};
    const auto r = train(dir, run);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string value = kind == "nan_grad" ? "NaN" : "Inf";
    EXPECT_NE(r.output.find("fault injection (debug.inject " + kind +
                            "@step=2): a gradient value of 'embed.weight' set to " + value),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("step 2 skipped: non-finite gradient norm (first non-finite "
                            "gradient in 'embed.weight') (no update)"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("skipped steps    1"), std::string::npos) << r.output;
    const auto m = metrics(dir);
    ASSERT_EQ(m.size(), 3u);
    EXPECT_EQ(m[1]["skipped"], 1.0);
    EXPECT_EQ(m[1]["fault_injected"], 1.0);
    EXPECT_TRUE(m[1]["grad_norm"].is_null());
    EXPECT_EQ(m[0]["skipped"], 0.0);
    EXPECT_EQ(m[2]["skipped"], 0.0);  // the next step trains normally
    EXPECT_FALSE(m[2].contains("fault_injected"));
    const auto state = trex::train::read_trainer_state(dir.file("out/checkpoints/step-00000003"));
    EXPECT_EQ(state["optimizer_step"], 2);  // 3 steps, one without an update
    report(kind + "@step=2", r.output, "step 2");
  }
}

// NaN / Inf activation: the loss is not finite, the step is skipped.
TEST(FaultInject, NonFiniteActivationSkipsTheStep) {
  for (const std::string kind : {"nan_activation", "inf_activation"}) {
    TempDir dir;
    nlohmann::json run = tiny_run(dir, 3);
    run["debug"] = {{"inject", {kind + "@step=2"}}};
    const auto r = train(dir, run);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("fault injection (debug.inject " + kind + "@step=2)"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("step 2 skipped: non-finite loss (no update)"), std::string::npos)
        << r.output;
    const auto m = metrics(dir);
    ASSERT_EQ(m.size(), 3u);
    EXPECT_EQ(m[1]["skipped"], 1.0);
    EXPECT_TRUE(m[1]["loss"].is_null());
    EXPECT_EQ(m[1]["fault_injected"], 1.0);
    EXPECT_EQ(m[2]["skipped"], 0.0);  // the embedding row is restored: step 3 is finite
    EXPECT_TRUE(m[2]["loss"].is_number());
    report(kind + "@step=2", r.output, "step 2");
  }
}

// A loss spike: detected (z-score), reported and counted; the update is kept.
TEST(FaultInject, LossSpikeIsReported) {
  TempDir dir;
  nlohmann::json run = tiny_run(dir, 5);
  run["spike"] = {{"window", 3}, {"z_threshold", 4.0}};
  run["debug"] = {{"inject", {"loss_spike@step=5"}}};
  const auto r = train(dir, run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 5: loss spike"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("reported and counted, the step's update is kept"), std::string::npos);
  EXPECT_NE(r.output.find("loss spikes      1"), std::string::npos) << r.output;
  const auto m = metrics(dir);
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[4]["spike"], 1.0);
  EXPECT_GT(m[4]["loss_z"].get<double>(), 4.0);
  EXPECT_EQ(m[4]["skipped"], 0.0);
  EXPECT_EQ(m[3]["spike"], 0.0);
  report("loss_spike@step=5", r.output, "step 5");
}

// NaN in a loaded weight: refused before the first step, naming the tensor and file.
TEST(FaultInject, NonFiniteLoadedWeightRefusesToStart) {
  TempDir dir;
  nlohmann::json run = tiny_run(dir, 2);
  ASSERT_EQ(train(dir, run).exit_code, 0);
  // The injection hook on a resume.
  run["debug"] = {{"inject", {"nan_weight_on_load"}}};
  const auto r = train(dir, run, "--resume --steps 3");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::string file = dir.file("out/checkpoints/step-00000002/model.safetensors");
  EXPECT_NE(r.output.find(file + ": loaded weight tensor '"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("holds 1 non-finite value (first: nan at element 0"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("refusing to start training from these weights"), std::string::npos);
  EXPECT_EQ(metrics(dir).size(), 2u);  // nothing trained
  report("nan_weight_on_load (resume)", r.output, "non-finite");

  // A real one: a checkpoint saved with a NaN weight (valid checksums) as model.init_checkpoint.
  trex::train::RunConfig c = trex::test::tiny_run_config(dir.path(), trex::train::DataMode::kCpt);
  c.out_dir = dir.file("poisoned");
  std::string saved;
  {
    trex::train::Trainer t(c, {.quiet = true, .write_metrics = false});
    t.model().params().value("layers.0.attn_norm.weight")[3] = INFINITY;
    saved = t.save_checkpoint();
  }
  nlohmann::json from = tiny_run(dir, 2);
  from["model"] = {{"init_checkpoint", saved}};
  from["out_dir"] = "from-poisoned";
  const auto p = train(dir, from);
  EXPECT_EQ(p.exit_code, 1) << p.output;
  EXPECT_NE(p.output.find(saved + "/model.safetensors: loaded weight tensor "
                                  "'layers.0.attn_norm.weight' holds 1 non-finite value (first: "
                                  "inf at element 3"),
            std::string::npos)
      << p.output;
  report("Inf saved in a checkpoint weight (init_checkpoint)", p.output, "non-finite");
}

// A flipped byte in any checkpoint file: the resume refuses, naming the file;
// the run does not start from scratch.
// Processes sharing a checkpoint split its verification: part k of n checks
// every n-th file of the manifest (name order), so the parts together check
// each file once; once all parts passed, opening a file does not read it again.
TEST(FaultChecksum, ManifestPartsSplitTheFilesAndRememberTheResult) {
  TempDir dir;
  for (const char* name : {"a.bin", "b.bin", "c.bin"}) {
    std::ofstream out(dir.file(name), std::ios::binary);
    out << std::string(4096, name[0]);
  }
  trex::write_checksum_manifest(dir.path(), std::vector<std::string>{"a.bin", "b.bin", "c.bin"});
  const trex::ManifestCheck part0 = trex::verify_checksum_manifest(dir.path(), 0, 2);
  const trex::ManifestCheck part1 = trex::verify_checksum_manifest(dir.path(), 1, 2);
  ASSERT_EQ(part0.files.size(), 2u);  // a, c
  ASSERT_EQ(part1.files.size(), 1u);  // b
  EXPECT_EQ(fs::path(part1.files[0]).filename(), "b.bin");
  EXPECT_THROW(trex::verify_checksum_manifest(dir.path(), 2, 2), trex::Error);
  // b corrupt: only the part that holds it sees it, naming the file.
  const auto stamp = fs::last_write_time(dir.file("b.bin"));
  flip_byte(dir.file("b.bin"), 0.5);
  EXPECT_NO_THROW(trex::verify_checksum_manifest(dir.path(), 0, 2));
  try {
    trex::verify_checksum_manifest(dir.path(), 1, 2);
    FAIL() << "corrupt b.bin passed";
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.file_name(), dir.file("b.bin"));
  }
  EXPECT_THROW(trex::verify_file_against_manifest(dir.file("b.bin")), trex::Error);
  // Remembered as verified (as the ranks do after all parts passed): with the
  // same size, time stamp and inode the file is not read again, so this
  // (deliberately restored) corruption goes unseen — which proves no re-read.
  fs::last_write_time(dir.file("b.bin"), stamp);
  trex::remember_manifest_verified(dir.path());
  EXPECT_TRUE(trex::verify_file_against_manifest(dir.file("b.bin")));
  // A later change of the file (new time stamp) is checked again.
  flip_byte(dir.file("b.bin"), 0.25);
  EXPECT_THROW(trex::verify_file_against_manifest(dir.file("b.bin")), trex::Error);
}

TEST(FaultCheckpoint, FlippedByteRefusesToLoadNamingTheFile) {
  for (const std::string name :
       {"model.safetensors", "optimizer.safetensors", "trainer_state.json", "tokenizer.json"}) {
    TempDir dir;
    nlohmann::json run = tiny_run(dir, 2);
    ASSERT_EQ(train(dir, run).exit_code, 0);
    const std::string file = dir.file("out/checkpoints/step-00000002/" + name);
    flip_byte(file, 0.6);
    const auto r = train(dir, run, "--resume --steps 3");
    EXPECT_EQ(r.exit_code, 1) << name << "\n" << r.output;
    EXPECT_NE(r.output.find(file + ": CRC-32C "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("does not match the manifest's"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("the file is corrupt; refusing to load it"), std::string::npos);
    EXPECT_EQ(metrics(dir).size(), 2u);  // nothing trained, nothing restarted
    EXPECT_FALSE(fs::exists(dir.file("out/checkpoints/step-00000003")));
    report("flipped byte in " + name, r.output, "CRC-32C");
  }
  // As model.init_checkpoint, and through any reader of the weights.
  TempDir dir;
  nlohmann::json run = tiny_run(dir, 1);
  ASSERT_EQ(train(dir, run).exit_code, 0);
  const std::string ckpt = dir.file("out/checkpoints/step-00000001");
  flip_byte(ckpt + "/model.safetensors", 0.9);
  nlohmann::json from = tiny_run(dir, 1);
  from["model"] = {{"init_checkpoint", ckpt}};
  from["out_dir"] = "from";
  const auto r = train(dir, from);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(ckpt + "/model.safetensors: CRC-32C "), std::string::npos) << r.output;
  EXPECT_THROW(trex::model::Model<float>::from_checkpoint(ckpt), trex::Error);
  // A truncated file and a missing file are refused too.
  TempDir d2;
  ASSERT_EQ(train(d2, tiny_run(d2, 1)).exit_code, 0);
  const std::string c2 = d2.file("out/checkpoints/step-00000001");
  fs::resize_file(c2 + "/optimizer.safetensors", fs::file_size(c2 + "/optimizer.safetensors") - 4);
  auto t = train(d2, tiny_run(d2, 1), "--resume --steps 2");
  EXPECT_EQ(t.exit_code, 1);
  EXPECT_NE(t.output.find("the file is truncated or corrupt; refusing to load it"),
            std::string::npos)
      << t.output;
  report("truncated optimizer.safetensors", t.output, "truncated");
  fs::remove(c2 + "/optimizer.safetensors");
  t = train(d2, tiny_run(d2, 1), "--resume --steps 2");
  EXPECT_EQ(t.exit_code, 1);
  EXPECT_NE(t.output.find("is missing: the checkpoint is incomplete; refusing to load it"),
            std::string::npos)
      << t.output;
}

// Checkpoints written before checksums (no manifest.json) still load, with a warning.
TEST(FaultCheckpoint, CheckpointWithoutManifestLoadsWithAWarning) {
  TempDir dir;
  nlohmann::json run = tiny_run(dir, 2);
  ASSERT_EQ(train(dir, run).exit_code, 0);
  const std::string ckpt = dir.file("out/checkpoints/step-00000002");
  const auto manifest = nlohmann::json::parse(trex::read_file(ckpt + "/manifest.json"));
  EXPECT_EQ(manifest["algorithm"], "crc32c");
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json",
                        "optimizer.safetensors", "trainer_state.json"})
    EXPECT_TRUE(manifest["files"].contains(f)) << f;
  fs::remove(ckpt + "/manifest.json");
  const auto r = train(dir, run, "--resume --steps 3");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("has no manifest.json (written before checkpoints carried checksums): "
                          "loading it unverified"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(metrics(dir).size(), 3u);
}

}  // namespace
