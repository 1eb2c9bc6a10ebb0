// `trex train` and `trex export` as a user runs them.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_run.hpp"
#include "test_paths.hpp"
#include "trainer_fixtures.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/model/model.hpp"
#include "trex/train/trainer.hpp"

namespace {

using trex::test::run_trex;
using trex::test::TempDir;

TEST(TrainCli, TrainsTinyCorpusLossDecreasesAndResumes) {
  TempDir dir;
  trex::test::write_tiny_training_data(dir.path());
  nlohmann::json run = {
      {"model", {{"config", trex::test::source_dir() + "/configs/models/tiny-v4.json"}}},
      {"tokenizer", "tokenizer.json"},
      {"data", {{"mode", "cpt"}, {"train", "cpt.jsonl"}, {"validation", "cpt.jsonl"}}},
      {"seq_len", 32},
      {"micro_batch", 2},
      {"global_batch", 2},
      {"steps", 8},
      {"schedule", {{"peak_lr", 5e-3}, {"min_lr", 1e-3}, {"warmup_steps", 1}}},
      {"eval_interval", 4},
      {"eval_batches", 1},
      {"checkpoint_interval", 4},
      {"out_dir", "out"},
      {"peak_gflops", 10.0}};
  trex::write_file_atomic(dir.file("run.json"), run.dump(2));
  const auto r = run_trex("train --config " + dir.file("run.json") + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("steps            8 / 8"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("skipped steps    0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MFU"), std::string::npos);

  const auto lines = trex::read_jsonl(dir.file("out/metrics.jsonl"));
  ASSERT_EQ(lines.size(), 8u);
  // A repeated tiny corpus: the loss goes down.
  EXPECT_LT(lines[7]["loss_lm"].get<double>(), lines[0]["loss_lm"].get<double>() - 0.3);
  for (const char* key : {"loss", "loss_mtp", "loss_balance", "grad_norm", "lr", "tokens_per_s",
                          "model_tflops", "mfu", "expert_imbalance/layer_0"})
    EXPECT_TRUE(lines[0].contains(key)) << key;
  EXPECT_TRUE(lines[3].contains("val_loss"));
  EXPECT_EQ(trex::read_file(dir.file("out/checkpoints/latest")), "step-00000008\n");
  EXPECT_TRUE(std::filesystem::exists(dir.file("out/checkpoints/step-00000004/model.safetensors")));
  bool events = false;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("out/tensorboard")))
    events = events || e.path().filename().string().find("tfevents") != std::string::npos;
  EXPECT_TRUE(events);

  // --resume with more steps continues from step 8.
  const auto more =
      run_trex("train --config " + dir.file("run.json") + " --quiet --resume --steps 10");
  ASSERT_EQ(more.exit_code, 0) << more.output;
  EXPECT_NE(more.output.find("steps            10 / 10"), std::string::npos) << more.output;
  EXPECT_EQ(trex::read_jsonl(dir.file("out/metrics.jsonl")).size(), 10u);

  // A bad key is an error naming the file and the key.
  run["schedule"]["peak"] = 1;
  trex::write_file_atomic(dir.file("bad.json"), run.dump());
  const auto bad = run_trex("train --config " + dir.file("bad.json"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("bad.json:1: field 'schedule.peak': unknown key"), std::string::npos)
      << bad.output;
}

// --dry-run of a 4-rank layout in one process: the table, nothing trained.
TEST(TrainCli, DryRunPrintsEachRolesStateWithoutTraining) {
  TempDir dir;
  trex::test::write_tiny_training_data(dir.path());
  nlohmann::json run = {
      {"model", {{"config", trex::test::source_dir() + "/configs/models/tiny-v4.json"}}},
      {"tokenizer", "tokenizer.json"},
      {"data", {{"mode", "cpt"}, {"train", "cpt.jsonl"}}},
      {"seq_len", 32},
      {"global_batch", 4},
      {"steps", 8},
      {"out_dir", "out"},
      {"parallel", {{"dp", 2}, {"pp", 2}, {"zero", 1}, {"pipeline_layers", {3, 1}}}}};
  trex::write_file_atomic(dir.file("run.json"), run.dump(2));
  const auto r = run_trex("train --config " + dir.file("run.json") + " --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("DP=2 x EP=1 x PP=2, ZeRO-1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("largest rank: stage"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("activations: the cached micro-batches"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out")));
  run["parallel"]["pipeline_layers"] = {3, 3};  // tiny-v4 has 4 layers
  trex::write_file_atomic(dir.file("run.json"), run.dump(2));
  const auto bad = run_trex("train --config " + dir.file("run.json") + " --dry-run");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("pipeline_layers sums to 6 layers; the model has 4"), std::string::npos)
      << bad.output;
}

// `trex model memory`: a planner layout string on N devices, as JSON; a
// layout only the planner models is refused naming the feature.
TEST(TrainCli, ModelMemoryPrintsTheRolesOfALayoutAsJson) {
  const std::string model = trex::test::source_dir() + "/configs/models/tiny-v4.json";
  const auto r = run_trex("model memory --model " + model +
                          " --devices 8 --layout pp2,ep2,zero1,full --seq 64 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["layout"]["dp"], 2);
  EXPECT_EQ(j["layout"]["recompute"], "full");
  ASSERT_EQ(j["roles"].size(), 4u);  // 2 stages x 2 EP ranks
  for (const auto& role : j["roles"]) {
    EXPECT_EQ(role["ranks"], 2);
    EXPECT_GT(role["activations"].get<int64_t>(), 0);
    EXPECT_GT(role["params"].get<int64_t>(), 0);
  }
  const auto tp = run_trex("model memory --model " + model + " --devices 8 --layout tp2,pp2");
  EXPECT_NE(tp.exit_code, 0);
  EXPECT_NE(tp.output.find("only the planner models (TP2)"), std::string::npos) << tp.output;
  // `trex plan --layout` on a layout the engine runs reports the same bytes
  // (plus the device's runtime reserve); --no-engine-memory its own model.
  TempDir dir;
  const std::string plan_args = "plan --model " + model + " --cluster " + trex::test::source_dir() +
                                "/configs/clusters/h200-nvlink.json --devices 8 --global-batch 8 "
                                "--seq 64 --optimizer muon --layout pp2,ep2,zero1,full --json ";
  const auto planned = run_trex(plan_args + dir.file("plan.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  EXPECT_NE(planned.output.find("memory from the engine's own accounting"), std::string::npos)
      << planned.output;
  const auto same = run_trex("model memory --model " + model +
                             " --devices 8 --layout pp2,ep2,zero1,full --seq 64 "
                             "--global-batch 8 --json");
  ASSERT_EQ(same.exit_code, 0) << same.output;
  const nlohmann::json roles = nlohmann::json::parse(same.output)["roles"];
  int64_t largest = 0;
  for (const auto& role : roles) largest = std::max(largest, role["total"].get<int64_t>());
  const nlohmann::json memory =
      nlohmann::json::parse(trex::read_file(dir.file("plan.json")))["memory_gib"];
  EXPECT_TRUE(memory["from_engine"].get<bool>());
  EXPECT_NEAR(memory["total_bytes"].get<double>() -
                  memory["reserved"].get<double>() * 1024.0 * 1024.0 * 1024.0,
              static_cast<double>(largest), 1.0);
  const auto modelled = run_trex(plan_args + dir.file("own.json") + " --no-engine-memory");
  ASSERT_EQ(modelled.exit_code, 0) << modelled.output;
  EXPECT_FALSE(
      nlohmann::json::parse(trex::read_file(dir.file("own.json")))["memory_gib"]["from_engine"]
          .get<bool>());

  const auto odd = run_trex("model memory --model " + model + " --devices 6 --layout pp4");
  EXPECT_NE(odd.exit_code, 0);
  EXPECT_NE(odd.output.find("not a multiple of pp x ep = 4"), std::string::npos) << odd.output;
}

TEST(TrainExport, TransformersExportRoundTripsLogits) {
  TempDir dir;
  trex::test::write_tiny_training_data(dir.path());
  trex::train::RunConfig c = trex::test::tiny_run_config(dir.path(), trex::train::DataMode::kCpt);
  c.steps = 1;
  c.global_batch = 1;
  trex::train::Trainer trainer(c, {.quiet = true, .write_metrics = false});
  const auto summary = trainer.run();

  for (const std::string dtype : {"fp32", "bf16"}) {
    const std::string out = dir.file("hf-" + dtype);
    const auto r = run_trex("export --checkpoint " + summary.last_checkpoint + " --out " + out +
                            " --dtype " + dtype);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(std::filesystem::exists(out + "/tokenizer.json"));
    const auto config = nlohmann::json::parse(trex::read_file(out + "/config.json"));
    EXPECT_TRUE(config.contains("layer_types"));  // the transformers key scheme
    trex::model::NamingScheme scheme{};
    auto exported = trex::model::Model<float>::from_checkpoint(out, &scheme);
    EXPECT_EQ(scheme, trex::model::NamingScheme::kTransformers);

    trex::model::Batch batch;
    batch.B = 1;
    batch.S = 12;
    for (int64_t t = 0; t < batch.S; ++t) batch.input_ids.push_back((t * 37 + 5) % 300);
    trex::model::StepOptions forward_only;
    forward_only.backward = false;
    const int64_t V = exported.config().vocab_size;
    std::vector<float> a(static_cast<size_t>(batch.S * V)), b(a.size());
    trainer.model().forward_backward(batch, {}, forward_only, a.data());
    exported.forward_backward(batch, {}, forward_only, b.data());
    double max_err = 0;
    for (size_t i = 0; i < a.size(); ++i)
      max_err = std::max(max_err, static_cast<double>(std::abs(a[i] - b[i])));
    if (dtype == "fp32")
      EXPECT_EQ(a, b);
    else
      EXPECT_LT(max_err, 0.05) << "bf16 weights";
  }
  const auto bad = run_trex("export --checkpoint " + summary.last_checkpoint + " --out " +
                            dir.file("x") + " --scheme hybrid");
  EXPECT_EQ(bad.exit_code, 1);
}

}  // namespace
