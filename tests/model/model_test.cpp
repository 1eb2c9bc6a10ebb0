// Whole-model tests: finite-difference gradients through every block incl. MTP
// (double, selections fixed), checkpoint round trips in both naming schemes,
// loader errors, quantised released checkpoints, bf16 mode.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "gradcheck.hpp"
#include "test_paths.hpp"
#include "trex/core/dtypes.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"
#include "trex/infer/decoder.hpp"
#include "trex/io/safetensors.hpp"
#include "trex/kernels/cpu/gemm.hpp"
#include "trex/model/model.hpp"

namespace {

using trex::model::Model;
using trex::model::ModelConfig;

ModelConfig tiny(const std::string& name = "tiny-v4") {
  return ModelConfig::load(trex::test::source_dir() + "/configs/models/" + name + ".json");
}

// Random init plus non-trivial values for the tensors HF-style init leaves at 0/1,
// so that every path (sinks, ape, mHC gates, router bias) carries gradient.
template <class T>
void randomize(Model<T>& m, uint64_t seed) {
  m.init_random(seed);
  trex::Rng rng(seed, {77});
  for (const auto& spec : m.params().specs()) {
    T* v = m.params().value(spec.name);
    const std::string& n = spec.name;
    const bool small =
        n.find("norm.weight") != std::string::npos || n.find("_scale") != std::string::npos ||
        n.find("_base") != std::string::npos || n.find("attn_sink") != std::string::npos ||
        n.find(".ape") != std::string::npos || n.find("gate.bias") != std::string::npos;
    if (!small) continue;
    for (int64_t i = 0; i < spec.numel(); ++i)
      v[i] += static_cast<T>(0.3 * (2 * rng.uniform() - 1));
  }
}

trex::model::Batch random_batch(const ModelConfig& c, int64_t B, int64_t S, uint64_t seed) {
  trex::Rng rng(seed, {5});
  trex::model::Batch b;
  b.B = B;
  b.S = S;
  for (int64_t i = 0; i < B * S; ++i)
    b.input_ids.push_back(rng.uniform_int(int64_t{0}, c.vocab_size - 1));
  b.labels = b.input_ids;
  if (b.labels.size() > 3) b.labels[3] = -100;  // one masked target
  return b;
}

TEST(V4Model, WholeModelGradientsMatchFiniteDifferences) {
  // Every block type (SWA/CSA/HCA, hash/score MoE), the HC head, the final norm,
  // the MTP block and the balance loss, in double with selections held fixed.
  Model<double> m(tiny());
  randomize(m, 3);
  const auto batch = random_batch(m.config(), 1, 24, 9);
  trex::model::LossOptions loss;
  loss.mtp_weight = 0.3;
  loss.balance_loss_weight = 0.05;
  m.params().zero_grads();
  const auto base = m.forward_backward(batch, loss, {});
  EXPECT_GT(base.mtp, 0.0);
  EXPECT_GT(base.balance, 0.0);
  const std::vector<double> analytic = m.params().grads();
  trex::model::StepOptions fixed;
  fixed.backward = false;
  fixed.fixed_selection = true;
  auto loss_fn = [&] { return m.forward_backward(batch, loss, fixed).total; };
  std::vector<double>& values = m.params().values();
  // A few entries of every tensor (router bias excluded: not differentiable).
  double worst = 0;
  std::string worst_name;
  int64_t checked = 0;
  for (const auto& spec : m.params().specs()) {
    if (spec.group == trex::model::OptimizerGroup::kNotTrained) continue;
    if (spec.name.find("indexer") != std::string::npos)
      continue;  // no LM gradient by design (spec §3.1)
    const int64_t off = m.params().offset(spec.name), n = spec.numel();
    for (int64_t k = 0; k < 2; ++k) {
      const int64_t i = off + (k * 7919 + 13) % n;
      const double saved = values[i], h = 1e-5;
      values[i] = saved + h;
      const double up = loss_fn();
      values[i] = saved - h;
      const double down = loss_fn();
      values[i] = saved;
      const double fd = (up - down) / (2 * h);
      const double err =
          std::abs(fd - analytic[i]) / std::max({std::abs(fd), std::abs(analytic[i]), 1e-5});
      // The floor: central differences at h = 1e-5 on a loss of ~6 carry ~1e-10 of
      // round-off, so gradients below ~1e-5 are compared in absolute terms (1e-9).
      if (err > worst) {
        worst = err;
        worst_name = spec.name;
      }
      EXPECT_LT(err, 1e-4) << spec.name << " entry " << i - off << ": fd " << fd << " analytic "
                           << analytic[i];
      ++checked;
    }
  }
  EXPECT_GT(checked, 200);
  std::cout << "whole-model FD: " << checked << " entries, worst rel err " << worst << " ("
            << worst_name << ")\n";
}

TEST(V4Model, IndexerGetsNoLmGradientButLearnsFromItsLoss) {
  Model<double> m(tiny());
  randomize(m, 4);
  const auto batch = random_batch(m.config(), 1, 40, 2);
  trex::model::LossOptions loss;
  m.params().zero_grads();
  m.forward_backward(batch, loss, {});
  const std::string idx = "layers.1.attn.indexer.wq_b.weight";
  const auto& spec = m.params().spec(idx);
  double norm = 0;
  for (int64_t i = 0; i < spec.numel(); ++i) norm += std::abs(m.params().grad(idx)[i]);
  EXPECT_EQ(norm, 0.0);
  loss.indexer_loss = true;
  m.params().zero_grads();
  const auto r = m.forward_backward(batch, loss, {});
  EXPECT_GT(r.indexer, 0.0);
  norm = 0;
  for (int64_t i = 0; i < spec.numel(); ++i) norm += std::abs(m.params().grad(idx)[i]);
  EXPECT_GT(norm, 0.0);
}

TEST(V4Model, CheckpointRoundTripInBothSchemes) {
  Model<float> m(tiny());
  randomize(m, 5);
  const auto batch = random_batch(m.config(), 1, 17, 3);
  std::vector<float> want(batch.S * m.config().vocab_size), got(want.size());
  const auto r0 = m.forward_backward(batch, {}, {false, false}, want.data());
  for (auto scheme :
       {trex::model::NamingScheme::kReleased, trex::model::NamingScheme::kTransformers}) {
    trex::test::TempDir dir;
    trex::model::save_checkpoint(dir.path(), m.config(), m.params(), m.hash_tables(), scheme,
                                 trex::DType::kF32,
                                 200 * 1024);  // several shards
    EXPECT_TRUE(std::filesystem::exists(dir.file("model.safetensors.index.json")));
    trex::model::NamingScheme detected;
    auto loaded = Model<float>::from_checkpoint(dir.path(), &detected);
    EXPECT_EQ(detected, scheme);
    EXPECT_EQ(loaded.params().values(), m.params().values());
    EXPECT_EQ(loaded.hash_tables(), m.hash_tables());
    const auto r1 = loaded.forward_backward(batch, {}, {false, false}, got.data());
    EXPECT_EQ(r0.total, r1.total);
    EXPECT_EQ(want, got);
  }
}

TEST(V4Model, ReadsTheTransformersHybridNaming) {
  // transformers 5.x save_pretrained (save_original_format=True) writes released
  // leaf names under model.layers.N. and attn.norm.weight for kv_norm.
  Model<float> m(tiny("tiny-v4-clamp"));
  m.init_random(4);
  const auto tensors =
      trex::model::export_tensors(m.config(), m.params(), false,
                                  trex::model::NamingScheme::kTransformersHybrid, &m.hash_tables());
  std::vector<trex::TensorToWrite> w;
  bool saw_kv_norm = false;
  for (const auto& t : tensors) {
    saw_kv_norm |= t.name == "model.layers.0.attn.norm.weight";
    if (!t.i64.empty())
      w.push_back({t.name, trex::DType::kI64, t.shape, t.i64.data(), t.i64.size() * 8});
    else
      w.push_back({t.name, trex::DType::kF32, t.shape, t.f32.data(), t.f32.size() * 4});
  }
  EXPECT_TRUE(saw_kv_norm);
  trex::test::TempDir dir;
  trex::write_checkpoint(dir.path(), w, {});
  trex::model::ParamStore<float> store(trex::model::parameter_specs(m.config()));
  trex::model::HashTables hash;
  EXPECT_EQ(
      trex::model::load_weights(trex::CheckpointReader::open(dir.path()), m.config(), store, hash),
      trex::model::NamingScheme::kTransformersHybrid);
  EXPECT_EQ(store.values(), m.params().values());
  EXPECT_EQ(hash, m.hash_tables());
}

TEST(V4Model, LoaderRejectsMissingExtraAndMisshapedTensors) {
  Model<float> m(tiny("tiny-v4-clamp"));
  m.init_random(1);
  const auto tensors = trex::model::export_tensors(
      m.config(), m.params(), false, trex::model::NamingScheme::kReleased, &m.hash_tables());
  auto write = [&](const std::string& dir, const std::string& drop, const std::string& extra,
                   const std::string& reshape) {
    std::vector<trex::TensorToWrite> w;
    std::vector<float> junk(4, 1.0f);
    for (const auto& t : tensors) {
      if (t.name == drop) continue;
      auto shape = t.shape;
      if (t.name == reshape) shape = {shape[0] * shape[1]};
      if (!t.i64.empty())
        w.push_back({t.name, trex::DType::kI64, shape, t.i64.data(), t.i64.size() * 8});
      else
        w.push_back({t.name, trex::DType::kF32, shape, t.f32.data(), t.f32.size() * 4});
    }
    if (!extra.empty()) w.push_back({extra, trex::DType::kF32, {4}, junk.data(), 16});
    trex::write_checkpoint(dir, w, {});
  };
  auto expect_error = [&](const std::string& dir, const std::string& needle) {
    trex::model::ParamStore<float> store(trex::model::parameter_specs(m.config()));
    trex::model::HashTables hash;
    try {
      trex::model::load_weights(trex::CheckpointReader::open(dir), m.config(), store, hash);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const trex::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  trex::test::TempDir a, b, c;
  write(a.path(), "layers.1.attn.wkv.weight", "", "");
  expect_error(a.path(), "layers.1.attn.wkv.weight");
  write(b.path(), "", "layers.0.attn.bogus", "");
  expect_error(b.path(), "layers.0.attn.bogus");
  write(c.path(), "", "", "layers.2.ffn.experts.3.w2.weight");
  expect_error(c.path(), "layers.2.ffn.experts.3.w2.weight");
}

TEST(V4Model, LoadsFp8AndMxfp4ReleasedWeights) {
  // A released-scheme checkpoint whose wq_a is FP8 e4m3 with 128x128 E8M0 block
  // scales and whose routed expert 0 w1 is MXFP4: values must dequantise exactly.
  Model<float> m(tiny("tiny-v4-clamp"));
  m.init_random(2);
  const auto& c = m.config();
  auto tensors = trex::model::export_tensors(
      c, m.params(), false, trex::model::NamingScheme::kReleased, &m.hash_tables());
  const int64_t q = c.q_lora_rank, d = c.hidden_size, I = c.moe_intermediate_size;
  // FP8: code 0x38 = 1.0, 0x40 = 2.0; scale byte 126 = 0.5.
  std::vector<uint8_t> fp8(q * d), fp8_scale(1, 126);
  for (int64_t i = 0; i < q * d; ++i) fp8[i] = i % 2 ? 0x40 : 0x38;
  // MXFP4: nibble 2 = 1.0, 0xB = -1.5; row scale byte 128 = 2.0.
  std::vector<uint8_t> fp4(I * d / 2, static_cast<uint8_t>(0xB2)), fp4_scale(I * d / 32, 128);
  std::vector<trex::TensorToWrite> w;
  for (const auto& t : tensors) {
    if (t.name == "layers.0.attn.wq_a.weight") {
      w.push_back({t.name, trex::DType::kF8E4M3, {q, d}, fp8.data(), fp8.size()});
      w.push_back({"layers.0.attn.wq_a.scale", trex::DType::kF8E8M0, {1, 1}, fp8_scale.data(), 1});
    } else if (t.name == "layers.1.ffn.experts.0.w1.weight") {
      w.push_back({t.name, trex::DType::kI8, {I, d / 2}, fp4.data(), fp4.size()});
      w.push_back({"layers.1.ffn.experts.0.w1.scale",
                   trex::DType::kF8E8M0,
                   {I, d / 32},
                   fp4_scale.data(),
                   fp4_scale.size()});
    } else if (!t.i64.empty()) {
      w.push_back({t.name, trex::DType::kI64, t.shape, t.i64.data(), t.i64.size() * 8});
    } else {
      w.push_back({t.name, trex::DType::kF32, t.shape, t.f32.data(), t.f32.size() * 4});
    }
  }
  trex::test::TempDir dir;
  trex::write_checkpoint(dir.path(), w, {});
  trex::model::ParamStore<float> store(trex::model::parameter_specs(c));
  trex::model::HashTables hash;
  EXPECT_EQ(trex::model::load_weights(trex::CheckpointReader::open(dir.path()), c, store, hash),
            trex::model::NamingScheme::kReleased);
  const float* wq = store.value("layers.0.attn.wq_a.weight");
  EXPECT_EQ(wq[0], 0.5f);
  EXPECT_EQ(wq[1], 1.0f);
  const float* w1 = store.value("layers.1.ffn.experts.0.w1.weight");
  EXPECT_EQ(w1[0], 2.0f);   // low nibble: element 0
  EXPECT_EQ(w1[1], -3.0f);  // high nibble: element 1
  EXPECT_EQ(store.values().size(), m.params().values().size());
}

TEST(V4Model, Bf16ComputeStaysCloseToFp32) {
  Model<float> m(tiny());
  randomize(m, 6);
  const auto batch = random_batch(m.config(), 2, 32, 4);
  m.params().zero_grads();
  const auto f32 = m.forward_backward(batch, {}, {});
  const std::vector<float> g32 = m.params().grads();
  m.params().zero_grads();
  m.set_compute_precision(trex::kernels::Precision::kBF16);
  const trex::model::LossBreakdown b16 = m.forward_backward(batch, {}, {});
  m.set_compute_precision(trex::kernels::Precision::kF32);
  EXPECT_NEAR(b16.lm, f32.lm, 0.01 * f32.lm);
  double num = 0, den = 0;
  const auto& g16 = m.params().grads();
  for (size_t i = 0; i < g16.size(); ++i) {
    num += (g16[i] - g32[i]) * (g16[i] - g32[i]);
    den += g32[i] * g32[i];
  }
  EXPECT_LT(std::sqrt(num / den), 0.05);
  EXPECT_GT(std::sqrt(num / den), 0.0);  // bf16 really was used
}

// param_dtype = "bf16" storage: 2 bytes per trained value, decoded per block
// for compute, computes bit for bit what an fp32 store holding the same
// (rounded) values computes — loss, gradients, logits and incremental
// decoding — and holds at most one block's and the globals' decoded weights.
TEST(V4Model, Bf16StorageComputesLikeFp32StorageOfTheSameValues) {
  using trex::model::OptimizerGroup;
  using trex::model::ParamStorage;
  Model<float> f32(tiny());
  randomize(f32, 9);
  for (const auto& spec : f32.params().specs())
    if (spec.group != OptimizerGroup::kNotTrained)
      trex::round_to_bf16(f32.params().value(spec.name), f32.params().value(spec.name),
                          spec.numel());
  Model<float> b16(f32.config(), f32.params(), f32.hash_tables());
  b16.params().set_storage(ParamStorage::kBF16);
  EXPECT_EQ(b16.params().storage(), ParamStorage::kBF16);
  EXPECT_EQ(b16.params().copy_values(), f32.params().values());
  EXPECT_LT(b16.params().value_bytes(), f32.params().value_bytes() * 51 / 100);
  EXPECT_THROW(b16.params().values(), trex::Error);
  EXPECT_THROW(b16.params().value("embed.weight"), trex::Error);
  int64_t router_biases = 0;  // kept in fp32 beside the bf16 values, in place
  for (const auto& spec : b16.params().specs())
    if (spec.group == OptimizerGroup::kNotTrained) {
      EXPECT_EQ(b16.params().value(spec.name)[0], f32.params().value(spec.name)[0]);
      ++router_biases;
    }
  EXPECT_GT(router_biases, 0);

  const auto batch = random_batch(f32.config(), 2, 32, 4);
  const int64_t V = f32.config().vocab_size;
  std::vector<float> logits32(static_cast<size_t>(batch.B * batch.S * V));
  std::vector<float> logits16(logits32.size());
  f32.params().zero_grads();
  b16.params().zero_grads();
  const auto r32 = f32.forward_backward(batch, {}, {}, logits32.data());
  const auto r16 = b16.forward_backward(batch, {}, {}, logits16.data());
  EXPECT_EQ(r16.total, r32.total);
  EXPECT_EQ(r16.lm, r32.lm);
  EXPECT_EQ(logits16, logits32);
  EXPECT_TRUE(b16.params().grads() == static_cast<std::vector<float>>(f32.params().grads()));
  // Decoded weights are dropped after each pass and never exceed the bound
  // the memory accounting uses; an fp32 store decodes nothing.
  EXPECT_EQ(b16.params().decoded_bytes(), 0);
  const int64_t bound =
      trex::model::decoded_weight_bytes_bound(b16.params().specs(), ParamStorage::kBF16);
  EXPECT_GT(b16.params().peak_decoded_bytes(), bound / 2);
  EXPECT_LE(b16.params().peak_decoded_bytes(), bound);
  EXPECT_LT(bound, f32.params().value_bytes() / 2);  // far from a decoded model
  EXPECT_EQ(f32.params().peak_decoded_bytes(), 0);

  trex::infer::Decoder<float> d32(f32), d16(b16);
  const int64_t s32 = d32.add_sequence(), s16 = d16.add_sequence();
  const std::vector<int64_t> prompt(batch.input_ids.begin(), batch.input_ids.begin() + 7);
  std::vector<float> out32(static_cast<size_t>(prompt.size() * V)), out16(out32.size());
  d32.feed(std::vector<int64_t>(prompt.size(), s32), prompt, out32.data());
  d16.feed(std::vector<int64_t>(prompt.size(), s16), prompt, out16.data());
  EXPECT_EQ(out16, out32);

  // Back to fp32 storage: the same values, exactly.
  b16.params().set_storage(ParamStorage::kF32);
  EXPECT_EQ(b16.params().values(), f32.params().values());
}

// Per-token loss weights (the policy-gradient step): the reported LM loss is
// Σ w·CE / n and the gradient is its gradient (finite differences, selections
// fixed); label_log_probs gives −CE of every target; bad weights are refused.
TEST(V4Model, LossWeightsAndLabelLogProbs) {
  Model<double> m(tiny());
  randomize(m, 5);
  auto batch = random_batch(m.config(), 2, 12, 4);
  trex::model::LossOptions loss;
  loss.mtp_weight = 0;
  trex::model::StepOptions probe;
  probe.backward = false;
  std::vector<double> lp;
  probe.label_log_probs = &lp;
  const auto plain = m.forward_backward(batch, loss, probe);
  ASSERT_EQ(lp.size(), batch.input_ids.size());
  double sum = 0;
  int64_t nonzero = 0;
  for (int64_t b = 0; b < batch.B; ++b)
    for (int64_t t = 0; t < batch.S; ++t) {
      const double v = lp[static_cast<size_t>(b * batch.S + t)];
      if (t == 0 || batch.labels[static_cast<size_t>(b * batch.S + t)] < 0) {
        EXPECT_EQ(v, 0.0) << b << " " << t;  // no target there
      } else {
        EXPECT_LT(v, 0.0);
        ++nonzero;
      }
      sum += v;
    }
  EXPECT_EQ(nonzero, plain.lm_tokens);
  EXPECT_NEAR(-sum / static_cast<double>(plain.lm_tokens), plain.lm, 1e-12);

  trex::Rng rng(8, {3});
  batch.loss_weights.resize(batch.input_ids.size());
  for (float& w : batch.loss_weights) w = static_cast<float>(2 * rng.uniform() - 1);
  double want = 0;
  for (size_t r = 0; r < lp.size(); ++r) want -= batch.loss_weights[r] * lp[r];
  m.params().zero_grads();
  const auto weighted = m.forward_backward(batch, loss, {});
  EXPECT_NEAR(weighted.lm, want / static_cast<double>(plain.lm_tokens), 1e-12);
  EXPECT_EQ(weighted.lm_tokens, plain.lm_tokens);
  const std::vector<double> analytic = m.params().grads();
  trex::model::StepOptions fixed;
  fixed.backward = false;
  fixed.fixed_selection = true;
  std::vector<double>& values = m.params().values();
  int64_t checked = 0;
  for (const char* name : {"head.weight", "embed.weight", "layers.0.attn.wq_a.weight",
                           "layers.2.ffn.shared_experts.w1.weight"}) {
    if (!m.params().contains(name)) continue;
    const int64_t off = m.params().offset(name);
    for (int64_t k = 0; k < 2; ++k) {
      const int64_t i = off + k * 37 + 5;
      const double saved = values[i], h = 1e-5;
      values[i] = saved + h;
      const double up = m.forward_backward(batch, loss, fixed).lm;
      values[i] = saved - h;
      const double down = m.forward_backward(batch, loss, fixed).lm;
      values[i] = saved;
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[i], fd, 1e-6 * std::max(1.0, std::abs(fd))) << name << " " << k;
      ++checked;
    }
  }
  EXPECT_GE(checked, 6);

  loss.mtp_weight = 0.3;  // the MTP loss has no weights
  EXPECT_THROW(m.forward_backward(batch, loss, {}), trex::Error);
  loss.mtp_weight = 0;
  batch.loss_weights.pop_back();
  EXPECT_THROW(m.forward_backward(batch, loss, {}), trex::Error);
  batch.loss_weights.push_back(std::nanf(""));
  EXPECT_THROW(m.forward_backward(batch, loss, {}), trex::Error);
}

TEST(V4Model, ShortSequencesAndBadBatches) {
  Model<float> m(tiny());
  m.init_random(7);
  for (int64_t S : {1, 2, 3}) {
    auto batch = random_batch(m.config(), 2, S, 1);
    batch.labels.clear();
    const auto r = m.forward_backward(batch, {}, {});
    EXPECT_TRUE(std::isfinite(r.total)) << S;
    EXPECT_EQ(r.lm_tokens, 2 * (S - 1));
  }
  trex::model::Batch bad;
  bad.B = 1;
  bad.S = 2;
  bad.input_ids = {0, 100000};
  EXPECT_THROW(m.forward_backward(bad, {}, {}), trex::Error);
}

TEST(V4Model, RouterBiasUpdateFollowsLoad) {
  Model<float> m(tiny());
  m.init_random(8);
  const auto batch = random_batch(m.config(), 2, 32, 5);
  const auto r = m.forward_backward(batch, {}, {false, false});
  ASSERT_EQ(r.expert_load.size(), 5u);  // 4 layers + MTP
  const std::string name = "layers.2.ffn.gate.bias";
  std::vector<float> before(m.params().value(name),
                            m.params().value(name) + m.config().n_routed_experts);
  m.update_router_biases(r, 0.001);
  const auto& load = r.expert_load[2];
  double mean = 0;
  for (int64_t l : load) mean += static_cast<double>(l) / load.size();
  for (size_t e = 0; e < load.size(); ++e) {
    const float after = m.params().value(name)[e];
    if (load[e] > mean) {
      EXPECT_FLOAT_EQ(after, before[e] - 0.001f);
    } else if (load[e] < mean) {
      EXPECT_FLOAT_EQ(after, before[e] + 0.001f);
    }
  }
}

}  // namespace
