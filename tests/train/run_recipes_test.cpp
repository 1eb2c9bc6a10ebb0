// The run recipes in configs/runs/: every file parses with the loader
// `trex train --config` uses, and the CPT and SFT recipes fit together (the
// SFT run starts from the CPT run's last checkpoint).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "test_paths.hpp"
#include "trex/model/config.hpp"
#include "trex/train/run_config.hpp"

namespace {

namespace fs = std::filesystem;
using trex::train::RunConfig;

std::string normal(const fs::path& path) {
  return path.lexically_normal().string();
}

TEST(RunRecipes, EveryFileParsesAndTheDemoPairFitsTogether) {
  const fs::path source = trex::test::source_dir();
  std::map<std::string, RunConfig> recipes;
  for (const auto& entry : fs::directory_iterator(source / "configs" / "runs")) {
    SCOPED_TRACE(entry.path().string());
    ASSERT_TRUE(entry.path().extension() == ".toml" || entry.path().extension() == ".json");
    RunConfig config;
    ASSERT_NO_THROW(config = RunConfig::load(entry.path().string()));
    if (!config.model_config.empty()) {
      EXPECT_NO_THROW(trex::model::ModelConfig::load(config.model_config));
    }
    recipes[entry.path().filename().string()] = config;
  }
  ASSERT_TRUE(recipes.count("demo-cpt.toml"));
  ASSERT_TRUE(recipes.count("demo-sft.toml"));
  const RunConfig& cpt = recipes.at("demo-cpt.toml");
  const RunConfig& sft = recipes.at("demo-sft.toml");

  // Paths are relative to configs/runs/: the demo's output is out/demo.
  EXPECT_EQ(cpt.mode, trex::train::DataMode::kCpt);
  EXPECT_EQ(cpt.model_config, normal(source / "configs/models/demo.json"));
  EXPECT_EQ(cpt.tokenizer, normal(source / "out/demo/tokenizer.json"));
  EXPECT_EQ(cpt.train_file, normal(source / "out/demo/data/cpt.jsonl"));
  EXPECT_EQ(cpt.steps, 200);
  EXPECT_EQ(cpt.peak_lr, 3e-3);
  EXPECT_EQ(cpt.precision, trex::train::TrainPrecision::kBf16);

  EXPECT_EQ(sft.mode, trex::train::DataMode::kSft);
  EXPECT_EQ(sft.train_file, normal(source / "out/demo/data/sft_train.jsonl"));
  EXPECT_EQ(sft.tokenizer, cpt.tokenizer);
  EXPECT_EQ(sft.peak_lr, 2e-3);
  char last_step[32];
  std::snprintf(last_step, sizeof last_step, "step-%08lld", static_cast<long long>(cpt.steps));
  EXPECT_EQ(sft.init_checkpoint, cpt.out_dir + "/checkpoints/" + last_step);
  EXPECT_NE(sft.out_dir, cpt.out_dir);
}

}  // namespace
