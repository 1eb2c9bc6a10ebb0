// Stage-wise execution (docs/pipeline-parallel.md): running the stages of a
// partition in sequence in one process is forward_backward — the same losses
// and, because the operations and their order are the same, the same
// gradients bit for bit; the gradient weight scales every loss term.
#include <gtest/gtest.h>

#include <vector>

#include "../train/pipeline_fixtures.hpp"
#include "trex/core/error.hpp"
#include "trex/model/model.hpp"

namespace {

using trex::model::Batch;
using trex::model::LossBreakdown;
using trex::model::LossOptions;
using trex::model::Model;
using trex::model::StageCache;
using trex::model::StageSpec;

// Runs the stages in order (forward), then in reverse (backward), handing the
// hidden streams and their gradients from one to the next.
template <class T>
LossBreakdown run_stages(Model<T>& m, const std::vector<StageSpec>& stages, const Batch& batch,
                         const LossOptions& loss, double weight) {
  const size_t K = stages.size();
  const int64_t size = m.stage_activation_size(batch);
  std::vector<std::vector<T>> acts(K + 1, std::vector<T>(static_cast<size_t>(size)));
  std::vector<StageCache<T>> caches(K);
  LossBreakdown total;
  for (size_t k = 0; k < K; ++k) {
    const LossBreakdown part = m.forward_stage(stages[k], batch, loss, {}, weight, acts[k].data(),
                                               acts[k + 1].data(), caches[k]);
    total.balance += part.balance;
    total.indexer += part.indexer;
    if (stages[k].has_head) {
      total.lm = part.lm;
      total.mtp = part.mtp;
      total.lm_tokens = part.lm_tokens;
      total.mtp_tokens = part.mtp_tokens;
    }
    total.expert_load.resize(std::max(total.expert_load.size(), part.expert_load.size()));
    for (size_t l = 0; l < part.expert_load.size(); ++l)
      if (!part.expert_load[l].empty()) total.expert_load[l] = part.expert_load[l];
  }
  std::vector<std::vector<T>> grads(K + 1, std::vector<T>(static_cast<size_t>(size)));
  for (size_t k = K; k-- > 0;) m.backward_stage(caches[k], grads[k + 1].data(), grads[k].data());
  total.total = total.lm + loss.mtp_weight * total.mtp + total.balance +
                loss.indexer_loss_weight * total.indexer;
  return total;
}

// Layers [0,3) with the embedding, an empty stage, [3,5), [5,8) with the head.
std::vector<StageSpec> four_stages() {
  return {{0, 3, true, false}, {3, 3, false, false}, {3, 5, false, false}, {5, 8, false, true}};
}

LossOptions all_losses() {
  LossOptions loss = trex::test::pipeline_loss_options();
  loss.indexer_loss = true;  // CSA layers: the indexer KL loss and its gradient
  loss.indexer_loss_weight = 0.5;
  return loss;
}

template <class T>
void expect_stages_equal_forward_backward() {
  Model<T> m = trex::test::pipeline_model<T>();
  const LossOptions loss = all_losses();
  for (const Batch& batch : trex::test::pipeline_micro_batches(m.config(), 3)) {
    m.params().zero_grads();
    const LossBreakdown want = m.forward_backward(batch, loss);
    const std::vector<T> want_grads = m.params().grads();
    m.params().zero_grads();
    const LossBreakdown got = run_stages(m, four_stages(), batch, loss, 1.0);
    EXPECT_EQ(got.lm, want.lm);
    EXPECT_EQ(got.mtp, want.mtp);
    EXPECT_EQ(got.lm_tokens, want.lm_tokens);
    EXPECT_EQ(got.mtp_tokens, want.mtp_tokens);
    EXPECT_EQ(got.lm_tokens, m.count_lm_targets(batch));
    // Sums over layers, grouped by stage: equal up to the association of the sum.
    EXPECT_GT(want.balance, 0.0);
    EXPECT_NEAR(got.balance, want.balance, 1e-12 * want.balance);
    EXPECT_GT(want.indexer, 0.0);
    EXPECT_NEAR(got.indexer, want.indexer, 1e-5 * want.indexer);
    EXPECT_EQ(got.expert_load, want.expert_load);
    const std::vector<T>& got_grads = m.params().grads();
    ASSERT_EQ(got_grads.size(), want_grads.size());
    size_t mismatches = 0, nonzero = 0;
    for (size_t i = 0; i < got_grads.size(); ++i) {
      mismatches += got_grads[i] != want_grads[i];
      nonzero += want_grads[i] != T(0);
    }
    EXPECT_EQ(mismatches, 0u);
    EXPECT_GT(nonzero, want_grads.size() / 2);
  }
}

TEST(StageApi, SequentialStagesEqualForwardBackwardInDouble) {
  expect_stages_equal_forward_backward<double>();
}

TEST(StageApi, SequentialStagesEqualForwardBackwardInFloat) {
  expect_stages_equal_forward_backward<float>();
}

// A recomputing mode against a stored run (kNone): the same losses and expert
// loads and bitwise the same gradients, on the whole model and over four
// stages, for every micro-batch of the fixture (packed batches and the MTP
// block included). fixed_selection after it needs the kept selections:
// refused after full recomputation, the stored run's gradients after selective.
void expect_recompute_bitwise(trex::model::ActivationRecompute mode) {
  using trex::model::ActivationRecompute;
  Model<float> m = trex::test::pipeline_model<float>();
  const LossOptions loss = all_losses();
  for (const Batch& batch : trex::test::pipeline_micro_batches(m.config(), 3)) {
    m.set_activation_recompute(ActivationRecompute::kNone);
    m.params().zero_grads();
    const LossBreakdown want = m.forward_backward(batch, loss);
    const std::vector<float> want_grads = m.params().grads();
    m.params().zero_grads();
    const LossBreakdown staged_want = run_stages(m, four_stages(), batch, loss, 1.0);
    const std::vector<float> staged_want_grads = m.params().grads();

    m.set_activation_recompute(mode);
    m.params().zero_grads();
    const LossBreakdown got = m.forward_backward(batch, loss);
    EXPECT_EQ(got.total, want.total);
    EXPECT_EQ(got.expert_load, want.expert_load);
    EXPECT_EQ(m.params().grads(), want_grads);
    if (mode == ActivationRecompute::kFull) {
      EXPECT_THROW(m.forward_backward(batch, loss, {.fixed_selection = true}), trex::Error);
    } else {
      m.params().zero_grads();
      const LossBreakdown fixed = m.forward_backward(batch, loss, {.fixed_selection = true});
      EXPECT_EQ(fixed.total, want.total);
      EXPECT_EQ(m.params().grads(), want_grads);
    }

    m.params().zero_grads();
    const LossBreakdown staged = run_stages(m, four_stages(), batch, loss, 1.0);
    EXPECT_EQ(staged.total, staged_want.total);
    EXPECT_EQ(m.params().grads(), staged_want_grads);
  }
}

// Full recomputation keeps only each block's input and re-runs the block in
// its backward.
TEST(StageApi, FullRecomputeGivesBitwiseTheSameGradients) {
  expect_recompute_bitwise(trex::model::ActivationRecompute::kFull);
}

// Selective recomputation refills the mHC/norm outputs and the attention core
// before each block's backward.
TEST(StageApi, SelectiveRecomputeGivesBitwiseTheSameGradients) {
  expect_recompute_bitwise(trex::model::ActivationRecompute::kSelective);
}

TEST(StageApi, OneStageWithEverythingIsForwardBackward) {
  Model<double> m = trex::test::pipeline_model<double>();
  const Batch batch = trex::test::pipeline_micro_batches(m.config(), 1)[0];
  const LossOptions loss = all_losses();
  const LossBreakdown want = m.forward_backward(batch, loss);
  const std::vector<double> want_grads = m.params().grads();
  m.params().zero_grads();
  const LossBreakdown got =
      run_stages(m, {trex::model::whole_model_stage(m.config())}, batch, loss, 1.0);
  EXPECT_EQ(got.total, want.total);
  EXPECT_EQ(m.params().grads(), want_grads);
}

// The gradient weight multiplies the gradient of every loss term — LM, MTP,
// balance and indexer — and leaves the reported losses alone.
TEST(StageApi, GradientWeightScalesEveryLossTerm) {
  Model<double> m = trex::test::pipeline_model<double>();
  const Batch batch = trex::test::pipeline_micro_batches(m.config(), 3)[2];  // packed
  for (const bool only_aux : {false, true}) {
    LossOptions loss = all_losses();
    if (only_aux) loss.mtp_weight = 0.0;
    m.params().zero_grads();
    const LossBreakdown want = run_stages(m, four_stages(), batch, loss, 1.0);
    const std::vector<double> unit = m.params().grads();
    m.params().zero_grads();
    const double w = 7.0;
    const LossBreakdown got = run_stages(m, four_stages(), batch, loss, w);
    EXPECT_DOUBLE_EQ(got.total, want.total);
    EXPECT_DOUBLE_EQ(got.lm, want.lm);
    EXPECT_DOUBLE_EQ(got.mtp, want.mtp);
    const std::vector<double>& g = m.params().grads();
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < g.size(); ++i) {
      worst = std::max(worst, std::abs(g[i] - w * unit[i]));
      scale = std::max(scale, std::abs(w * unit[i]));
    }
    EXPECT_LE(worst, 1e-12 * scale);
    // The indexer projection gets only the indexer-loss gradient: scaled too.
    const std::string idx = "layers.1.attn.indexer.wq_b.weight";
    const int64_t o = m.params().offset(idx);
    EXPECT_NE(unit[static_cast<size_t>(o)], 0.0);
    EXPECT_NEAR(g[static_cast<size_t>(o)], w * unit[static_cast<size_t>(o)],
                1e-12 * std::abs(w * unit[static_cast<size_t>(o)]));
  }
  // Weight 0: no gradient at all, the same losses.
  LossOptions loss = all_losses();
  m.params().zero_grads();
  const LossBreakdown want = run_stages(m, four_stages(), batch, loss, 1.0);
  m.params().zero_grads();
  const LossBreakdown zero = run_stages(m, four_stages(), batch, loss, 0.0);
  EXPECT_DOUBLE_EQ(zero.lm, want.lm);
  EXPECT_DOUBLE_EQ(zero.mtp, want.mtp);
  for (double v : m.params().grads()) ASSERT_EQ(v, 0.0);
}

// A stage touches only its own parameters' gradients (plus the embedding on
// the head stage, for the MTP block's use of it).
TEST(StageApi, StagesOnlyTouchTheirOwnGradients) {
  Model<float> m = trex::test::pipeline_model<float>();
  const Batch batch = trex::test::pipeline_micro_batches(m.config(), 1)[0];
  const LossOptions loss = all_losses();
  const StageSpec middle{3, 5, false, false};
  StageCache<float> cache;
  std::vector<float> x(static_cast<size_t>(m.stage_activation_size(batch)), 0.5f), y(x.size()),
      dy(x.size(), 1e-3f), dx(x.size());
  m.params().zero_grads();
  m.forward_stage(middle, batch, loss, {}, 1.0, x.data(), y.data(), cache);
  m.backward_stage(cache, dy.data(), dx.data());
  for (const trex::model::ParamSpec& spec : m.params().specs()) {
    const float* g = m.params().grads().data() + m.params().offset(spec.name);
    double norm = 0.0;
    for (int64_t i = 0; i < spec.numel(); ++i) norm += std::abs(g[i]);
    const bool inside = spec.layer >= 3 && spec.layer < 5;
    if (!inside) {
      EXPECT_EQ(norm, 0.0) << spec.name;
    } else if (spec.name.find("ffn.gate.weight") != std::string::npos) {
      EXPECT_GT(norm, 0.0) << spec.name;
    }
  }
  double dx_norm = 0.0;
  for (float v : dx) dx_norm += std::abs(v);
  EXPECT_GT(dx_norm, 0.0);
}

TEST(StageApi, BadStagesAndCallsAreErrors) {
  Model<float> m = trex::test::pipeline_model<float>();
  const Batch batch = trex::test::pipeline_micro_batches(m.config(), 1)[0];
  const LossOptions loss = all_losses();
  std::vector<float> x(static_cast<size_t>(m.stage_activation_size(batch))), y(x.size());
  StageCache<float> cache;
  try {
    m.forward_stage({5, 3, false, false}, batch, loss, {}, 1.0, x.data(), y.data(), cache);
    FAIL() << "reversed range accepted";
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.field_name(), "stage");
  }
  try {
    m.forward_stage({6, 9, false, true}, batch, loss, {}, 1.0, x.data(), nullptr, cache);
    FAIL() << "range past the last layer accepted";
  } catch (const trex::Error& e) {
    EXPECT_EQ(e.field_name(), "stage");
  }
  EXPECT_THROW(
      m.forward_stage({2, 4, false, false}, batch, loss, {}, 1.0, nullptr, y.data(), cache),
      trex::Error);                                                        // no input
  EXPECT_THROW(m.backward_stage(cache, x.data(), y.data()), trex::Error);  // no forward
  trex::model::StepOptions forward_only;
  forward_only.backward = false;
  m.forward_stage({2, 4, false, false}, batch, loss, forward_only, 1.0, x.data(), y.data(), cache);
  EXPECT_THROW(m.backward_stage(cache, x.data(), y.data()), trex::Error);
  EXPECT_FALSE(cache.empty());
  cache.clear();
  EXPECT_TRUE(cache.empty());
}

}  // namespace
