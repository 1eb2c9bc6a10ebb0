#include "trex/model/params.hpp"

#include <algorithm>

#include "trex/core/error.hpp"

namespace trex::model {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

namespace {

struct Builder {
  std::vector<ParamSpec> dense, experts;
  void add(std::string name, std::vector<int64_t> shape, OptimizerGroup group, int64_t layer) {
    dense.push_back({std::move(name), std::move(shape), ParamRole::kDense, group, layer, -1});
  }
  void expert(std::string name, std::vector<int64_t> shape, int64_t layer, int64_t e) {
    experts.push_back(
        {std::move(name), std::move(shape), ParamRole::kExpert, OptimizerGroup::kMuon, layer, e});
  }
};

void add_block(Builder& b, const ModelConfig& c, const std::string& p, int64_t layer) {
  using G = OptimizerGroup;
  const int64_t d = c.hidden_size, n = c.hc_mult, mix = c.hc_mix_dim();
  const int64_t H = c.num_attention_heads, hd = c.head_dim, g = c.o_groups;
  b.add(p + "attn_norm.weight", {d}, G::kAdamW, layer);
  b.add(p + "ffn_norm.weight", {d}, G::kAdamW, layer);
  for (const char* site : {"attn", "ffn"}) {
    b.add(p + "hc_" + site + "_fn", {mix, n * d}, G::kMuon, layer);
    b.add(p + "hc_" + site + "_base", {mix}, G::kAdamW, layer);
    b.add(p + "hc_" + site + "_scale", {3}, G::kAdamW, layer);
  }
  const std::string a = p + "attn.";
  b.add(a + "wq_a.weight", {c.q_lora_rank, d}, G::kMuon, layer);
  b.add(a + "q_norm.weight", {c.q_lora_rank}, G::kAdamW, layer);
  b.add(a + "wq_b.weight", {H * hd, c.q_lora_rank}, G::kMuon, layer);
  b.add(a + "wkv.weight", {hd, d}, G::kMuon, layer);
  b.add(a + "kv_norm.weight", {hd}, G::kAdamW, layer);
  b.add(a + "wo_a.weight", {g * c.o_lora_rank, hd * H / g}, G::kMuon, layer);
  b.add(a + "wo_b.weight", {d, g * c.o_lora_rank}, G::kMuon, layer);
  b.add(a + "attn_sink", {H}, G::kAdamW, layer);
  const int64_t m = c.ratio(layer);
  if (m > 0) {
    const int64_t coff = m == 4 ? 2 : 1;
    b.add(a + "compressor.wkv.weight", {coff * hd, d}, G::kMuon, layer);
    b.add(a + "compressor.wgate.weight", {coff * hd, d}, G::kMuon, layer);
    b.add(a + "compressor.ape", {m, coff * hd}, G::kAdamW, layer);
    b.add(a + "compressor.norm.weight", {hd}, G::kAdamW, layer);
  }
  if (m == 4) {
    const int64_t nI = c.index_n_heads, cI = c.index_head_dim;
    b.add(a + "indexer.wq_b.weight", {nI * cI, c.q_lora_rank}, G::kMuon, layer);
    b.add(a + "indexer.weights_proj.weight", {nI, d}, G::kMuon, layer);
    b.add(a + "indexer.compressor.wkv.weight", {2 * cI, d}, G::kMuon, layer);
    b.add(a + "indexer.compressor.wgate.weight", {2 * cI, d}, G::kMuon, layer);
    b.add(a + "indexer.compressor.ape", {4, 2 * cI}, G::kAdamW, layer);
    b.add(a + "indexer.compressor.norm.weight", {cI}, G::kAdamW, layer);
  }
  const std::string f = p + "ffn.";
  const int64_t E = c.n_routed_experts, I = c.moe_intermediate_size;
  b.add(f + "gate.weight", {E, d}, G::kMuon, layer);
  if (!c.is_hash_layer(layer)) b.add(f + "gate.bias", {E}, G::kNotTrained, layer);
  for (const char* w : {"w1", "w2", "w3"}) {
    const bool down = w[1] == '2';
    b.add(f + "shared_experts." + w + ".weight",
          down ? std::vector<int64_t>{d, I} : std::vector<int64_t>{I, d}, G::kMuon, layer);
  }
  for (int64_t e = 0; e < E; ++e)
    for (const char* w : {"w1", "w2", "w3"}) {
      const bool down = w[1] == '2';
      b.expert(f + "experts." + std::to_string(e) + "." + w + ".weight",
               down ? std::vector<int64_t>{d, I} : std::vector<int64_t>{I, d}, layer, e);
    }
}

void add_head(Builder& b, const ModelConfig& c, const std::string& p, int64_t layer) {
  const int64_t d = c.hidden_size, n = c.hc_mult;
  b.add(p + "hc_head_fn", {n, n * d}, OptimizerGroup::kMuon, layer);
  b.add(p + "hc_head_base", {n}, OptimizerGroup::kAdamW, layer);
  b.add(p + "hc_head_scale", {1}, OptimizerGroup::kAdamW, layer);
}

}  // namespace

std::vector<ParamSpec> parameter_specs(const ModelConfig& c) {
  Builder b;
  const int64_t d = c.hidden_size;
  b.add("embed.weight", {c.vocab_size, d}, OptimizerGroup::kAdamW, -1);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    add_block(b, c, "layers." + std::to_string(l) + ".", l);
  add_head(b, c, "", -1);
  b.add("norm.weight", {d}, OptimizerGroup::kAdamW, -1);
  b.add("head.weight", {c.vocab_size, d}, OptimizerGroup::kAdamW, -1);
  for (int64_t j = 0; j < c.num_nextn_predict_layers; ++j) {
    const std::string p = "mtp." + std::to_string(j) + ".";
    const int64_t layer = c.num_hidden_layers + j;
    b.add(p + "e_proj.weight", {d, d}, OptimizerGroup::kMuon, layer);
    b.add(p + "h_proj.weight", {d, d}, OptimizerGroup::kMuon, layer);
    b.add(p + "enorm.weight", {d}, OptimizerGroup::kAdamW, layer);
    b.add(p + "hnorm.weight", {d}, OptimizerGroup::kAdamW, layer);
    b.add(p + "norm.weight", {d}, OptimizerGroup::kAdamW, layer);
    add_head(b, c, p, layer);
    add_block(b, c, p, layer);
  }
  std::vector<ParamSpec> all = std::move(b.dense);
  all.insert(all.end(), b.experts.begin(), b.experts.end());
  return all;
}

std::vector<std::string> hash_table_names(const ModelConfig& c) {
  std::vector<std::string> names;
  for (int64_t l = 0; l < std::min(c.num_hash_layers, c.num_hidden_layers); ++l)
    names.push_back("layers." + std::to_string(l) + ".ffn.gate.tid2eid");
  return names;
}

template <class T>
ParamStore<T>::ParamStore(std::vector<ParamSpec> specs) : specs_(std::move(specs)) {
  int64_t total = 0;
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (!index_.emplace(specs_[i].name, i).second)
      throw Error("duplicate parameter name " + specs_[i].name);
    offsets_.push_back(total);
    total += specs_[i].numel();
  }
  values_.assign(static_cast<size_t>(total), T(0));
  grads_ = PageVector<T>(static_cast<size_t>(total));  // zero pages, none committed yet
}

template <class T>
const ParamSpec& ParamStore<T>::spec(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw Error("no parameter named '" + name + "'");
  return specs_[it->second];
}

template <class T>
int64_t ParamStore<T>::offset(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw Error("no parameter named '" + name + "'");
  return offsets_[it->second];
}

template <class T>
T* ParamStore<T>::value_or_null(const std::string& name) {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : values_.data() + offsets_[it->second];
}

template <class T>
T* ParamStore<T>::grad_or_null(const std::string& name) {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : grads_.data() + offsets_[it->second];
}

template <class T>
void ParamStore<T>::zero_grads() {
  zero_pages(grads_);
}

template <class T>
void ParamStore<T>::release_grads(int64_t begin, int64_t end) {
  release_pages(grads_, std::max<int64_t>(begin, 0),
                std::min<int64_t>(end, static_cast<int64_t>(grads_.size())));
}

template <class T>
std::pair<int64_t, int64_t> ParamStore<T>::range(ParamRole role) const {
  int64_t begin = -1, end = -1;
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].role != role) continue;
    if (begin < 0) begin = offsets_[i];
    end = offsets_[i] + specs_[i].numel();
  }
  if (begin < 0) return {0, 0};
  return {begin, end};
}

template class ParamStore<float>;
template class ParamStore<double>;

}  // namespace trex::model
