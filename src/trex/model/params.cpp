#include "trex/model/params.hpp"

#include <algorithm>
#include <type_traits>

#include "trex/core/dtypes.hpp"
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

const char* to_string(ParamStorage storage) {
  return storage == ParamStorage::kBF16 ? "bf16" : "fp32";
}

int64_t parameter_value_bytes(const std::vector<ParamSpec>& specs, ParamStorage storage) {
  int64_t bytes = 0;
  for (const ParamSpec& s : specs)
    bytes += s.numel() *
             (storage == ParamStorage::kF32 || s.group == OptimizerGroup::kNotTrained ? 4 : 2);
  return bytes;
}

int64_t decoded_weight_bytes_bound(const std::vector<ParamSpec>& specs, ParamStorage storage) {
  if (storage == ParamStorage::kF32) return 0;
  int64_t globals = 0;
  std::map<int64_t, int64_t> per_layer;
  for (const ParamSpec& s : specs) {
    if (s.group == OptimizerGroup::kNotTrained) continue;  // read in place (fp32)
    if (s.name == "embed.weight") continue;                // gathered from bf16 (Model)
    (s.layer < 0 ? globals : per_layer[s.layer]) += s.numel();
  }
  int64_t largest = 0;
  for (const auto& [layer, numel] : per_layer) largest = std::max(largest, numel);
  return (globals + largest) * static_cast<int64_t>(sizeof(float));
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
  total_ = total;
  values_.assign(static_cast<size_t>(total), T(0));
  grads_ = PageVector<T>(static_cast<size_t>(total));  // zero pages, none committed yet
}

// Moves and copies carry everything but the decoded weights (a cache).
template <class T>
ParamStore<T>::ParamStore(ParamStore&& other) noexcept
    : specs_(std::move(other.specs_)),
      index_(std::move(other.index_)),
      offsets_(std::move(other.offsets_)),
      total_(other.total_),
      storage_(other.storage_),
      values_(std::move(other.values_)),
      bf16_(std::move(other.bf16_)),
      side_(std::move(other.side_)),
      grads_(std::move(other.grads_)) {
  other.release_decoded();
}

template <class T>
ParamStore<T>& ParamStore<T>::operator=(ParamStore&& other) noexcept {
  if (this == &other) return *this;
  release_decoded();
  other.release_decoded();
  specs_ = std::move(other.specs_);
  index_ = std::move(other.index_);
  offsets_ = std::move(other.offsets_);
  total_ = other.total_;
  storage_ = other.storage_;
  values_ = std::move(other.values_);
  bf16_ = std::move(other.bf16_);
  side_ = std::move(other.side_);
  grads_ = std::move(other.grads_);
  return *this;
}

template <class T>
ParamStore<T>::ParamStore(const ParamStore& other)
    : specs_(other.specs_),
      index_(other.index_),
      offsets_(other.offsets_),
      total_(other.total_),
      storage_(other.storage_),
      values_(other.values_),
      bf16_(other.bf16_),
      side_(other.side_),
      grads_(other.grads_) {}

template <class T>
ParamStore<T>& ParamStore<T>::operator=(const ParamStore& other) {
  if (this != &other) *this = ParamStore(other);
  return *this;
}

template <class T>
size_t ParamStore<T>::spec_index(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw Error("no parameter named '" + name + "'");
  return it->second;
}

template <class T>
const ParamSpec& ParamStore<T>::spec(const std::string& name) const {
  return specs_[spec_index(name)];
}

template <class T>
int64_t ParamStore<T>::offset(const std::string& name) const {
  return offsets_[spec_index(name)];
}

template <class T>
T* ParamStore<T>::value_at(size_t i) {
  if (storage_ == ParamStorage::kF32) return values_.data() + offsets_[i];
  if (specs_[i].group == OptimizerGroup::kNotTrained) return side_[i].data();
  throw Error("parameter '" + specs_[i].name +
              "' is stored as bf16 (param_dtype = \"bf16\"): read it with weight() or read()")
      .field("param_dtype");
}

template <class T>
std::vector<T>& ParamStore<T>::values() {
  if (storage_ != ParamStorage::kF32)
    throw Error(
        "the parameter values are stored as bf16 (param_dtype = \"bf16\"): read them with "
        "read() or weight()")
        .field("param_dtype");
  return values_;
}

template <class T>
T* ParamStore<T>::value_or_null(const std::string& name) {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : value_at(it->second);
}

template <class T>
T* ParamStore<T>::grad_or_null(const std::string& name) {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : grads_.data() + offsets_[it->second];
}

template <class T>
void ParamStore<T>::set_storage(ParamStorage storage) {
  if (storage == storage_) return;
  if constexpr (!std::is_same_v<T, float>) {
    throw Error("bf16 parameter storage is for float models only");
  } else {
    release_decoded();
    const int64_t total = size();
    if (storage == ParamStorage::kBF16) {
      bf16_.assign(static_cast<size_t>(total), 0);
      side_.assign(specs_.size(), {});
      for (size_t i = 0; i < specs_.size(); ++i) {
        const T* src = values_.data() + offsets_[i];
        const int64_t n = specs_[i].numel();
        if (specs_[i].group == OptimizerGroup::kNotTrained)
          side_[i].assign(src, src + n);
        else
          f32_to_bf16(src, bf16_.data() + offsets_[i], n);
      }
      storage_ = storage;
      // Swapped out, not `= {}` (which keeps the capacity): the fp32 buffer
      // goes back to the system.
      std::vector<T>().swap(values_);
    } else {
      std::vector<T> values(static_cast<size_t>(total));
      read(0, total, values.data());
      values_ = std::move(values);
      std::vector<uint16_t>().swap(bf16_);
      std::vector<std::vector<T>>().swap(side_);
      storage_ = storage;
    }
  }
}

template <class T>
const T* ParamStore<T>::weight(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return nullptr;
  const size_t i = it->second;
  if (storage_ == ParamStorage::kF32) return values_.data() + offsets_[i];
  if (specs_[i].group == OptimizerGroup::kNotTrained) return side_[i].data();
  Decoded& d = *decoded_;
  const std::lock_guard lock(d.mutex);
  auto found = d.tensors.find(i);
  if (found != d.tensors.end()) return found->second.data();
  // One block at a time: decoding a block's tensor forgets the other blocks'
  // (the model works block by block); the globals stay for the pass.
  const int64_t layer = specs_[i].layer;
  if (layer >= 0)
    for (auto it = d.tensors.begin(); it != d.tensors.end();) {
      const int64_t other = specs_[it->first].layer;
      if (other < 0 || other == layer) {
        ++it;
        continue;
      }
      d.bytes -= static_cast<int64_t>(it->second.size() * sizeof(T));
      it = d.tensors.erase(it);
    }
  const int64_t n = specs_[i].numel();
  std::vector<T> values(static_cast<size_t>(n));
  if constexpr (std::is_same_v<T, float>) bf16_to_f32(bf16_.data() + offsets_[i], values.data(), n);
  d.bytes += n * static_cast<int64_t>(sizeof(T));
  d.peak_bytes = std::max(d.peak_bytes, d.bytes);
  return d.tensors.emplace(i, std::move(values)).first->second.data();
}

template <class T>
const uint16_t* ParamStore<T>::bf16_weight(const std::string& name) const {
  if (storage_ != ParamStorage::kBF16) return nullptr;
  auto it = index_.find(name);
  if (it == index_.end() || specs_[it->second].group == OptimizerGroup::kNotTrained) return nullptr;
  return bf16_.data() + offsets_[it->second];
}

template <class T>
void ParamStore<T>::release_decoded() const {
  if (!decoded_) return;
  const std::lock_guard lock(decoded_->mutex);
  decoded_->tensors.clear();
  decoded_->bytes = 0;
}

template <class T>
int64_t ParamStore<T>::decoded_bytes() const {
  const std::lock_guard lock(decoded_->mutex);
  return decoded_->bytes;
}

template <class T>
int64_t ParamStore<T>::peak_decoded_bytes() const {
  const std::lock_guard lock(decoded_->mutex);
  return decoded_->peak_bytes;
}

// Calls f(spec index, first flat offset, last flat offset) for each tensor
// overlapping [begin, end), clipped to the range.
template <class F>
void for_each_overlap(const std::vector<int64_t>& offsets, const std::vector<ParamSpec>& specs,
                      int64_t begin, int64_t end, const F& f) {
  auto first = std::upper_bound(offsets.begin(), offsets.end(), begin);
  size_t i = static_cast<size_t>(std::max<std::ptrdiff_t>(first - offsets.begin() - 1, 0));
  for (; i < specs.size() && offsets[i] < end; ++i) {
    const int64_t lo = std::max(begin, offsets[i]);
    const int64_t hi = std::min(end, offsets[i] + specs[i].numel());
    if (lo < hi) f(i, lo, hi);
  }
}

template <class T>
void ParamStore<T>::read(int64_t begin, int64_t end, T* out) const {
  if (begin < 0 || end > size() || begin > end)
    throw Error("parameter range [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") outside the store's " + std::to_string(size()) + " values");
  if (storage_ == ParamStorage::kF32) {
    std::copy(values_.begin() + begin, values_.begin() + end, out);
    return;
  }
  for_each_overlap(offsets_, specs_, begin, end, [&](size_t i, int64_t lo, int64_t hi) {
    T* dst = out + (lo - begin);
    if (specs_[i].group == OptimizerGroup::kNotTrained) {
      std::copy_n(side_[i].data() + (lo - offsets_[i]), hi - lo, dst);
    } else if constexpr (std::is_same_v<T, float>) {
      bf16_to_f32(bf16_.data() + lo, dst, hi - lo);
    }
  });
}

template <class T>
std::vector<T> ParamStore<T>::copy_values() const {
  std::vector<T> out(static_cast<size_t>(size()));
  read(0, size(), out.data());
  return out;
}

template <class T>
void ParamStore<T>::write(int64_t begin, int64_t end, const T* in) {
  if (begin < 0 || end > size() || begin > end)
    throw Error("parameter range [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") outside the store's " + std::to_string(size()) + " values");
  if (storage_ == ParamStorage::kF32) {
    std::copy(in, in + (end - begin), values_.begin() + begin);
    return;
  }
  release_decoded();
  for_each_overlap(offsets_, specs_, begin, end, [&](size_t i, int64_t lo, int64_t hi) {
    const T* src = in + (lo - begin);
    if (specs_[i].group == OptimizerGroup::kNotTrained) {
      std::copy_n(src, hi - lo, side_[i].data() + (lo - offsets_[i]));
    } else if constexpr (std::is_same_v<T, float>) {
      f32_to_bf16(src, bf16_.data() + lo, hi - lo);
    }
  });
}

template <class T>
uint16_t* ParamStore<T>::bf16_values() {
  if (storage_ != ParamStorage::kBF16) throw Error("the parameter values are not stored as bf16");
  release_decoded();  // the caller writes them
  return bf16_.data();
}

template <class T>
int64_t ParamStore<T>::value_bytes() const {
  if (storage_ == ParamStorage::kF32) return size() * static_cast<int64_t>(sizeof(T));
  return parameter_value_bytes(specs_, storage_);
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
