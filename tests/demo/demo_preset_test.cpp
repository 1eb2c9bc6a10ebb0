// The preset files of `trex demo` (configs/demo/*.toml): what they hold, how a
// name finds its file, the errors of a bad file (file, line and key named), and
// the command-line overrides winning over the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/demo/demo.hpp"
#include "trex/model/config.hpp"

namespace {

namespace fs = std::filesystem;
using trex::demo::DemoPreset;
using trex::test::TempDir;

std::string configs() {
  return trex::test::source_dir() + "/configs";
}

std::string smoke_text() {
  return trex::read_file(configs() + "/demo/smoke.toml");
}

// The smoke preset's text with `from` replaced by `to` (which must occur).
std::string edited_smoke(const std::string& from, const std::string& to) {
  std::string text = smoke_text();
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// A preset file in `dir` whose model path points back into the repository.
std::string write_preset(const TempDir& dir, const std::string& text) {
  std::string absolute_model = text;
  const std::string relative = "\"../models/demo-smoke.json\"";
  const size_t at = absolute_model.find(relative);
  if (at != std::string::npos)
    absolute_model.replace(at, relative.size(),
                           "\"" + configs() + "/models/demo-smoke.json" + "\"");
  const std::string path = dir.file("preset.toml");
  trex::write_file_atomic(path, absolute_model);
  return path;
}

// The line (1-based) of the first occurrence of `needle` in `text`.
long line_of(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  return 1 + static_cast<long>(std::count(text.begin(), text.begin() + at, '\n'));
}

TEST(DemoPreset, FilesHoldEachPresetsValues) {
  const DemoPreset smoke = trex::demo::demo_preset("smoke", configs());
  EXPECT_EQ(smoke.name, "smoke");
  EXPECT_EQ(smoke.data_preset, "default");
  EXPECT_EQ(smoke.sizes.sft_train, 24);
  EXPECT_EQ(smoke.sizes.public_items, 2);
  EXPECT_EQ(smoke.sizes.max_chars, 1600u);
  EXPECT_EQ(smoke.train_families.size(), 4u);
  EXPECT_EQ(smoke.heldout_families, (std::vector<std::string>{"diet", "knapsack"}));
  EXPECT_EQ(smoke.difficulty, "easy");
  EXPECT_EQ(smoke.vocab_size, 700);
  EXPECT_FALSE(smoke.bf16);
  EXPECT_EQ(smoke.seq_len, 1024);
  EXPECT_EQ(smoke.cpt_steps, 3);
  EXPECT_EQ(smoke.sft_lr, 2e-3);
  EXPECT_EQ(smoke.max_new_tokens, 24);
  EXPECT_EQ(smoke.model_config["hidden_size"], 64);
  EXPECT_EQ(smoke.model_config["compress_ratios"], nlohmann::json({4, 8, 0}));
  EXPECT_EQ(smoke.rl_steps, 2);
  EXPECT_EQ(smoke.rl_group_size, 2);

  const DemoPreset def = trex::demo::demo_preset("default", configs());
  EXPECT_EQ(def.sizes.test, 40);
  EXPECT_EQ(def.sizes.heldout_family, 30);
  EXPECT_EQ(def.sizes.cpt_problems, 2400);
  EXPECT_TRUE(def.bf16);
  EXPECT_EQ(def.cpt_lr, 3e-3);
  EXPECT_EQ(def.checkpoint_interval, 25);
  EXPECT_EQ(def.model_config["sliding_window"], 512);
  // The full preset's recipe in short: drills, a copy warm-up, then CPT and SFT.
  EXPECT_EQ(def.sizes.copy_drills, 8);
  EXPECT_EQ(def.sizes.renamed_share, 0.0);  // measured to cost the copy (docs/demo.md)
  EXPECT_EQ(def.copy_warmup_steps, 250);
  EXPECT_EQ(def.sft_steps, 320);
  EXPECT_EQ(def.rl_steps, 0);  // no RL stage until it is measured to gain in the budget
  EXPECT_EQ(def.rl_temperature, 0.7);
  EXPECT_EQ(def.rl_lr, 5e-5);

  const DemoPreset full = trex::demo::demo_preset("full", configs());
  EXPECT_EQ(full.data_preset, "full");
  EXPECT_EQ(full.sizes.copy_drills, 8);
  EXPECT_EQ(full.sizes.side_constraint_rate, 0.2);
  EXPECT_EQ(full.train_families.back(), "lot_sizing");
  EXPECT_EQ(full.copy_warmup_steps, 500);
  EXPECT_EQ(full.sft_steps, 700);
  EXPECT_EQ(full.model_config, def.model_config);

  // The demo models are valid model configs.
  for (const char* name : {"demo", "demo-smoke"})
    EXPECT_NO_THROW(trex::model::ModelConfig::load(configs() + "/models/" + name + ".json"))
        << name;
}

TEST(DemoPreset, NameSearchesTheConfigsFolderAndPathReadsTheFile) {
  // The tests run in the repository root: ./configs holds the presets.
  EXPECT_EQ(trex::demo::demo_preset("smoke").cpt_steps, 3);
  // A path is read as given and keeps its spelling as the name.
  TempDir dir;
  const std::string path =
      write_preset(dir, edited_smoke("steps = 3\nseq_len = 1024", "steps = 5\nseq_len = 1024"));
  const DemoPreset p = trex::demo::demo_preset(path);
  EXPECT_EQ(p.name, path);
  EXPECT_EQ(p.cpt_steps, 5);
  // --config-dir: NAME is <dir>/demo/NAME.toml.
  fs::create_directories(dir.file("configs/demo"));
  trex::write_file_atomic(dir.file("configs/demo/mine.toml"), trex::read_file(path));
  EXPECT_EQ(trex::demo::demo_preset("mine", dir.file("configs")).cpt_steps, 5);
  try {
    trex::demo::demo_preset("huge", configs());
    ADD_FAILURE() << "an unknown preset name was accepted";
  } catch (const trex::Error& e) {
    EXPECT_NE(std::string(e.what()).find("huge.toml"), std::string::npos) << e.what();
  }
}

TEST(DemoPreset, BadFileNamesTheFileLineAndKey) {
  TempDir dir;
  auto error_of = [&](const std::string& text) {
    const std::string path = write_preset(dir, text);
    try {
      trex::demo::load_demo_preset(path);
    } catch (const trex::Error& e) {
      EXPECT_EQ(e.file_name(), path);
      return std::string(e.what());
    }
    ADD_FAILURE() << "accepted:\n" << text;
    return std::string();
  };
  // An unknown key, with its line.
  const std::string unknown = edited_smoke("[cpt]", "[cpt]\nstepz = 4");
  std::string what = error_of(unknown);
  EXPECT_NE(what.find("field 'cpt.stepz': unknown key"), std::string::npos) << what;
  EXPECT_NE(what.find(":" + std::to_string(line_of(unknown, "stepz")) + ":"), std::string::npos)
      << what;
  // A missing key: a preset file gives every value.
  what = error_of(edited_smoke("peak_lr = 2e-3\n", ""));
  EXPECT_NE(what.find("field 'sft.peak_lr': required key is missing"), std::string::npos) << what;
  // Wrong types and values.
  what = error_of(edited_smoke("max_new_tokens = 24", "max_new_tokens = \"24\""));
  EXPECT_NE(what.find("field 'generation.max_new_tokens': expected an integer"), std::string::npos)
      << what;
  what = error_of(edited_smoke("precision = \"fp32\"", "precision = \"fp16\""));
  EXPECT_NE(what.find("field 'training.precision'"), std::string::npos) << what;
  what = error_of(edited_smoke("peak_lr = 3e-3", "peak_lr = 0"));
  EXPECT_NE(what.find("field 'cpt.peak_lr': must be in (0, 1]"), std::string::npos) << what;
  what = error_of(edited_smoke("sft_val = 4", "sft_val = -4"));
  EXPECT_NE(what.find("field 'data.sft_val': must be >= 1"), std::string::npos) << what;
  // A model file that does not exist.
  what = error_of(edited_smoke("../models/demo-smoke.json", "no-such-model.json"));
  EXPECT_NE(what.find("field 'model.config': file not found"), std::string::npos) << what;
  // TOML syntax.
  what = error_of(smoke_text() + "\n[cpt\n");
  EXPECT_NE(what.find("invalid TOML"), std::string::npos) << what;
}

TEST(DemoPreset, CommandLineOverridesWinOverTheFile) {
  TempDir dir;
  trex::demo::DemoOptions o;
  o.preset = write_preset(dir, smoke_text());
  const DemoPreset file = trex::demo::resolve_demo_preset(o);
  EXPECT_EQ(file.cpt_steps, 3);
  EXPECT_EQ(file.sft_global_batch, 2);
  o.cpt_steps = 7;
  o.sft_steps = 9;
  o.cpt_lr = 5e-3;
  o.sft_lr = 4e-3;
  o.sft_global_batch = 3;
  o.copy_drills = 2;
  o.renamed_share = 0.25;
  o.copy_warmup_steps = 4;
  o.val_evals = 5;
  const DemoPreset p = trex::demo::resolve_demo_preset(o);
  EXPECT_EQ(p.cpt_steps, 7);
  EXPECT_EQ(p.sft_steps, 9);
  EXPECT_EQ(p.cpt_lr, 5e-3);
  EXPECT_EQ(p.sft_lr, 4e-3);
  EXPECT_EQ(p.sft_global_batch, 3);
  EXPECT_EQ(p.sft_micro_batch, 1);
  EXPECT_EQ(p.sizes.copy_drills, 2);
  EXPECT_EQ(p.sizes.renamed_share, 0.25);
  EXPECT_EQ(p.copy_warmup_steps, 4);
  EXPECT_EQ(p.val_pass_evals, 5);
  // Values without an override stay the file's.
  EXPECT_EQ(p.seq_len, file.seq_len);
  EXPECT_EQ(p.max_new_tokens, file.max_new_tokens);
}

TEST(DemoPreset, CommandLineFindsConfigsAndReportsBadFiles) {
  TempDir dir;
  // From another working directory the binary finds the configs beside it
  // (build/trex -> configs/), when it was built inside the repository.
  const fs::path binary_dir = fs::path(trex::test::trex_binary()).parent_path();
  if (fs::is_directory(binary_dir.parent_path() / "configs" / "demo")) {
    const auto run = trex::test::run_trex_in(dir.path(), "demo --preset smoke --cpt-steps 0");
    EXPECT_NE(run.exit_code, 0);
    EXPECT_NE(run.output.find("at least one CPT"), std::string::npos) << run.output;
  }
  const auto unknown = trex::test::run_trex("demo --preset huge --out-dir " + dir.file("out"));
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.output.find("unknown demo preset 'huge'"), std::string::npos) << unknown.output;
  const std::string bad = write_preset(dir, edited_smoke("[sft]", "[sft]\nlr = 1"));
  const auto bad_key =
      trex::test::run_trex("demo --preset " + bad + " --out-dir " + dir.file("out"));
  EXPECT_NE(bad_key.exit_code, 0);
  EXPECT_NE(bad_key.output.find(bad), std::string::npos) << bad_key.output;
  EXPECT_NE(bad_key.output.find("field 'sft.lr': unknown key"), std::string::npos)
      << bad_key.output;
}

}  // namespace
