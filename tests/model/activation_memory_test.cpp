// model/activation_memory: the bytes a StageCache holds between a stage's
// forward and its backward, from the config and batch shape alone, equal the
// backend's live-buffer count of the real cache — for every recompute mode,
// every stage of a cut (embedding, middle, empty, head with the MTP block),
// with and without the indexer loss; and the transient estimate covers the
// peak the stage reaches on top of its caches.
#include <gtest/gtest.h>

#include <vector>

#include "../train/pipeline_fixtures.hpp"
#include "trex/core/rng.hpp"
#include "trex/model/activation_memory.hpp"
#include "trex/model/model.hpp"

namespace {

using trex::model::ActivationRecompute;
using trex::model::ActivationShape;
using trex::model::Batch;
using trex::model::LossOptions;
using trex::model::Model;
using trex::model::StageCache;
using trex::model::StageSpec;

Batch unpacked_batch(const trex::model::ModelConfig& c, int64_t B, int64_t S) {
  trex::Rng rng(3, {static_cast<uint64_t>(B * 1000 + S)});
  Batch b;
  b.B = B;
  b.S = S;
  for (int64_t t = 0; t < B * S; ++t)
    b.input_ids.push_back(rng.uniform_int(int64_t{0}, c.vocab_size - 1));
  b.labels = b.input_ids;
  return b;
}

struct Measured {
  int64_t cache = 0;  // live bytes the cache holds after the forward
  int64_t peak = 0;   // the most alive at once during forward and backward, less the start
};

Measured measure(Model<float>& m, const StageSpec& stage, const Batch& batch,
                 const LossOptions& loss) {
  const trex::kernels::Backend& ops = m.op_context().ops();
  const int64_t size = m.stage_activation_size(batch);
  std::vector<float> x_in(static_cast<size_t>(size), 0.01f), x_out(x_in.size());
  std::vector<float> d_out(x_in.size(), 0.001f), d_in(x_in.size());
  const int64_t before = ops.live_buffer_bytes();
  ops.reset_peak_buffer_bytes();
  StageCache<float> cache;
  m.forward_stage(stage, batch, loss, {}, 1.0, x_in.data(), x_out.data(), cache);
  Measured out;
  out.cache = ops.live_buffer_bytes() - before;
  m.backward_stage(cache, d_out.data(), d_in.data());
  out.peak = ops.peak_buffer_bytes() - before;
  return out;
}

void expect_accounting_matches(ActivationRecompute recompute, bool indexer_loss) {
  Model<float> m = trex::test::pipeline_model<float>();
  m.set_activation_recompute(recompute);
  const trex::model::ModelConfig& c = m.config();
  LossOptions loss = trex::test::pipeline_loss_options();
  loss.indexer_loss = indexer_loss;
  const std::vector<StageSpec> stages = {trex::model::whole_model_stage(c),
                                         {0, 3, true, false},
                                         {3, 3, false, false},
                                         {3, 5, false, false},
                                         {5, 8, false, true}};
  // S = 37 crosses the window (8) and several compressed blocks of both ratios.
  for (const auto& [B, S] : std::vector<std::pair<int64_t, int64_t>>{{1, 37}, {2, 21}}) {
    const Batch batch = unpacked_batch(c, B, S);
    for (const StageSpec& stage : stages) {
      SCOPED_TRACE("B=" + std::to_string(B) + " S=" + std::to_string(S) + " layers [" +
                   std::to_string(stage.first_layer) + ", " + std::to_string(stage.last_layer) +
                   ")" + (stage.has_head ? " head" : ""));
      const Measured got = measure(m, stage, batch, loss);
      ActivationShape shape;
      shape.sequences = B;
      shape.seq_len = S;
      shape.recompute = recompute;
      shape.indexer_loss = indexer_loss;
      shape.mtp_loss = loss.mtp_weight != 0.0;
      const trex::model::ActivationBytes want = trex::model::stage_cache_bytes(c, stage, shape);
      EXPECT_EQ(got.cache, want.device);
      if (stage.last_layer > stage.first_layer && recompute != ActivationRecompute::kFull) {
        EXPECT_GT(want.host, 0);
      }
      const int64_t transient = trex::model::transient_activation_bytes(c, stage, shape);
      EXPECT_LE(got.peak, want.device + transient);
      EXPECT_GE(got.peak, want.device + transient * 7 / 10);
    }
  }
}

TEST(ActivationMemory, StoredActivationsEqualTheCacheWithoutRecompute) {
  expect_accounting_matches(ActivationRecompute::kNone, true);
  expect_accounting_matches(ActivationRecompute::kNone, false);
}

TEST(ActivationMemory, StoredActivationsEqualTheCacheWithSelectiveRecompute) {
  expect_accounting_matches(ActivationRecompute::kSelective, true);
}

TEST(ActivationMemory, StoredActivationsEqualTheCacheWithFullRecompute) {
  expect_accounting_matches(ActivationRecompute::kFull, true);
}

// Full recomputation keeps a block's input streams and nothing else of it;
// selective keeps less than none: the orders the modes promise.
TEST(ActivationMemory, RecomputeModesAreOrdered) {
  const trex::model::ModelConfig c = trex::test::pipeline_config();
  ActivationShape shape;
  shape.sequences = 2;
  shape.seq_len = 64;
  const StageSpec middle{2, 6, false, false};
  const int64_t none = trex::model::stage_cache_bytes(c, middle, shape).device;
  shape.recompute = ActivationRecompute::kSelective;
  const int64_t selective = trex::model::stage_cache_bytes(c, middle, shape).device;
  shape.recompute = ActivationRecompute::kFull;
  const int64_t full = trex::model::stage_cache_bytes(c, middle, shape).device;
  EXPECT_LT(selective, none);
  EXPECT_LT(full, selective);
  // Token ids (int64) plus four blocks' input streams [N, n, d] in fp32.
  EXPECT_EQ(full, 2 * 64 * 8 + 4 * (2 * 64 * c.hc_mult * c.hidden_size) * 4);
}

// forward_backward reuses one cache: after a packed batch, an unpacked one,
// then the packed batch again, the model holds what the packed batch alone
// left (no attention cache of the other form stays behind).
TEST(ActivationMemory, AReusedCacheKeepsOnlyTheCurrentBatchsForm) {
  Model<float> m = trex::test::pipeline_model<float>();
  const trex::kernels::Backend& ops = m.op_context().ops();
  const LossOptions loss = trex::test::pipeline_loss_options();
  const std::vector<Batch> batches = trex::test::pipeline_micro_batches(m.config(), 3);
  const Batch& packed = batches[2];
  ASSERT_FALSE(packed.document_ids.empty());
  const Batch unpacked = unpacked_batch(m.config(), packed.B, packed.S);
  const int64_t before = ops.live_buffer_bytes();
  m.forward_backward(packed, loss);
  const int64_t packed_alone = ops.live_buffer_bytes() - before;
  m.forward_backward(unpacked, loss);
  m.forward_backward(packed, loss);
  EXPECT_EQ(ops.live_buffer_bytes() - before, packed_alone);
  EXPECT_GT(packed_alone, 0);
}

}  // namespace
