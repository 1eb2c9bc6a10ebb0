// Parameter counts (spec §1.2) and FLOPs per token in the Megatron-Bridge
// convention (training-systems-anchors §2.1), on the shipped configs.
#include "trex/model/flops.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/error.hpp"
#include "trex/model/param_counts.hpp"

namespace trex::model {
namespace {

ModelConfig shipped(const std::string& name) {
  return ModelConfig::load(test::source_dir() + "/configs/models/" + name + ".json");
}

// `value` agrees with the published figure to the digits the figure has.
void expect_rounds_to(double value, double published, double unit, double last_digit,
                      const char* what) {
  EXPECT_NEAR(value / unit, published, last_digit / 2) << what << " = " << value;
}

TEST(ParamCounts, FlashMatchesSpec) {
  ModelConfig c = shipped("deepseek-v4-flash");
  ParamCounts p = count_parameters(c);
  expect_rounds_to(p.total(), 284.33, 1e9, 0.01, "total");
  expect_rounds_to(p.activated(), 13.27, 1e9, 0.01, "activated");
  expect_rounds_to(p.mtp_total(), 6.61, 1e9, 0.01, "MTP");
  expect_rounds_to(routed_expert_params(c), 25.17, 1e6, 0.01, "one expert");
  expect_rounds_to(p.main.routed_experts, 277.03, 1e9, 0.01, "routed experts");
  expect_rounds_to(p.main.shared_experts, 1.08, 1e9, 0.01, "shared experts");
  expect_rounds_to(p.main.attention + p.main.compressors, 5.09, 1e9, 0.01, "attention");
  expect_rounds_to(p.main.router, 0.045, 1e9, 0.001, "router");
  expect_rounds_to(p.main.mhc, 0.034, 1e9, 0.001, "mHC");
  expect_rounds_to(p.main.embed, 0.53, 1e9, 0.01, "embed");
  expect_rounds_to(p.main.head, 0.53, 1e9, 0.01, "head");
  expect_rounds_to(attention_base_params(c), 107.0, 1e6, 0.1, "attention per layer");
  expect_rounds_to(compressor_params(c, 4), 19.1, 1e6, 0.1, "CSA compressor + indexer");
  expect_rounds_to(compressor_params(c, 128), 4.3, 1e6, 0.1, "HCA compressor");
  // The model card's "284B" / "13B".
  EXPECT_EQ(std::lround(p.total() / 1e9), 284);
  EXPECT_EQ(std::lround(p.activated() / 1e9), 13);
}

TEST(ParamCounts, ProMatchesSpec) {
  ModelConfig c = shipped("deepseek-v4-pro");
  ParamCounts p = count_parameters(c);
  expect_rounds_to(p.total(), 1573.0, 1e9, 0.1, "total");
  expect_rounds_to(p.activated(), 48.85, 1e9, 0.01, "activated");
  expect_rounds_to(p.mtp_total(), 25.84, 1e9, 0.01, "MTP");
  expect_rounds_to(p.main.routed_experts, 1547.40, 1e9, 0.01, "routed experts");
  expect_rounds_to(p.main.shared_experts, 4.03, 1e9, 0.01, "shared experts");
  expect_rounds_to(p.main.attention + p.main.compressors, 19.47, 1e9, 0.01, "attention");
  expect_rounds_to(p.main.router, 0.168, 1e9, 0.001, "router");
  expect_rounds_to(p.main.mhc, 0.084, 1e9, 0.001, "mHC");
  expect_rounds_to(p.main.embed, 0.93, 1e9, 0.01, "embed");
  expect_rounds_to(attention_base_params(c), 299.9, 1e6, 0.1, "attention per layer");
  expect_rounds_to(compressor_params(c, 4), 31.4, 1e6, 0.1, "CSA compressor + indexer");
  expect_rounds_to(compressor_params(c, 128), 7.4, 1e6, 0.1, "HCA compressor");
  EXPECT_EQ(std::lround(p.total() / 1e11), 16);  // "1.6T"
  EXPECT_EQ(std::lround(p.activated() / 1e9), 49);
}

TEST(ParamCounts, TinyCountsTensorByTensor) {
  ModelConfig c = shipped("tiny-v4");  // d 64, 4 heads x 96, q_lora 32, 2x16 output groups
  // wq_a 32·64 + q_norm 32 + wq_b 384·32 + wkv 96·64 + kv_norm 96 + wo_a 32·192 + wo_b 64·32 + sink
  // 4
  EXPECT_EQ(attention_base_params(c), 2048 + 32 + 12288 + 6144 + 96 + 6144 + 2048 + 4);
  // CSA: wkv/wgate 2·192·64, ape 4·192, norm 96; indexer wq_b 128·32, weights_proj 4·64,
  // its compressor 2·64·64 + 4·64 + 32.
  EXPECT_EQ(compressor_params(c, 4), 24576 + 768 + 96 + 4096 + 256 + 8192 + 256 + 32);
  EXPECT_EQ(compressor_params(c, 16), 12288 + 16 * 96 + 96);  // HCA: no overlap, ape [16, 96]
  EXPECT_EQ(compressor_params(c, 0), 0);
  EXPECT_EQ(mhc_site_params(c), 24 * 256 + 24 + 3);
  EXPECT_EQ(hc_head_params(c), 4 * 256 + 4 + 1);

  ParamCounts p = count_parameters(c);
  const int64_t expert = 3 * 64 * 32;
  EXPECT_EQ(p.main.routed_experts, 4 * 8 * expert);
  EXPECT_EQ(p.main_activated.routed_experts, 4 * 2 * expert);
  EXPECT_EQ(p.main.router, 4 * 8 * 64 + 2 * 8);  // gate bias only on the 2 score-routed layers
  EXPECT_EQ(p.main.norms, 4 * 2 * 64 + 64);
  EXPECT_EQ(p.main.embed, 512 * 64);
  EXPECT_EQ(p.main_activated.embed, 0);
  EXPECT_EQ(p.main_activated.head, 512 * 64);
  EXPECT_EQ(p.total() - p.activated(), 512 * 64 + 4 * 6 * expert);
  // MTP: SWA block + score-routed MoE + e/h proj + enorm/hnorm/norm + its HC head.
  EXPECT_EQ(p.mtp.mtp_projections, 2 * 64 * 64);
  EXPECT_EQ(p.mtp.compressors, 0);
  EXPECT_EQ(p.mtp.total(), attention_base_params(c) + 9 * expert + 8 * 64 + 8 +
                               2 * mhc_site_params(c) + hc_head_params(c) + 2 * 64 * 64 + 5 * 64);
}

TEST(Flops, FlashMatchesMegatronBridgeFigures) {
  ModelConfig c = shipped("deepseek-v4-flash");
  FlopsBreakdown f4 = flops_per_token(c, 4096, 1);
  EXPECT_NEAR(f4.total() / 90.8e9, 1.0, 0.005) << f4.total();
  FlopsBreakdown f32 = flops_per_token(c, 32768, 1);
  EXPECT_NEAR(f32.total() / 100.0e9, 1.0, 0.005) << f32.total();
  EXPECT_NEAR(f4.six_n_active, 6 * 13.27e9, 0.01e9);

  // Individual terms at 4K, from the formulas (6 = 2 FLOPs/MAC × 3).
  const double proj = 1024.0 * (4096 + 64 * 512 + 1) + (4096.0 * 512 + 512) +
                      (64.0 * 512 * 1024 + 8.0 * 1024 * 4096);
  EXPECT_DOUBLE_EQ(f4.projections, 6 * 43 * proj);
  EXPECT_DOUBLE_EQ(f4.attention_swa, 6 * 2 * 64.0 * 512 * 2 * 128);
  EXPECT_DOUBLE_EQ(f4.attention_hca, 6 * 20 * 64.0 * 512 * 2 * (128 + 16));  // ⌊4096/128⌋/2
  EXPECT_DOUBLE_EQ(f4.attention_csa,
                   6 * 21 * 64.0 * 512 * 2 * (128 + 512 * 0.75));  // 512·(1 − 2048/8192)
  EXPECT_DOUBLE_EQ(f4.compressor, 6 * (21 * 4096.0 * 1024 * 2 + 20 * 4096.0 * 512 * 2));
  EXPECT_DOUBLE_EQ(
      f4.indexer,
      6 * 21 * (4096.0 * 256 * 2 + 1024.0 * 64 * 128 + 4096.0 * 64 + 64.0 * 128 * 1024));
  EXPECT_DOUBLE_EQ(f4.routed_experts, 6 * 43 * 4096.0 * 2048 * 3 * 6);
  EXPECT_DOUBLE_EQ(f4.shared_experts, 6 * 43 * 4096.0 * 2048 * 3);
  EXPECT_DOUBLE_EQ(f4.lm_head, 6 * 4096.0 * 129280 * 2);
  const double mtp_block = proj + 64.0 * 512 * 2 * 128 + 4096.0 * 2048 * 3 * 7;
  EXPECT_DOUBLE_EQ(f4.mtp, 6 * (mtp_block + 2 * 4096.0 * 4096 + 3 * 4096));

  double sum = f4.projections + f4.attention_swa + f4.attention_csa + f4.attention_hca +
               f4.compressor + f4.indexer + f4.routed_experts + f4.shared_experts + f4.mtp +
               f4.lm_head;
  EXPECT_DOUBLE_EQ(f4.total(), sum);

  // Without MTP: the MTP block and its logits drop out, nothing else moves.
  FlopsBreakdown f0 = flops_per_token(c, 4096, 0);
  EXPECT_EQ(f0.mtp, 0.0);
  EXPECT_DOUBLE_EQ(f4.total() - f0.total(), f4.mtp + 6 * 4096.0 * 129280);
  EXPECT_DOUBLE_EQ(f0.projections, f4.projections);
}

TEST(Flops, ProMatchesTheAnchorEstimates) {
  ModelConfig c = shipped("deepseek-v4-pro");
  EXPECT_NEAR(flops_per_token(c, 4096, 1).total() / 323e9, 1.0, 0.005);
  EXPECT_NEAR(flops_per_token(c, 32768, 1).total() / 346e9, 1.0, 0.005);
}

TEST(Flops, PackedSequencesUseSumOfSquares) {
  ModelConfig c = shipped("deepseek-v4-flash");
  const std::vector<int64_t> one = {4096};
  SequenceStats single = SequenceStats::from_lengths(one);
  EXPECT_DOUBLE_EQ(flops_per_token(c, single, 1).total(), flops_per_token(c, 4096, 1).total());

  // Two documents 1024 + 3072 in a 4096 pack: L_eff = (1024² + 3072²)/4096 = 2560.
  const std::vector<int64_t> packed = {1024, 3072};
  SequenceStats s = SequenceStats::from_lengths(packed);
  EXPECT_DOUBLE_EQ(s.tokens, 4096);
  EXPECT_DOUBLE_EQ(s.attention_length(), 2560);
  FlopsBreakdown fp = flops_per_token(c, s, 1);
  FlopsBreakdown f2560 = flops_per_token(c, 2560, 1);
  FlopsBreakdown f4096 = flops_per_token(c, 4096, 1);
  EXPECT_DOUBLE_EQ(fp.total(), f2560.total());
  EXPECT_LT(fp.attention_hca, f4096.attention_hca);
  EXPECT_LT(fp.indexer, f4096.indexer);
  EXPECT_DOUBLE_EQ(fp.routed_experts, f4096.routed_experts);  // linear terms do not care
  EXPECT_DOUBLE_EQ(training_step_flops(c, s, 1), fp.total() * 4096);
  // A batch of B equal sequences is per-token identical to one.
  EXPECT_DOUBLE_EQ(flops_per_token(c, SequenceStats::uniform(4096, 8), 1).total(), f4096.total());

  // Sequences shorter than every ratio: no compressed entries, no indexer scoring.
  FlopsBreakdown tiny = flops_per_token(c, 3, 1);
  EXPECT_DOUBLE_EQ(tiny.attention_csa, 6 * 21 * 64.0 * 512 * 2 * 128);
  EXPECT_DOUBLE_EQ(tiny.attention_hca, 6 * 20 * 64.0 * 512 * 2 * 128);
}

TEST(Flops, RejectsBadArguments) {
  ModelConfig c = shipped("tiny-v4");
  EXPECT_THROW(flops_per_token(c, 0, 0), Error);
  EXPECT_THROW(flops_per_token(c, 64, 2), Error);  // only one MTP layer
  EXPECT_THROW(flops_per_token(c, 64, -1), Error);
  const std::vector<int64_t> bad = {64, 0};
  EXPECT_THROW(SequenceStats::from_lengths(bad), Error);
  EXPECT_NO_THROW(flops_per_token(c, 64, 1));
}

}  // namespace
}  // namespace trex::model
