#pragma once
// Shared by the pipeline tests (single-process and MPI): the 8-layer tiny
// model, micro-batches of mixed shapes (one packed), and the 1-rank reference
// Σ_i n_i · ∇(mean loss of micro-batch i) computed with forward_backward.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/rng.hpp"
#include "trex/model/model.hpp"

namespace trex::test {

inline model::ModelConfig pipeline_config() {
  return model::ModelConfig::load(source_dir() + "/tests/fixtures/pipeline/tiny-v4-8layers.json");
}

// Random init plus non-trivial values for the tensors HF-style init leaves at
// 0 / 1 (norms, mHC scales and bases, sinks, router bias), so every path
// carries gradient.
template <class T>
model::Model<T> pipeline_model(uint64_t seed = 11) {
  model::Model<T> m(pipeline_config());
  m.init_random(seed);
  Rng rng(seed, {91});
  for (const model::ParamSpec& spec : m.params().specs()) {
    const std::string& n = spec.name;
    const bool unit_or_zero =
        n.find("norm.weight") != std::string::npos || n.find("_scale") != std::string::npos ||
        n.find("_base") != std::string::npos || n.find("attn_sink") != std::string::npos ||
        n.find(".ape") != std::string::npos || n.find("gate.bias") != std::string::npos;
    if (!unit_or_zero) continue;
    T* v = m.params().value(n);
    for (int64_t i = 0; i < spec.numel(); ++i)
      v[i] += static_cast<T>(0.3 * (2 * rng.uniform() - 1));
  }
  return m;
}

// Micro-batch i: B = 1 + i % 2 rows of S = 10 + 2·(i % 3) tokens, a masked
// target, and every third one packed (two documents per row).
inline std::vector<model::Batch> pipeline_micro_batches(const model::ModelConfig& c, int count,
                                                        uint64_t seed = 5) {
  std::vector<model::Batch> out;
  for (int i = 0; i < count; ++i) {
    Rng rng(seed, {static_cast<uint64_t>(i)});
    model::Batch b;
    b.B = 1 + i % 2;
    b.S = 10 + 2 * (i % 3);
    for (int64_t t = 0; t < b.B * b.S; ++t)
      b.input_ids.push_back(rng.uniform_int(int64_t{0}, c.vocab_size - 1));
    b.labels = b.input_ids;
    b.labels[static_cast<size_t>(2 + i % 3)] = -100;
    if (i % 3 == 2) {
      for (int64_t r = 0; r < b.B; ++r)
        for (int64_t t = 0; t < b.S; ++t) b.document_ids.push_back(r * 2 + (t >= 4 ? 1 : 0));
    }
    out.push_back(std::move(b));
  }
  return out;
}

inline model::LossOptions pipeline_loss_options() {
  model::LossOptions loss;
  loss.mtp_weight = 0.3;
  loss.balance_loss_weight = 0.01;
  return loss;
}

template <class T>
struct ReferenceStep {
  std::vector<T> weighted_grads;  // Σ_i n_i g_i
  std::vector<model::LossBreakdown> losses;
};

// What one rank computes without a pipeline: forward_backward per micro-batch,
// gradients weighted by the micro-batch's LM targets. Leaves grads zero.
template <class T>
ReferenceStep<T> reference_step(model::Model<T>& m, const std::vector<model::Batch>& batches,
                                const model::LossOptions& loss) {
  ReferenceStep<T> out;
  out.weighted_grads.assign(static_cast<size_t>(m.params().size()), T(0));
  for (const model::Batch& b : batches) {
    m.params().zero_grads();
    out.losses.push_back(m.forward_backward(b, loss));
    const T w = static_cast<T>(out.losses.back().lm_tokens);
    const std::vector<T>& g = m.params().grads();
    for (size_t i = 0; i < g.size(); ++i) out.weighted_grads[i] += w * g[i];
  }
  m.params().zero_grads();
  return out;
}

// How far `got` is from `want`: over the whole gradient, ‖got − want‖₂ / ‖want‖₂
// and max |got − want| / max |want|; per tensor, max |got − want| / max |want|
// (its worst tensor named; in fp32 a few tiny tensors whose gradient is a sum
// with heavy cancellation, e.g. hc_head_scale, are far less accurate than that
// in either computation, so the fp32 checks use the whole-gradient norms).
struct GradientComparison {
  double global = 0.0;
  double global_max = 0.0;
  double worst_tensor = 0.0;
  std::string worst_name;
};

template <class T>
GradientComparison compare_gradients(const model::ParamStore<T>& p, const std::vector<T>& got,
                                     const std::vector<T>& want) {
  GradientComparison out;
  double diff2 = 0.0, want2 = 0.0, diff_max = 0.0, want_max = 0.0;
  for (const model::ParamSpec& spec : p.specs()) {
    const int64_t begin = p.offset(spec.name);
    double diff = 0.0, scale = 0.0;
    for (int64_t i = begin; i < begin + spec.numel(); ++i) {
      const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
      diff = std::max(diff, std::abs(d));
      scale = std::max(scale, std::abs(static_cast<double>(want[i])));
      diff2 += d * d;
      want2 += static_cast<double>(want[i]) * static_cast<double>(want[i]);
    }
    diff_max = std::max(diff_max, diff);
    want_max = std::max(want_max, scale);
    const double rel = scale > 0 ? diff / scale : diff;
    if (rel > out.worst_tensor) {
      out.worst_tensor = rel;
      out.worst_name = spec.name;
    }
  }
  out.global = want2 > 0 ? std::sqrt(diff2 / want2) : std::sqrt(diff2);
  out.global_max = want_max > 0 ? diff_max / want_max : diff_max;
  return out;
}

}  // namespace trex::test
