// The shared training step (train/step.hpp): run_step over one process is the
// trainer's sequence bit for bit, and its guard skips the update of a step with
// a non-finite loss, no trained token or a non-finite gradient norm.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/model/model.hpp"
#include "trex/train/checkpoint.hpp"
#include "trex/train/optim/grad_clip.hpp"
#include "trex/train/optim/optimizer.hpp"
#include "trex/train/step.hpp"

namespace {

using trex::model::Batch;
using trex::model::Model;
using trex::train::StepOutcome;
using trex::train::StepSettings;
using trex::train::StepTotals;

Model<float> tiny_model() {
  Model<float> m(
      trex::model::ModelConfig::load(trex::test::source_dir() + "/configs/models/tiny-v4.json"));
  m.init_random(5);
  return m;
}

Batch random_batch(int64_t vocab, int64_t seq) {
  Batch b;
  b.B = 1;
  b.S = seq;
  trex::Rng rng(11, {0x51e9});
  b.input_ids.resize(static_cast<size_t>(seq));
  for (int64_t& id : b.input_ids) id = rng.uniform_int(int64_t{0}, vocab - 1);
  return b;
}

bool all_zero(const std::vector<float>& v) {
  for (float x : v)
    if (x != 0.0f) return false;
  return true;
}

TEST(TrainStep, SingleProcessRunStepIsTheTrainersSequenceBitwise) {
  Model<float> manual = tiny_model(), shared = tiny_model();
  const std::vector<Batch> micro_batches = {random_batch(manual.config().vocab_size, 16)};
  StepSettings settings;
  settings.loss.mtp_weight = 0.3;
  settings.loss.balance_loss_weight = 1e-3;
  settings.lr = 2e-3;
  settings.clip = 0.5;
  settings.router_bias_speed = 1e-2;
  trex::train::Optimizer manual_optimizer(manual.params(), {});
  trex::train::Optimizer shared_optimizer(shared.params(), {});
  trex::train::SingleProcessGradients gradients(shared);
  for (int step = 0; step < 2; ++step) {
    manual.params().zero_grads();
    const trex::model::LossBreakdown r =
        manual.forward_backward(micro_batches.front(), settings.loss);
    const double norm = trex::train::clip_grad_norm(manual.params(), settings.clip);
    manual_optimizer.step(manual.params(), settings.lr);
    manual.update_router_biases(r, settings.router_bias_speed);
    manual.params().zero_grads();

    const StepOutcome outcome =
        trex::train::run_step(shared, shared_optimizer, gradients, micro_batches, settings);
    ASSERT_TRUE(outcome.updated()) << outcome.skip_reason;
    EXPECT_EQ(outcome.grad_norm, norm);
    EXPECT_EQ(gradients.last().total, r.total);
    EXPECT_EQ(outcome.totals.lm_tokens, r.lm_tokens);
    EXPECT_EQ(outcome.totals.micro_batches, 1);
    EXPECT_EQ(outcome.totals.expert_load, r.expert_load);
    EXPECT_GT(gradients.forward_backward_seconds(), 0.0);
  }
  EXPECT_EQ(shared.params().values(), manual.params().values());
  EXPECT_EQ(shared_optimizer.first_moment(), manual_optimizer.first_moment());
  EXPECT_EQ(shared_optimizer.second_moment(), manual_optimizer.second_moment());
  EXPECT_EQ(shared_optimizer.step_count(), 2);
  EXPECT_TRUE(all_zero(shared.params().grads()));
  // The router-bias rule ran: a bias moved away from its zero init.
  bool bias_moved = false;
  for (const auto& spec : shared.params().specs())
    if (spec.name.find("gate.bias") != std::string::npos)
      for (int64_t i = 0; i < spec.numel(); ++i)
        bias_moved = bias_moved || shared.params().value(spec.name)[i] != 0.0f;
  EXPECT_TRUE(bias_moved);
}

TEST(TrainStep, SingleProcessTakesOneMicroBatch) {
  Model<float> m = tiny_model();
  trex::train::SingleProcessGradients gradients(m);
  const Batch b = random_batch(m.config().vocab_size, 8);
  EXPECT_THROW(gradients.forward_backward({b, b}, {}), trex::Error);
}

// A strategy that returns the totals and norm it is given and logs the calls.
class ScriptedGradients final : public trex::train::GradientStrategy {
 public:
  ScriptedGradients(Model<float>& model, StepTotals totals, double norm, std::string nan_in = "")
      : model_(model), totals_(std::move(totals)), norm_(norm), nan_in_(std::move(nan_in)) {}
  StepTotals forward_backward(const std::vector<Batch>&, const trex::model::LossOptions&) override {
    calls.push_back("forward_backward");
    for (float& g : model_.params().grads()) g = 0.25f;
    if (!nan_in_.empty())
      model_.params().grads()[static_cast<size_t>(model_.params().offset(nan_in_))] = NAN;
    return totals_;
  }
  double clip_gradients(double max_norm) override {
    calls.push_back("clip " + std::to_string(max_norm));
    return norm_;
  }
  void after_update() override { calls.push_back("after_update"); }
  void release_gradients() override { calls.push_back("release"); }
  std::vector<std::string> calls;

 private:
  Model<float>& model_;
  StepTotals totals_;
  double norm_;
  std::string nan_in_;
};

struct GuardCase {
  StepTotals totals;
  double norm = 1.0;
  std::string nan_in;
};

// Runs one step of `c` on a fresh tiny model; returns the outcome, the calls
// and whether the weights or the optimizer changed.
struct GuardResult {
  StepOutcome outcome;
  std::vector<std::string> calls;
  bool weights_changed = false;
  int64_t optimizer_steps = 0;
  bool gradients_zeroed = false;
};
GuardResult run_guard_case(const GuardCase& c) {
  Model<float> m = tiny_model();
  const std::vector<float> before = m.params().values();
  trex::train::Optimizer optimizer(m.params(), {});
  ScriptedGradients gradients(m, c.totals, c.norm, c.nan_in);
  StepSettings settings;
  settings.lr = 1e-3;
  settings.clip = 2.0;
  settings.on_gradients = [&] { gradients.calls.push_back("on_gradients"); };
  GuardResult r;
  r.outcome = trex::train::run_step(m, optimizer, gradients, {Batch{}}, settings);
  r.calls = gradients.calls;
  r.weights_changed = m.params().values() != before;
  r.optimizer_steps = optimizer.step_count();
  r.gradients_zeroed = all_zero(m.params().grads());
  return r;
}

StepTotals finite_totals() {
  StepTotals t;
  t.lm_sum = 6.0;
  t.lm_tokens = 3;
  t.micro_batches = 1;
  return t;
}

TEST(TrainStep, GuardSkipsNonFiniteLossBeforeClipping) {
  GuardCase c;
  c.totals = finite_totals();
  c.totals.finite = false;
  const GuardResult r = run_guard_case(c);
  EXPECT_EQ(r.outcome.skip_reason, "non-finite loss");
  EXPECT_TRUE(std::isnan(r.outcome.grad_norm));
  EXPECT_EQ(r.calls, (std::vector<std::string>{"forward_backward", "on_gradients", "release"}));
  EXPECT_FALSE(r.weights_changed);
  EXPECT_EQ(r.optimizer_steps, 0);
  EXPECT_TRUE(r.gradients_zeroed);
}

TEST(TrainStep, GuardSkipsAStepWithoutTrainedTokens) {
  GuardCase c;
  c.totals = finite_totals();
  c.totals.lm_tokens = 0;
  const GuardResult r = run_guard_case(c);
  EXPECT_EQ(r.outcome.skip_reason, "no trained tokens in the step");
  EXPECT_FALSE(r.weights_changed);
  EXPECT_EQ(r.optimizer_steps, 0);
}

TEST(TrainStep, GuardSkipsANonFiniteNormNamingTheTensor) {
  const Model<float> probe = tiny_model();
  const std::string tensor =
      probe.params().specs()[probe.params().specs().size() / 3].name;  // any tensor
  GuardCase c;
  c.totals = finite_totals();
  c.norm = NAN;
  c.nan_in = tensor;
  const GuardResult r = run_guard_case(c);
  EXPECT_EQ(r.outcome.skip_reason, "non-finite gradient norm");
  EXPECT_EQ(r.outcome.skip_detail, " (first non-finite gradient in '" + tensor + "')");
  EXPECT_TRUE(std::isnan(r.outcome.grad_norm));
  EXPECT_EQ(r.calls, (std::vector<std::string>{"forward_backward", "on_gradients",
                                               "clip " + std::to_string(2.0), "release"}));
  EXPECT_FALSE(r.weights_changed);
  EXPECT_EQ(r.optimizer_steps, 0);
  EXPECT_TRUE(r.gradients_zeroed);
}

TEST(TrainStep, AFiniteStepUpdatesThenGathersThenReleases) {
  GuardCase c;
  c.totals = finite_totals();
  c.norm = 1.5;
  const GuardResult r = run_guard_case(c);
  EXPECT_TRUE(r.outcome.updated());
  EXPECT_EQ(r.outcome.grad_norm, 1.5);
  EXPECT_EQ(r.calls,
            (std::vector<std::string>{"forward_backward", "on_gradients",
                                      "clip " + std::to_string(2.0), "after_update", "release"}));
  EXPECT_TRUE(r.weights_changed);
  EXPECT_EQ(r.optimizer_steps, 1);
  EXPECT_TRUE(r.gradients_zeroed);
}

TEST(TrainStep, TotalsAreTokenWeightedMeans) {
  StepTotals t;
  trex::model::LossBreakdown a, b;
  a.lm = 2.0, a.lm_tokens = 1, a.mtp = 1.0, a.mtp_tokens = 2, a.balance = 0.5, a.total = 3.0;
  b.lm = 5.0, b.lm_tokens = 3, b.mtp = 4.0, b.mtp_tokens = 2, b.balance = 0.25, b.total = 9.0;
  a.expert_load = {{1, 2}};
  b.expert_load = {{3, 0}};
  t.add(a);
  t.add(b);
  t.micro_batches = 2;
  EXPECT_TRUE(t.finite);
  EXPECT_DOUBLE_EQ(t.lm_loss(), (2.0 + 15.0) / 4.0);
  EXPECT_DOUBLE_EQ(t.mtp_loss(), (2.0 + 8.0) / 4.0);
  EXPECT_DOUBLE_EQ(t.balance_loss(), 0.375);
  EXPECT_DOUBLE_EQ(t.loss(0.5), 17.0 / 4.0 + 0.5 * 2.5 + 0.375);
  EXPECT_EQ(t.expert_load, (std::vector<std::vector<int64_t>>{{4, 2}}));
  b.total = INFINITY;
  t.add(b);
  EXPECT_FALSE(t.finite);
}

TEST(TrainCheckpoint, TrainerStateRoundTripsAndNamesTheFileOnABadField) {
  trex::test::TempDir dir;
  trex::train::TrainerState s;
  s.step = 7;
  s.total_steps = 12;
  s.consumed_tokens = 900;
  s.trained_tokens = 850;
  s.skipped_steps = 1;
  s.spikes = 2;
  s.last_validation_loss = 3.25;
  s.spike_window = std::vector<double>{4.5, 4.25};
  s.loader.seed = 3;
  s.loader.epoch = 1;
  s.loader.cursor = 5;
  trex::train::RunConfig config;
  config.data_seed = 3;
  nlohmann::json j = s.to_json(config, 6);
  EXPECT_EQ(j.at("optimizer_step").get<int64_t>(), 6);
  EXPECT_EQ(j.at("data_seed").get<std::string>(), "3");
  const std::string path = dir.path() + "/trainer_state.json";
  std::ofstream(path) << j.dump();
  const trex::train::TrainerState back = trex::train::TrainerState::read(dir.path());
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.total_steps, 12);
  EXPECT_EQ(back.consumed_tokens, 900);
  EXPECT_EQ(back.trained_tokens, 850);
  EXPECT_EQ(back.skipped_steps, 1);
  EXPECT_EQ(back.spikes, 2);
  EXPECT_EQ(back.last_validation_loss, 3.25);
  EXPECT_EQ(back.spike_window, s.spike_window);
  EXPECT_TRUE(back.loader == s.loader);

  j["spikes"] = "two";
  std::ofstream(path) << j.dump();
  try {
    trex::train::TrainerState::read(dir.path());
    FAIL() << "a bad field was accepted";
  } catch (const trex::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad trainer state"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("trainer_state.json"), std::string::npos) << e.what();
  }
}

}  // namespace
