// The GRPO loop (rl/grpo.hpp) on tiny-v4: it learns from a reward, rollouts are
// reproducible from the seed, a resumed run equals an uninterrupted one, the
// solver grader's failures become the configured penalty, and bad configs are refused.
#include "trex/rl/grpo.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../sanitized_build.hpp"
#include "../train/trainer_fixtures.hpp"
#include "trex/core/error.hpp"
#include "trex/io/tokenizer.hpp"
#include "trex/or/eval/extract.hpp"
#include "trex/or/eval/prompts.hpp"
#include "trex/train/run_config.hpp"

namespace {

namespace fs = std::filesystem;
using trex::train::MetricsRecord;

// A run directory: a tokenizer that knows the prompt template (so prompts stay
// short), and a benchmark-schema prompts file.
std::string make_run_dir(const std::string& name) {
  const std::string dir = (fs::temp_directory_path() / ("trex_grpo_" + name)).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  trex::io::TokenizerTrainOptions o;
  o.vocab_size = 400;
  o.show_progress = false;
  std::vector<std::string> texts = trex::test::tiny_corpus();
  texts.push_back(trex::orlib::eval::make_prompt("", trex::orlib::eval::CodeKind::mathprog));
  texts.push_back("You are a helpful assistant.");
  trex::io::Tokenizer::train_from_texts(texts, o).save(dir + "/tokenizer.json");
  std::ofstream prompts(dir + "/prompts.jsonl");
  const std::vector<std::string> questions = {
      "maximize profit subject to capacity 12 and demand 7",
      "minimize the cost of shipping goods from plants to markets",
      "solve the model and report the objective value 42",
      "variables x1 x2 x3 are non-negative integers"};
  for (size_t i = 0; i < questions.size(); ++i)
    prompts << nlohmann::json{{"id", "q" + std::to_string(i)},
                              {"question", questions[i]},
                              {"answer", 42.0 + static_cast<double>(i)},
                              {"answer_status", "optimal"}}
                   .dump()
            << "\n";
  prompts << "{not json\n";  // skipped, counted
  prompts << nlohmann::json{{"id", "u"}, {"question", "no answer"}}.dump() << "\n";  // no truth
  return dir;
}

nlohmann::json grpo_run_json(int steps) {
  return {{"model",
           {{"config", trex::test::source_dir() + "/configs/models/tiny-v4.json"}, {"seed", 5}}},
          {"tokenizer", "tokenizer.json"},
          {"data", {{"mode", "grpo"}, {"train", "prompts.jsonl"}, {"seed", 9}}},
          {"seq_len", 512},
          {"micro_batch", 4},
          {"steps", steps},
          {"optimizer", {{"use_muon", false}}},
          {"schedule", {{"peak_lr", 3e-2}, {"min_lr", 3e-2}}},
          {"precision", "fp32"},
          {"out_dir", "out"},
          {"peak_gflops", 10.0},
          {"grpo",
           {{"prompts_per_step", 2},
            {"group_size", 8},
            {"max_new_tokens", 6},
            {"generation_batch", 16},
            {"reward", {{"failure_penalty", -0.5}, {"timeout", 5.0}, {"jobs", 2}}}}}};
}

trex::train::RunConfig config_in(const std::string& dir, const nlohmann::json& j) {
  return trex::train::RunConfig::from_json(j, dir + "/run.json", dir);
}

// The share of completion tokens in the lower half of the vocabulary: ~0.5 for a
// random policy, 1 when every sampled token is one of them.
double lower_half_share(const std::string&, const std::vector<int32_t>& completion) {
  if (completion.empty()) return 0.0;
  double n = 0;
  for (int32_t t : completion) n += t < 200 ? 1 : 0;
  return n / static_cast<double>(completion.size());
}

std::vector<MetricsRecord> run(const trex::train::RunConfig& c, trex::rl::GrpoOptions o,
                               trex::rl::GrpoSummary* summary = nullptr) {
  std::vector<MetricsRecord> records;
  o.trainer.quiet = true;
  o.on_step = [&](int64_t, MetricsRecord& r) { records.push_back(r); };
  const trex::rl::GrpoSummary s = trex::rl::run_grpo(c, o);
  if (summary) *summary = s;
  return records;
}

TEST(GrpoLoop, RaisesTheRewardItIsGiven) {
  if (trex::test::kSanitizedBuild)
    GTEST_SKIP() << "20 GRPO steps take ~3 min under the sanitizers: the Release suite runs "
                    "this; the other GrpoLoop tests run the same loop here";
  const std::string dir = make_run_dir("learn");
  const trex::train::RunConfig c = config_in(dir, grpo_run_json(20));
  trex::rl::GrpoOptions o;
  o.reward_hook = lower_half_share;
  trex::rl::GrpoSummary summary;
  const std::vector<MetricsRecord> records = run(c, o, &summary);
  ASSERT_EQ(records.size(), 20u);
  double first = 0, last = 0;
  for (int i = 0; i < 3; ++i) first += records[i].get("reward_mean") / 3;
  for (int i = 17; i < 20; ++i) last += records[i].get("reward_mean") / 3;
  std::cout << "reward: first 3 steps " << first << ", last 3 steps " << last << "\n";
  EXPECT_GT(first, 0.25);
  EXPECT_LT(first, 0.75);
  EXPECT_GT(last, 0.8) << "the policy did not move towards the rewarded tokens";
  EXPECT_LT(records.back().get("entropy"), records.front().get("entropy"));
  for (const MetricsRecord& r : records) {
    EXPECT_EQ(r.get("rollouts"), 16.0);
    EXPECT_GE(r.get("clip_fraction"), 0.0);
    EXPECT_GT(r.get("entropy"), 0.0);
    EXPECT_GT(r.get("generate_s"), 0.0);
    if (r.get("trained_rollouts") > 0) {  // a step whose groups are all equal trains nothing
      EXPECT_NEAR(r.get("ratio_mean"), 1.0, 0.05);  // one update per batch: on-policy
    }
  }
  EXPECT_EQ(summary.rollouts, 20 * 16);
  EXPECT_TRUE(fs::exists(dir + "/out/metrics.jsonl"));
  EXPECT_FALSE(summary.train.last_checkpoint.empty());
}

TEST(GrpoLoop, RolloutsAreSeededAndResumeEqualsAnUninterruptedRun) {
  if (trex::test::kSanitizedBuild)
    GTEST_SKIP() << "three GRPO runs take ~2 min under the sanitizers: the Release suite runs "
                    "this; the other GrpoLoop tests run the same loop here";
  const std::string dir = make_run_dir("resume");
  nlohmann::json j = grpo_run_json(3);
  j["grpo"]["temperature"] = 0.8;
  trex::rl::GrpoOptions o;
  o.reward_hook = lower_half_share;
  j["out_dir"] = "a";
  const auto a = run(config_in(dir, j), o);
  j["out_dir"] = "b";
  const auto b = run(config_in(dir, j), o);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) {
    // The sampler's policy at temperature 0.8 is what the step trains: on-policy.
    if (a[i].get("trained_rollouts") > 0) {
      EXPECT_NEAR(a[i].get("ratio_mean"), 1.0, 0.05) << i;
    }
    EXPECT_EQ(a[i].get("reward_mean"), b[i].get("reward_mean")) << i;
    EXPECT_EQ(a[i].get("response_length"), b[i].get("response_length")) << i;
    EXPECT_EQ(a[i].get("loss"), b[i].get("loss")) << i;
  }
  // Interrupted after step 1, resumed: steps 2 and 3 as in the uninterrupted run.
  j["out_dir"] = "c";
  trex::rl::GrpoOptions first = o;
  first.trainer.stop_after_step = 1;
  const auto c1 = run(config_in(dir, j), first);
  ASSERT_EQ(c1.size(), 1u);
  trex::rl::GrpoOptions resumed = o;
  resumed.trainer.resume = true;
  const auto c2 = run(config_in(dir, j), resumed);
  ASSERT_EQ(c2.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(c2[i].get("reward_mean"), a[i + 1].get("reward_mean")) << i;
    EXPECT_EQ(c2[i].get("loss"), a[i + 1].get("loss")) << i;
    EXPECT_EQ(c2[i].get("grad_norm"), a[i + 1].get("grad_norm")) << i;
  }
  // Another data seed samples other prompts and completions.
  j["out_dir"] = "d";
  j["data"]["seed"] = 10;
  const auto d = run(config_in(dir, j), o);
  bool differs = false;
  for (size_t i = 0; i < d.size(); ++i) differs = differs || d[i].get("loss") != a[i].get("loss");
  EXPECT_TRUE(differs);
}

// With two updates per batch, the second pass sees the first update's effect: the
// surrogate of the same rollouts is lower (a step along its gradient), and each
// batch makes two optimizer steps.
TEST(GrpoLoop, AnUpdateLowersTheSurrogateOfItsBatch) {
  const std::string dir = make_run_dir("mu2");
  nlohmann::json j = grpo_run_json(4);
  j["grpo"]["updates_per_batch"] = 2;
  j["schedule"] = {{"peak_lr", 3e-3}, {"min_lr", 3e-3}};
  trex::rl::GrpoOptions o;
  o.reward_hook = lower_half_share;
  const auto records = run(config_in(dir, j), o);
  ASSERT_EQ(records.size(), 2u);  // 4 optimizer steps = 2 batches
  for (const MetricsRecord& r : records) {
    ASSERT_GT(r.get("trained_rollouts"), 0.0);
    EXPECT_LT(r.get("pg_loss_after_update"), r.get("pg_loss"));
  }
}

// With kl_coef > 0 the reference is the starting checkpoint: the KL is zero while
// the policy equals it (the first step) and grows once the policy moves.
TEST(GrpoLoop, KlToTheReferenceStartsAtZeroAndGrows) {
  const std::string dir = make_run_dir("kl");
  nlohmann::json j = grpo_run_json(1);
  j["out_dir"] = "start";
  trex::rl::GrpoOptions o;
  o.reward_hook = lower_half_share;
  trex::rl::GrpoSummary start;
  run(config_in(dir, j), o, &start);
  ASSERT_FALSE(start.train.last_checkpoint.empty());
  j = grpo_run_json(3);
  j["model"] = {{"init_checkpoint", start.train.last_checkpoint}};
  j["grpo"]["kl_coef"] = 0.1;
  j["out_dir"] = "kl";
  const auto records = run(config_in(dir, j), o);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_NEAR(records[0].get("kl"), 0.0, 1e-9);
  EXPECT_GT(records[2].get("kl"), 1e-6);
  // The loss carries the penalty: L = pg + β·KL.
  EXPECT_NEAR(records[2].get("loss"), records[2].get("pg_loss") + 0.1 * records[2].get("kl"), 1e-9);
}

// The real grader: a random policy writes no model, so every rollout gets the
// failure penalty, every group is uniform and the step carries no gradient signal.
TEST(GrpoLoop, UngradableRolloutsGetThePenaltyAndNoSignal) {
  const std::string dir = make_run_dir("penalty");
  nlohmann::json j = grpo_run_json(1);
  j["data"]["validation"] = "prompts.jsonl";
  j["grpo"]["eval_prompts"] = 2;
  const auto records = run(config_in(dir, j), {});
  ASSERT_EQ(records.size(), 1u);
  const MetricsRecord& r = records[0];
  EXPECT_EQ(r.get("failed_rate"), 1.0);
  EXPECT_EQ(r.get("reward_mean"), -0.5);
  EXPECT_EQ(r.get("pass_rate"), 0.0);
  EXPECT_EQ(r.get("uniform_group_share"), 1.0);
  EXPECT_EQ(r.get("pg_loss"), 0.0);
  EXPECT_EQ(r.get("trained_rollouts"), 0.0);  // all-equal groups are left out of the update
  EXPECT_EQ(r.get("skipped"), 1.0);           // and a step with nothing to train makes none
  EXPECT_EQ(r.get("val_pass1"), 0.0);
}

TEST(GrpoConfig, RefusesWhatTheLoopCannotRun) {
  const std::string dir = make_run_dir("config");
  nlohmann::json j = grpo_run_json(2);
  EXPECT_EQ(config_in(dir, j).global_batch, 16);  // prompts_per_step x group_size
  EXPECT_EQ(config_in(dir, j).mtp_weight, 0.0);   // no MTP term in the policy loss
  // One bad value each, and the field the error must name.
  struct Bad {
    const char* pointer;
    nlohmann::json value;
    const char* field;
  };
  const std::vector<Bad> cases = {
      {"/grpo/group_size", 1, "grpo.group_size"},
      {"/global_batch", 8, "global_batch"},
      {"/grpo/max_new_tokens", 600, "grpo.max_new_tokens"},
      {"/micro_batch", 3, "micro_batch"},
      {"/grpo/clip_low", 1.0, "grpo.clip_low"},
      {"/grpo/kl_coef", 0.1, "grpo.reference"},  // no reference: random init
      {"/grpo/format", "excel", "grpo.format"}};
  for (const Bad& c : cases) {
    j = grpo_run_json(2);
    j[nlohmann::json::json_pointer(c.pointer)] = c.value;
    try {
      config_in(dir, j);
      ADD_FAILURE() << "accepted a config with a bad " << c.field;
    } catch (const trex::Error& e) {
      EXPECT_EQ(e.field_name(), c.field) << e.what();
    }
  }
  j = grpo_run_json(2);
  j["grpo"]["reward"]["rule"] = "close enough";
  trex::rl::GrpoOptions o;
  o.trainer.quiet = true;
  try {
    trex::rl::run_grpo(config_in(dir, j), o);
    ADD_FAILURE() << "accepted an unknown grading rule";
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.field_name(), "grpo.reward.rule") << e.what();
  }
}

}  // namespace
