#pragma once
// The tensors of one attention layer (SWA, CSA or HCA), by checkpoint-like
// name, drawn from fixed seeds, with the AttentionWeights / AttentionGrads views
// the block takes. Shared by the attention tests and the attention benchmark so
// that both run the block on the same kind of weights.
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gradcheck.hpp"
#include "trex/model/attention.hpp"

namespace trex::testing {

// Points every tensor of a weights or gradients view (they share field names)
// at `tensor(name)`; null for the tensors the layer does not have.
template <class View, class Lookup>
View attention_view(Lookup tensor) {
  View v;
  v.wq_a = tensor("wq_a");
  v.q_norm = tensor("q_norm");
  v.wq_b = tensor("wq_b");
  v.wkv = tensor("wkv");
  v.kv_norm = tensor("kv_norm");
  v.wo_a = tensor("wo_a");
  v.wo_b = tensor("wo_b");
  v.attn_sink = tensor("attn_sink");
  v.compressor = {tensor("comp.wkv"), tensor("comp.wgate"), tensor("comp.ape"),
                  tensor("comp.norm")};
  v.indexer.wq_b = tensor("idx.wq_b");
  v.indexer.weights_proj = tensor("idx.weights_proj");
  v.indexer.compressor = {tensor("idx.comp.wkv"), tensor("idx.comp.wgate"), tensor("idx.comp.ape"),
                          tensor("idx.comp.norm")};
  return v;
}

// Parameters by name; vectors never reallocate after construction. Values are
// drawn in double (so the float copy of a layer holds the double values rounded).
template <class T>
struct AttentionParams {
  model::AttentionDims dims;
  std::map<std::string, std::vector<T>> t;

  // Linear maps uniform in ±gain·sqrt(3/fan_in); norm weights 1 ± 0.2; one seed per tensor.
  explicit AttentionParams(const model::AttentionDims& d, uint64_t seed = 100) : dims(d) {
    const int64_t hd = d.hidden, c = d.head_dim, H = d.heads, dc = d.q_lora;
    auto set = [&](const std::string& name, const std::vector<double>& values) {
      t[name].assign(values.begin(), values.end());
    };
    auto lin = [&](const std::string& name, int64_t out, int64_t in, double gain = 1.0) {
      set(name, random_vector(out * in, seed++, gain * std::sqrt(3.0 / static_cast<double>(in))));
    };
    auto norm = [&](const std::string& name, int64_t n) {
      std::vector<double> values = random_vector(n, seed++, 0.2);
      for (auto& v : values) v += 1.0;
      set(name, values);
    };
    lin("wq_a", dc, hd);
    norm("q_norm", dc);
    lin("wq_b", H * c, dc);
    lin("wkv", c, hd);
    norm("kv_norm", c);
    lin("wo_a", d.o_groups * d.o_lora, H * c / d.o_groups);
    lin("wo_b", hd, d.o_groups * d.o_lora);
    set("attn_sink", random_vector(H, seed++, 1.0));
    if (d.ratio > 0) {
      const int64_t coff = d.ratio == 4 ? 2 : 1;
      lin("comp.wkv", coff * c, hd);
      lin("comp.wgate", coff * c, hd, 2.0);
      set("comp.ape", random_vector(d.ratio * coff * c, seed++, 0.5));
      norm("comp.norm", c);
    }
    if (d.ratio == 4) {
      lin("idx.wq_b", d.index_heads * d.index_head_dim, dc);
      lin("idx.weights_proj", d.index_heads, hd, 3.0);
      lin("idx.comp.wkv", 2 * d.index_head_dim, hd);
      lin("idx.comp.wgate", 2 * d.index_head_dim, hd, 2.0);
      set("idx.comp.ape", random_vector(4 * 2 * d.index_head_dim, seed++, 0.5));
      norm("idx.comp.norm", d.index_head_dim);
    }
  }
  // The same parameters in another precision.
  template <class From>
  explicit AttentionParams(const AttentionParams<From>& other) : dims(other.dims) {
    for (const auto& [name, values] : other.t) t[name].assign(values.begin(), values.end());
  }

  const T* p(const std::string& name) const {
    auto it = t.find(name);
    return it == t.end() ? nullptr : it->second.data();
  }
  model::AttentionWeights<T> weights() const {
    return attention_view<model::AttentionWeights<T>>(
        [&](const std::string& name) { return p(name); });
  }
};

// Zeroed gradient buffers for every parameter of `params`.
template <class T>
struct AttentionGradBuffers {
  std::map<std::string, std::vector<T>> t;

  explicit AttentionGradBuffers(const AttentionParams<T>& params) {
    for (const auto& [name, v] : params.t) t[name].assign(v.size(), T(0));
  }
  T* p(const std::string& name) {
    auto it = t.find(name);
    return it == t.end() ? nullptr : it->second.data();
  }
  model::AttentionGrads<T> grads() {
    return attention_view<model::AttentionGrads<T>>(
        [&](const std::string& name) { return p(name); });
  }
};

}  // namespace trex::testing
