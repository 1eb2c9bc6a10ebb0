// `trex demo` end to end on the seconds-long smoke preset: every stage runs,
// the report holds the Pass@1 table of every split, the SFT stage measured a
// validation Pass@1, and a rerun resumes (skips finished work) with the same
// results.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/demo/demo.hpp"

namespace {

using trex::test::TempDir;
namespace fs = std::filesystem;

TEST(Demo, SmokePresetRunsEveryStageAndResumes) {
  TempDir dir;
  trex::demo::DemoOptions o;
  o.out_dir = dir.file("demo");
  o.preset = "smoke";
  o.bench_dir = trex::test::shared_dir() + "/or_bench";
  o.quiet = true;
  o.peak_gflops = 100.0;
  o.jobs = 1;
  o.sft_lr = 4e-3;          // overrides the preset's 2e-3
  o.sft_global_batch = 3;   // overrides the preset's 2 rows per step
  o.copy_drills = 1;        // overrides the preset's 0
  o.copy_warmup_steps = 2;  // overrides the preset's 0
  const trex::demo::DemoResult first = trex::demo::run_demo(o);

  // One copy drill per trained problem joined the CPT corpus.
  std::map<std::string, int> kinds;
  for (const auto& d : trex::read_jsonl(o.out_dir + "/data/cpt.jsonl"))
    ++kinds[d["meta"]["kind"].get<std::string>()];
  EXPECT_GT(kinds["question_model"], 0);
  EXPECT_EQ(kinds["copy_drill"], kinds["question_model"]);

  // The warm-up trained on those drills alone, split by problem, then CPT
  // started from its last checkpoint.
  std::multiset<std::string> drill_texts, warmup_texts;
  for (const auto& d : trex::read_jsonl(o.out_dir + "/data/cpt.jsonl"))
    if (d["meta"]["kind"] == "copy_drill") drill_texts.insert(d["text"].get<std::string>());
  const auto warmup_train = trex::read_jsonl(o.out_dir + "/data/copy_drills.jsonl");
  const auto warmup_val = trex::read_jsonl(o.out_dir + "/data/copy_drills_val.jsonl");
  EXPECT_GE(warmup_val.size(), 1u);
  EXPECT_GT(warmup_train.size(), warmup_val.size());
  for (const auto* file : {&warmup_train, &warmup_val})
    for (const auto& d : *file) warmup_texts.insert(d["text"].get<std::string>());
  EXPECT_EQ(warmup_texts, drill_texts);
  int warmup_steps = 0;
  trex::read_jsonl(o.out_dir + "/warmup/metrics.jsonl", [&](const nlohmann::json& r, long) {
    if (r.contains("loss")) ++warmup_steps;
  });
  EXPECT_EQ(warmup_steps, 2);
  const auto cpt_state = nlohmann::json::parse(
      trex::read_file(o.out_dir + "/cpt/checkpoints/step-00000003/trainer_state.json"));
  EXPECT_EQ(cpt_state["run_config"]["model"]["init_checkpoint"],
            o.out_dir + "/warmup/checkpoints/step-00000002");

  const std::string report = trex::read_file(first.report_path);
  for (const char* split : {"test", "heldout_template", "heldout_family", "public"}) {
    EXPECT_NE(report.find(std::string("| ") + split + " |"), std::string::npos) << split;
    ASSERT_TRUE(first.base_pass1.count(split)) << split;
    ASSERT_TRUE(first.sft_pass1.count(split)) << split;
    EXPECT_GE(first.sft_pass1.at(split), 0.0);
    EXPECT_LE(first.sft_pass1.at(split), 100.0);
    // Every item of the split was generated and graded.
    const auto bench = trex::read_jsonl(o.out_dir + "/data/" + std::string(split) + ".jsonl");
    const auto items =
        trex::read_jsonl(o.out_dir + "/final/eval/" + std::string(split) + "/items.jsonl");
    EXPECT_EQ(items.size(), bench.size()) << split;
    EXPECT_GT(bench.size(), 0u) << split;
  }
  EXPECT_TRUE(fs::exists(o.out_dir + "/loss.svg"));
  EXPECT_NE(trex::read_file(o.out_dir + "/loss.svg").find("CPT train"), std::string::npos);
  EXPECT_NE(trex::read_file(o.out_dir + "/loss.svg").find("warm-up train"), std::string::npos);
  EXPECT_NE(report.find("| copy warm-up steps | 2 ("), std::string::npos) << report;

  // The tokenizer's special ids are the model's BOS/EOS.
  const auto config = nlohmann::json::parse(trex::read_file(o.out_dir + "/model-config.json"));
  EXPECT_EQ(config["bos_token_id"], 0);
  EXPECT_EQ(config["eos_token_id"], 1);
  EXPECT_EQ(config["vocab_size"], 700);

  // SFT metrics carry the validation Pass@1 of the last step.
  int with_pass1 = 0;
  trex::read_jsonl(o.out_dir + "/sft/metrics.jsonl", [&](const nlohmann::json& r, long) {
    if (r.contains("val_pass1")) ++with_pass1;
  });
  EXPECT_GE(with_pass1, 1);

  // The SFT stage ran with the overridden peak learning rate.
  double max_sft_lr = 0;
  trex::read_jsonl(o.out_dir + "/sft/metrics.jsonl", [&](const nlohmann::json& r, long) {
    max_sft_lr = std::max(max_sft_lr, r.value("lr", 0.0));
  });
  EXPECT_GT(max_sft_lr, 2.5e-3);
  EXPECT_LE(max_sft_lr, 4e-3 * (1 + 1e-9));
  const size_t sft_steps_row = report.find("| SFT steps | 3 (");
  ASSERT_NE(sft_steps_row, std::string::npos) << report;
  const std::string sft_steps_line =
      report.substr(sft_steps_row, report.find('\n', sft_steps_row) - sft_steps_row);
  EXPECT_NE(sft_steps_line.find("peak LR 0.004 |"), std::string::npos) << sft_steps_line;

  // The GRPO stage (the smoke preset's 2 steps) started from the SFT model, trained on
  // the SFT problems, measured the validation Pass@1 before and after, and its model
  // was evaluated on every split (the report's RL column and chart).
  const auto rl_state = nlohmann::json::parse(
      trex::read_file(o.out_dir + "/rl/checkpoints/step-00000002/trainer_state.json"));
  EXPECT_EQ(rl_state["run_config"]["data"]["mode"], "grpo");
  EXPECT_EQ(rl_state["run_config"]["data"]["train"], o.out_dir + "/data/rl_train.jsonl");
  EXPECT_EQ(trex::read_jsonl(o.out_dir + "/data/rl_train.jsonl").size(), 24u);
  int rl_steps = 0, rl_val = 0;
  trex::read_jsonl(o.out_dir + "/rl/metrics.jsonl", [&](const nlohmann::json& r, long) {
    if (r.contains("rollouts")) {
      ++rl_steps;
      EXPECT_EQ(r["rollouts"], 4);  // 2 prompts x 2 samples
    }
    if (r.contains("val_pass1")) ++rl_val;
  });
  EXPECT_EQ(rl_steps, 2);
  EXPECT_EQ(rl_val, 2);  // before the first update and at the end
  for (const char* split : {"test", "heldout_template", "heldout_family", "public"}) {
    ASSERT_TRUE(first.rl_pass1.count(split)) << split;
    EXPECT_EQ(
        trex::read_jsonl(o.out_dir + "/rl-eval/eval/" + std::string(split) + "/items.jsonl").size(),
        trex::read_jsonl(o.out_dir + "/data/" + std::string(split) + ".jsonl").size());
  }
  EXPECT_NE(report.find("| RL model | RL - SFT |"), std::string::npos) << report;
  EXPECT_NE(report.find("rl_pass1.svg"), std::string::npos);
  EXPECT_TRUE(fs::exists(o.out_dir + "/rl_pass1.svg"));

  // A rerun resumes: nothing is retrained or regenerated, results are equal.
  const auto sft_checkpoint_time = fs::last_write_time(o.out_dir + "/final/eval/test/report.json");
  const trex::demo::DemoResult second = trex::demo::run_demo(o);
  EXPECT_EQ(second.base_pass1, first.base_pass1);
  EXPECT_EQ(second.sft_pass1, first.sft_pass1);
  EXPECT_EQ(second.rl_pass1, first.rl_pass1);
  EXPECT_EQ(fs::last_write_time(o.out_dir + "/final/eval/test/report.json"), sft_checkpoint_time);
  // The resumed run's report still has the finished stages' figures (3 CPT
  // steps x 2 rows x 1024 tokens; SFT 3 x 3 x 1024), read from their metrics,
  // not this run's zeros.
  const std::string resumed_report = trex::read_file(second.report_path);
  EXPECT_NE(resumed_report.find("| CPT tokens | 6144 ("), std::string::npos) << resumed_report;
  EXPECT_NE(resumed_report.find("| copy warm-up tokens | 4096 ("), std::string::npos)
      << resumed_report;
  EXPECT_NE(resumed_report.find("| SFT tokens | 9216 ("), std::string::npos) << resumed_report;

  // Resuming with the other tokenizer is refused, naming the file.
  o.bare_words = true;
  try {
    trex::demo::run_demo(o);
    ADD_FAILURE() << "a bare-words resume of a DeepSeek-V3-tokenizer run was accepted";
  } catch (const trex::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
}

TEST(Demo, BareWordsPresetKeepsTokensPerStepAndWidensTheWindow) {
  const trex::demo::DemoPreset base = trex::demo::demo_preset("default");
  const trex::demo::DemoPreset p = trex::demo::with_bare_words(base);
  EXPECT_FALSE(base.bare_words);
  EXPECT_TRUE(p.bare_words);
  EXPECT_EQ(p.model_config["sliding_window"], 1024);
  EXPECT_EQ(p.seq_len * p.global_batch, base.seq_len * base.global_batch);
  EXPECT_EQ(p.seq_len, 2 * base.seq_len);
  EXPECT_EQ(p.sft_seq_len * p.sft_global_batch, base.sft_seq_len * base.sft_global_batch);
  EXPECT_EQ(p.sft_seq_len, 2048);
  EXPECT_EQ(p.global_batch % p.micro_batch, 0);
  EXPECT_EQ(p.sft_global_batch % p.sft_micro_batch, 0);
  EXPECT_EQ(p.max_new_tokens, base.max_new_tokens * 5 / 4);
  // An odd batch keeps its rows.
  trex::demo::DemoPreset odd = base;
  odd.sft_global_batch = 3;
  odd.sft_micro_batch = 3;
  EXPECT_EQ(trex::demo::with_bare_words(odd).sft_seq_len, base.sft_seq_len);
}

TEST(Demo, UnknownPresetIsAnError) {
  EXPECT_THROW(trex::demo::demo_preset("huge"), trex::Error);
  trex::demo::DemoOptions o;
  o.preset = "smoke";
  o.cpt_steps = 0;
  EXPECT_THROW(trex::demo::run_demo(o), trex::Error);
  o.cpt_steps = -1;
  o.sft_lr = 0;
  EXPECT_THROW(trex::demo::run_demo(o), trex::Error);
  o.sft_lr = -1;
  o.sft_global_batch = 0;
  EXPECT_THROW(trex::demo::run_demo(o), trex::Error);
  o.sft_global_batch = -1;
  o.val_evals = 0;
  EXPECT_THROW(trex::demo::run_demo(o), trex::Error);
  o.val_evals = -1;
  o.copy_warmup_steps = 5;  // the smoke preset has no copy drills
  try {
    trex::demo::run_demo(o);
    ADD_FAILURE() << "a copy warm-up without copy drills was accepted";
  } catch (const trex::Error& e) {
    EXPECT_NE(std::string(e.what()).find("copy_drills"), std::string::npos) << e.what();
  }
}

}  // namespace
