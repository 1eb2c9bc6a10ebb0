// The trainer: run config parsing, a step against a manual step, gradient
// accumulation normalisation, the stability guard, bitwise resume, checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "test_paths.hpp"
#include "trainer_fixtures.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/dtypes.hpp"
#include "trex/core/error.hpp"
#include "trex/core/jsonl.hpp"
#include "trex/kernels/precision.hpp"
#include "trex/train/checkpoint.hpp"
#include "trex/train/data/cpt.hpp"
#include "trex/train/optim/grad_clip.hpp"
#include "trex/train/optim/schedule.hpp"
#include "trex/train/trainer.hpp"

namespace {

using trex::test::TempDir;
using trex::train::DataMode;
using trex::train::RunConfig;
using trex::train::Trainer;
using trex::train::TrainerOptions;

nlohmann::json full_example() {
  return nlohmann::json::parse(R"({
    "model": {"config": "models/tiny.json", "seed": 5},
    "tokenizer": "tok/tokenizer.json",
    "data": {"mode": "sft", "train": "data/train.jsonl", "validation": "data/val.jsonl",
             "seed": "18446744073709551615", "shuffle": false},
    "seq_len": 128, "micro_batch": 2, "global_batch": 8, "steps": 50,
    "optimizer": {"use_muon": true, "moment_dtype": "bf16",
                  "adamw": {"beta1": 0.9, "beta2": 0.95, "eps": 1e-20, "weight_decay": 0.1},
                  "muon": {"momentum": 0.95, "nesterov": true, "ns_iterations": 10,
                           "ns_tail_iterations": 2, "rms_scale": 0.18, "weight_decay": 0.1}},
    "schedule": {"peak_lr": 2e-3, "min_lr": 2e-4, "warmup_steps": 5},
    "clip": 1.0, "precision": "bf16", "recompute": "full",
    "loss": {"mtp_weight": 0.3, "balance_weight": 0.0001},
    "router_bias_speed": 0.001,
    "eval_interval": 10, "eval_batches": 2, "checkpoint_interval": 25, "keep_checkpoints": 2,
    "log_interval": 5, "out_dir": "runs/a", "peak_gflops": 100.0,
    "spike": {"window": 10, "z_threshold": 5.0}
  })");
}

std::string error_of(const nlohmann::json& j) {
  try {
    RunConfig::from_json(j, "run.json", "/base");
  } catch (const trex::Error& e) {
    return e.what();
  }
  return "";
}

TEST(TrainRunConfig, ParsesEveryKeyAndResolvesPaths) {
  const RunConfig c = RunConfig::from_json(full_example(), "run.json", "/base");
  EXPECT_EQ(c.model_config, "/base/models/tiny.json");
  EXPECT_EQ(c.init_seed, 5u);
  EXPECT_EQ(c.tokenizer, "/base/tok/tokenizer.json");
  EXPECT_EQ(c.mode, DataMode::kSft);
  EXPECT_EQ(c.validation_file, "/base/data/val.jsonl");
  EXPECT_EQ(c.data_seed, 18446744073709551615ull);
  EXPECT_FALSE(c.shuffle);
  EXPECT_EQ(c.accumulation_steps(), 4);
  EXPECT_EQ(c.precision, trex::train::TrainPrecision::kBf16);
  EXPECT_DOUBLE_EQ(c.optimizer.muon.rms_scale, 0.18);
  EXPECT_EQ(c.optimizer.moment_dtype, trex::train::MomentDType::kBF16);
  EXPECT_EQ(c.recompute, trex::model::ActivationRecompute::kFull);
  EXPECT_DOUBLE_EQ(c.min_lr, 2e-4);
  EXPECT_EQ(c.keep_checkpoints, 2);
  EXPECT_EQ(c.spike_window, 10);
  // to_json round-trips.
  const RunConfig again = RunConfig::from_json(c.to_json(), "again.json");
  EXPECT_EQ(again.to_json(), c.to_json());
}

TEST(TrainRunConfig, ErrorsNameFileAndKey) {
  nlohmann::json j = full_example();
  j["schedule"]["peek_lr"] = 1.0;
  EXPECT_EQ(error_of(j),
            "run.json: field 'schedule.peek_lr': unknown key (did you mean 'peak_lr'? allowed: "
            "min_lr, peak_lr, warmup_steps)");
  j = full_example();
  j["precision"] = "fp16";
  EXPECT_NE(error_of(j).find("field 'precision'"), std::string::npos);
  j = full_example();
  j["global_batch"] = 7;
  EXPECT_NE(error_of(j).find("field 'global_batch': must be a positive multiple"),
            std::string::npos);
  j = full_example();
  j["model"]["init_checkpoint"] = "ckpt";
  EXPECT_NE(error_of(j).find("field 'model'"), std::string::npos);
  j = full_example();
  j["seq_len"] = "long";
  EXPECT_EQ(error_of(j), "run.json: field 'seq_len': expected an integer, got string");
  j = full_example();
  j["optimizer"]["muon"]["momentum"] = 1.5;
  EXPECT_NE(error_of(j).find("optimizer.muon.momentum"), std::string::npos);
  j = full_example();
  j["recompute"] = "partial";
  EXPECT_NE(error_of(j).find("field 'recompute'"), std::string::npos);
  j = full_example();
  j["optimizer"]["moment_dtype"] = "fp8";
  EXPECT_NE(error_of(j).find("field 'optimizer.moment_dtype'"), std::string::npos);
  j = full_example();
  j["steps"] = 0;
  EXPECT_NE(error_of(j).find("field 'steps'"), std::string::npos);
  j["epochs"] = 2.0;
  EXPECT_EQ(error_of(j), "");
  j = full_example();
  j["data"]["mode"] = "rl";
  EXPECT_NE(error_of(j).find("field 'data.mode'"), std::string::npos);

  TempDir dir;
  trex::write_file_atomic(dir.file("bad.json"), "{\"steps\": 3,}");
  try {
    RunConfig::load(dir.file("bad.json"));
    FAIL() << "no error";
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.file_name(), dir.file("bad.json"));
  }
}

// A TOML run config reads exactly like the same keys in JSON; syntax errors
// name the file and line.
TEST(TrainRunConfig, TomlEqualsJson) {
  TempDir dir;
  trex::write_file_atomic(dir.file("run.toml"), R"(# the full example, in TOML
tokenizer = "tok/tokenizer.json"
seq_len = 128
micro_batch = 2
global_batch = 8
steps = 50
clip = 1.0
precision = "bf16"
recompute = "full"
router_bias_speed = 0.001
eval_interval = 10
eval_batches = 2
checkpoint_interval = 25
keep_checkpoints = 2
log_interval = 5
out_dir = "runs/a"
peak_gflops = 100.0

[model]
config = "models/tiny.json"
seed = 5

[data]
mode = "sft"
train = "data/train.jsonl"
validation = "data/val.jsonl"
seed = "18446744073709551615"
shuffle = false

[optimizer]
use_muon = true
moment_dtype = "bf16"
adamw = { beta1 = 0.9, beta2 = 0.95, eps = 1e-20, weight_decay = 0.1 }
muon = { momentum = 0.95, nesterov = true, ns_iterations = 10, ns_tail_iterations = 2, rms_scale = 0.18, weight_decay = 0.1 }

[schedule]
peak_lr = 2e-3
min_lr = 2e-4
warmup_steps = 5

[loss]
mtp_weight = 0.3
balance_weight = 0.0001

[spike]
window = 10
z_threshold = 5.0
)");
  const RunConfig from_toml = RunConfig::load(dir.file("run.toml"));
  const RunConfig from_json = RunConfig::from_json(full_example(), "run.json", dir.path());
  EXPECT_EQ(from_toml.to_json(), from_json.to_json());

  trex::write_file_atomic(dir.file("bad.toml"), "steps = 3\nseq_len = = 4\n");
  try {
    RunConfig::load(dir.file("bad.toml"));
    FAIL() << "no error";
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.file_name(), dir.file("bad.toml"));
    EXPECT_EQ(e.line_number(), 2);
  }
  trex::write_file_atomic(dir.file("unknown.toml"), "[schedule]\npeek_lr = 1.0\n");
  try {
    RunConfig::load(dir.file("unknown.toml"));
    FAIL() << "no error";
  } catch (const trex::Error& e) {
    EXPECT_NE(std::string(e.what()).find("schedule.peek_lr"), std::string::npos);
    EXPECT_EQ(e.line_number(), 2);
  }
}

// One trainer step equals the step written out by hand from the pieces.
TEST(TrainTrainer, StepEqualsManualStep) {
  TempDir dir;
  trex::test::write_tiny_training_data(dir.path());
  RunConfig c = trex::test::tiny_run_config(dir.path(), DataMode::kCpt);
  c.global_batch = 1;
  Trainer trainer(c, {.quiet = true, .write_metrics = false});
  const trex::train::MetricsRecord rec = trainer.train_step();

  auto model = trex::model::Model<float>(trex::model::ModelConfig::load(c.model_config));
  model.init_random(c.init_seed);
  const auto tokenizer = trex::io::Tokenizer::load(c.tokenizer);
  auto loader = trex::train::CptLoader::from_jsonl(
      c.train_file, tokenizer, {.seq_len = c.seq_len, .batch_size = 1, .seed = c.data_seed});
  trex::train::PackedBatch packed = loader.next_batch();
  trex::model::Batch batch = packed.batch;
  batch.position_ids = packed.position_ids;
  batch.document_ids = packed.document_ids;
  trex::model::LossOptions loss;
  loss.mtp_weight = c.mtp_weight;
  loss.balance_loss_weight = c.balance_weight;
  model.params().zero_grads();
  const auto r = model.forward_backward(batch, loss);
  const double norm = trex::train::clip_grad_norm(model.params(), c.clip);
  trex::train::Optimizer optimizer(model.params(), c.optimizer);
  const double lr = trex::train::learning_rate(c.schedule(c.steps), 1);
  optimizer.step(model.params(), lr);
  model.update_router_biases(r, c.router_bias_speed);

  EXPECT_DOUBLE_EQ(rec.get("loss_lm"), r.lm);
  EXPECT_DOUBLE_EQ(rec.get("grad_norm"), norm);
  EXPECT_DOUBLE_EQ(rec.get("lr"), lr);
  EXPECT_EQ(rec.get("skipped"), 0.0);
  const auto a = trainer.model().params().copy_values();
  const auto& b = model.params().values();
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_GT(rec.get("model_tflops"), 0.0);
  EXPECT_GE(rec.get("expert_imbalance/max"), 1.0);
}

// Accumulating 2 micro-batches of 1 gives the gradient of one batch of 2: the
// mean over every trained token of the step (SFT: very different token counts).
TEST(TrainTrainer, AccumulationNormalisesByTrainedTokens) {
  TempDir dir;
  trex::test::write_tiny_training_data(dir.path());
  RunConfig c = trex::test::tiny_run_config(dir.path(), DataMode::kSft);
  c.mtp_weight = 0;
  c.balance_weight = 0;
  c.clip = 0;
  c.seq_len = 16;  // one chat per sequence, so both layouts see the same sequences
  std::vector<float> accumulated, whole;
  {
    Trainer t(c, {.quiet = true, .write_metrics = false});
    t.set_gradient_hook(
        [&](int64_t, trex::model::ParamStore<float>& p) { accumulated = p.grads(); });
    t.train_step();
  }
  c.micro_batch = 2;
  {
    Trainer t(c, {.quiet = true, .write_metrics = false});
    t.set_gradient_hook([&](int64_t, trex::model::ParamStore<float>& p) { whole = p.grads(); });
    t.train_step();
  }
  ASSERT_EQ(accumulated.size(), whole.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(accumulated[i] - whole[i])));
    scale = std::max(scale, static_cast<double>(std::abs(whole[i])));
  }
  EXPECT_GT(scale, 0.0);
  EXPECT_LT(diff, 1e-4 * scale);
}

TEST(TrainGuard, NonFiniteGradientStepIsSkipped) {
  TempDir dir;
  trex::test::write_tiny_training_data(dir.path());
  RunConfig c = trex::test::tiny_run_config(dir.path(), DataMode::kCpt);
  c.global_batch = 1;
  Trainer trainer(c, {.quiet = true, .write_metrics = false});
  trainer.set_gradient_hook([](int64_t step, trex::model::ParamStore<float>& p) {
    if (step == 2) p.grads()[p.size() / 2] = NAN;
  });
  trainer.train_step();
  const std::vector<float> before = trainer.model().params().copy_values();
  const auto rec = trainer.train_step();
  EXPECT_EQ(rec.get("skipped"), 1.0);
  EXPECT_TRUE(std::isnan(rec.get("grad_norm")));
  EXPECT_EQ(trainer.optimizer().step_count(), 1);
  const auto after = trainer.model().params().copy_values();
  EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)), 0);
  for (float g : trainer.model().params().grads()) ASSERT_EQ(g, 0.0f);
  EXPECT_EQ(trainer.summary().skip_reasons.size(), 1u);
  EXPECT_EQ(trainer.summary().skip_reasons[0], "step 2: non-finite gradient norm");
  const auto next = trainer.train_step();
  EXPECT_EQ(next.get("skipped"), 0.0);
  EXPECT_EQ(trainer.optimizer().step_count(), 2);
  EXPECT_TRUE(std::isfinite(next.get("grad_norm")));
}

TEST(TrainTrainer, EpochsDeriveStepsAndEvalHookAddsScalars) {
  TempDir dir;
  trex::test::write_tiny_training_data(dir.path());
  RunConfig c = trex::test::tiny_run_config(dir.path(), DataMode::kCpt);
  c.steps = 0;
  c.epochs = 1.0;
  c.eval_interval = 1;
  c.validation_file = c.train_file;
  c.eval_batches = 1;
  Trainer t(c, {.quiet = true});
  // 6 documents of about 10 tokens in sequences of 24: ceil(sequences / global_batch) steps.
  const auto tokenizer = trex::io::Tokenizer::load(c.tokenizer);
  auto loader = trex::train::CptLoader::from_jsonl(c.train_file, tokenizer,
                                                   {.seq_len = c.seq_len, .seed = c.data_seed});
  EXPECT_EQ(t.total_steps(), (loader.sequences_in_epoch() + 1) / 2);
  ASSERT_GE(t.total_steps(), 2);
  std::vector<int64_t> hook_steps;
  t.run([&](Trainer& trainer, int64_t step, trex::train::MetricsRecord& record) {
    hook_steps.push_back(step);
    record.set("val_pass_at_1", 0.25 * static_cast<double>(step));
    EXPECT_EQ(trainer.step(), step);
  });
  EXPECT_EQ(static_cast<int64_t>(hook_steps.size()), t.total_steps());
  const auto lines = trex::read_jsonl(c.out_dir + "/metrics.jsonl");
  ASSERT_EQ(static_cast<int64_t>(lines.size()), t.total_steps());
  EXPECT_DOUBLE_EQ(lines[1]["val_pass_at_1"].get<double>(), 0.5);
  EXPECT_TRUE(lines[1].contains("val_loss"));
  EXPECT_GT(lines[1]["val_loss"].get<double>(), 0.0);
}

// precision bf16: bf16 GEMM operands (fp32 master weights), a close but different step.
TEST(TrainTrainer, Bf16PrecisionIsCloseToFp32AndStaysWithItsModel) {
  TempDir dir;
  trex::test::write_tiny_training_data(dir.path());
  RunConfig c = trex::test::tiny_run_config(dir.path(), DataMode::kCpt);
  c.global_batch = 1;
  Trainer fp32(c, {.quiet = true, .write_metrics = false});
  const auto a = fp32.train_step();
  c.precision = trex::train::TrainPrecision::kBf16;
  Trainer bf16(c, {.quiet = true, .write_metrics = false});
  const auto b = bf16.train_step();
  EXPECT_EQ(fp32.model().compute_precision(), trex::kernels::Precision::kF32);
  EXPECT_EQ(bf16.model().compute_precision(), trex::kernels::Precision::kBF16);
  EXPECT_NEAR(a.get("loss_lm"), b.get("loss_lm"), 2e-2);
  EXPECT_NE(a.get("loss_lm"), b.get("loss_lm"));
  EXPECT_NE(fp32.model().params().copy_values(), bf16.model().params().copy_values());
}

TEST(TrainGuard, NaNParameterGivesNonFiniteLossAndNoUpdate) {
  TempDir dir;
  trex::test::write_tiny_training_data(dir.path());
  RunConfig c = trex::test::tiny_run_config(dir.path(), DataMode::kCpt);
  Trainer trainer(c, {.quiet = true, .write_metrics = false});
  auto& params = trainer.model().params();
  const auto& spec = params.spec("embed.weight");
  // Poison every embedding row: whatever tokens the batch holds, the loss is NaN.
  float* embed = params.value("embed.weight");
  for (int64_t i = 0; i < spec.numel(); i += spec.shape[1]) embed[i] = NAN;
  const std::vector<float> before = params.values();
  const auto rec = trainer.train_step();
  EXPECT_EQ(rec.get("skipped"), 1.0);
  EXPECT_TRUE(std::isnan(rec.get("loss")));
  EXPECT_EQ(trainer.optimizer().step_count(), 0);
  EXPECT_EQ(trainer.summary().skip_reasons.at(0), "step 1: non-finite loss");
  EXPECT_EQ(std::memcmp(before.data(), params.values().data(), before.size() * sizeof(float)), 0);
}

// A run interrupted after step k and resumed equals an uninterrupted one, bitwise.
void expect_bitwise_resume(DataMode mode,
                           trex::train::MomentDType moments = trex::train::MomentDType::kF32,
                           bool bf16_params = false) {
  TempDir dir;
  trex::test::write_tiny_training_data(dir.path());
  RunConfig c = trex::test::tiny_run_config(dir.path(), mode);
  c.optimizer.moment_dtype = moments;
  c.optimizer.master_weights = bf16_params;
  c.validation_file = c.train_file;
  c.eval_interval = 2;
  c.eval_batches = 1;
  RunConfig straight = c;
  straight.out_dir = dir.path() + "/straight";
  Trainer a(straight, {.quiet = true});
  const auto summary_a = a.run();
  EXPECT_EQ(summary_a.steps, 4);

  RunConfig broken = c;
  broken.out_dir = dir.path() + "/broken";
  {
    Trainer first(broken, {.quiet = true, .stop_after_step = 2});
    const auto s = first.run();
    EXPECT_TRUE(s.interrupted);
    EXPECT_EQ(s.steps, 2);
  }
  Trainer resumed(broken, {.resume = true, .quiet = true});
  EXPECT_EQ(resumed.step(), 2);
  const auto summary_b = resumed.run();
  EXPECT_EQ(summary_b.steps, 4);

  const auto pa = a.model().params().copy_values();
  const auto pb = resumed.model().params().copy_values();
  ASSERT_EQ(pa.size(), pb.size());
  EXPECT_EQ(std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)), 0);
  EXPECT_EQ(a.optimizer().first_moment(), resumed.optimizer().first_moment());
  EXPECT_EQ(a.optimizer().second_moment(), resumed.optimizer().second_moment());
  EXPECT_EQ(a.optimizer().step_count(), resumed.optimizer().step_count());
  EXPECT_EQ(a.optimizer().master(), resumed.optimizer().master());
  EXPECT_EQ(a.optimizer().master().empty(), !bf16_params);
  EXPECT_EQ(summary_a.final_loss, summary_b.final_loss);
  if (bf16_params) {
    // Every trained tensor holds bf16 values; the master does not.
    int64_t rounded_master = 0, master_values = 0;
    for (const trex::model::ParamSpec& spec : a.model().params().specs()) {
      if (spec.group == trex::model::OptimizerGroup::kNotTrained) continue;
      const int64_t at = a.model().params().offset(spec.name);
      for (int64_t i = at; i < at + spec.numel(); ++i) {
        const float w = pa[static_cast<size_t>(i)];
        ASSERT_EQ(w, trex::bf16_to_f32(trex::f32_to_bf16(w))) << spec.name;
        const float m = a.optimizer().master()[static_cast<size_t>(i)];
        ASSERT_EQ(w, trex::bf16_to_f32(trex::f32_to_bf16(m))) << spec.name;
        rounded_master += m == w;
        ++master_values;
      }
    }
    EXPECT_LT(rounded_master, master_values / 4);
  }

  // The checkpoint is a plain model directory too.
  const auto latest = trex::train::latest_checkpoint(broken.out_dir);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(std::filesystem::path(*latest).filename(), "step-00000004");
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json",
                        "optimizer.safetensors", "trainer_state.json"})
    EXPECT_TRUE(std::filesystem::exists(*latest + "/" + f)) << f;
  const auto loaded = trex::model::Model<float>::from_checkpoint(*latest);
  EXPECT_EQ(loaded.params().values(), pa);
  // One metrics record per step, the interrupted run's and the resumed run's together.
  const auto lines = trex::read_jsonl(broken.out_dir + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 4u);
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["step"], i + 1);
  EXPECT_TRUE(lines[1].contains("val_loss"));
}

TEST(TrainResume, InterruptedCptRunContinuesBitwise) {
  expect_bitwise_resume(DataMode::kCpt);
}
TEST(TrainResume, InterruptedSftRunContinuesBitwise) {
  expect_bitwise_resume(DataMode::kSft);
}
// The checkpoint holds bf16 moments widened to fp32, which round back exactly.
TEST(TrainResume, InterruptedRunWithBf16MomentsContinuesBitwise) {
  expect_bitwise_resume(DataMode::kCpt, trex::train::MomentDType::kBF16);
}
// param_dtype = "bf16": the fp32 master weights travel with the optimizer state.
TEST(TrainResume, InterruptedRunWithBf16ParametersContinuesBitwise) {
  expect_bitwise_resume(DataMode::kSft, trex::train::MomentDType::kBF16, true);
}

// recompute = "full" and "selective": the same run bit for bit (the loss curve
// and the weights).
TEST(TrainTrainer, FullRecomputeTrainsBitwiseLikeNone) {
  TempDir dir;
  trex::test::write_tiny_training_data(dir.path());
  RunConfig c = trex::test::tiny_run_config(dir.path(), DataMode::kSft);
  c.steps = 3;
  auto run = [&](trex::model::ActivationRecompute recompute, const std::string& name) {
    RunConfig r = c;
    r.recompute = recompute;
    r.out_dir = dir.path() + "/" + name;
    Trainer trainer(r, {.quiet = true, .write_metrics = false});
    std::vector<double> losses;
    for (int i = 0; i < 3; ++i) {
      const auto record = trainer.train_step();
      losses.push_back(record.get("loss_lm", -1.0));
      losses.push_back(record.get("grad_norm", -1.0));
    }
    return std::pair(losses, trainer.model().params().copy_values());
  };
  const auto none = run(trex::model::ActivationRecompute::kNone, "none");
  const auto full = run(trex::model::ActivationRecompute::kFull, "full");
  EXPECT_EQ(none.first, full.first);
  EXPECT_EQ(none.second, full.second);
  const auto selective = run(trex::model::ActivationRecompute::kSelective, "selective");
  EXPECT_EQ(none.first, selective.first);
  EXPECT_EQ(none.second, selective.second);
}

// The tiny model's validation loss after 12 CPT steps with the moment dtype
// and master weights of `options` (and the optimizer's moment and master bytes).
struct ValidationRun {
  double loss = 0;
  int64_t state_bytes = 0, master_bytes = 0;
};
ValidationRun validation_after_12_steps(const trex::train::OptimizerOptions& options,
                                        const std::string& out_dir) {
  trex::test::write_tiny_training_data(out_dir);
  RunConfig c = trex::test::tiny_run_config(out_dir, DataMode::kCpt);
  c.validation_file = c.train_file;
  c.steps = 12;
  c.eval_interval = 12;
  c.eval_batches = 2;
  c.optimizer.moment_dtype = options.moment_dtype;
  c.optimizer.master_weights = options.master_weights;
  c.out_dir = out_dir + "/run";
  Trainer trainer(c, {.quiet = true});
  trainer.run();
  const auto lines = trex::read_jsonl(c.out_dir + "/metrics.jsonl");
  EXPECT_TRUE(lines.back().contains("val_loss"));
  return {lines.back().value("val_loss", -1.0), trainer.optimizer().state_bytes(),
          trainer.optimizer().master_bytes()};
}

// bf16 optimizer moments (DeepSeek-V3's recipe) train like fp32 ones: the
// validation loss after the same steps agrees within 1%, yet the runs differ.
TEST(TrainTrainer, Bf16MomentsReachTheFp32ValidationLoss) {
  TempDir dir;
  trex::train::OptimizerOptions bf16_moments;
  bf16_moments.moment_dtype = trex::train::MomentDType::kBF16;
  const ValidationRun fp32 = validation_after_12_steps({}, dir.path() + "/f32");
  const ValidationRun bf16 = validation_after_12_steps(bf16_moments, dir.path() + "/bf16");
  EXPECT_NEAR(bf16.loss, fp32.loss, 0.01 * fp32.loss);
  EXPECT_NE(bf16.loss, fp32.loss);
  EXPECT_EQ(2 * bf16.state_bytes, fp32.state_bytes);
}

// param_dtype = "bf16" (bf16 working weights, fp32 master in the optimizer):
// the validation loss after the same steps agrees with the fp32 run within 1%.
TEST(TrainTrainer, Bf16ParametersReachTheFp32ValidationLoss) {
  TempDir dir;
  trex::train::OptimizerOptions bf16_params;
  bf16_params.master_weights = true;
  const ValidationRun fp32 = validation_after_12_steps({}, dir.path() + "/fp32");
  const ValidationRun bf16 = validation_after_12_steps(bf16_params, dir.path() + "/bf16");
  EXPECT_NEAR(bf16.loss, fp32.loss, 0.01 * fp32.loss);
  EXPECT_NE(bf16.loss, fp32.loss);
  EXPECT_EQ(fp32.master_bytes, 0);
  EXPECT_GT(bf16.master_bytes, 0);
}

TEST(TrainCheckpoint, KeepsTheLastKAndRefusesMissingResume) {
  TempDir dir;
  trex::test::write_tiny_training_data(dir.path());
  RunConfig c = trex::test::tiny_run_config(dir.path(), DataMode::kCpt);
  c.global_batch = 1;
  c.steps = 3;
  c.checkpoint_interval = 1;
  c.keep_checkpoints = 2;
  EXPECT_THROW(Trainer(c, {.resume = true, .quiet = true}), trex::Error);
  Trainer t(c, {.quiet = true, .write_metrics = false});
  t.run();
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(c.out_dir + "/checkpoints"))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-00000002", "step-00000003"}));
  EXPECT_EQ(trex::read_file(c.out_dir + "/checkpoints/latest"), "step-00000003\n");
  const auto state = trex::train::read_trainer_state(c.out_dir + "/checkpoints/step-00000003");
  EXPECT_EQ(state["step"], 3);
  EXPECT_EQ(state["optimizer_step"], 3);
  EXPECT_TRUE(state["loader"].contains("cursor"));
}

}  // namespace
