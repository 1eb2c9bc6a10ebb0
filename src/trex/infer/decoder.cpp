#include "trex/infer/decoder.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "trex/core/error.hpp"
#include "trex/kernels/cpu/gemm.hpp"
#include "trex/kernels/cpu/norms.hpp"
#include "trex/kernels/cpu/rope.hpp"
#include "trex/model/attention.hpp"
#include "trex/model/mhc.hpp"
#include "trex/model/moe.hpp"

namespace trex::infer {

// The decoder re-runs the model's blocks token by token on its weights and kernels.
using namespace trex::model;
namespace {

// Generation multiplies in fp32 (the training precision does not carry over).
constexpr kernels::Precision kPrecision = kernels::Precision::kF32;

// Below this many multiply-adds a loop runs serially: an OpenMP region costs more.
constexpr int64_t kParallelWork = int64_t{1} << 18;

template <class T>
struct LayerWeights {
  AttentionDims dims;
  MhcWeights<T> attn_hc, ffn_hc;
  const T* attn_norm = nullptr;
  const T* ffn_norm = nullptr;
  AttentionWeights<T> attn;
  MoeWeights<T> moe;
};

template <class T>
LayerWeights<T> bind_layer(const ModelConfig& c, const ParamStore<T>& p, const HashTables& hash,
                           int64_t layer) {
  const std::string prefix = "layers." + std::to_string(layer) + ".";
  auto v = [&](const std::string& n) -> const T* { return p.value(prefix + n); };
  auto opt = [&](const std::string& n) -> const T* {
    return p.contains(prefix + n) ? p.value(prefix + n) : nullptr;
  };
  LayerWeights<T> w;
  w.dims = AttentionDims::from_config(c, layer);
  w.attn_hc = {v("hc_attn_fn"), v("hc_attn_base"), v("hc_attn_scale")};
  w.ffn_hc = {v("hc_ffn_fn"), v("hc_ffn_base"), v("hc_ffn_scale")};
  w.attn_norm = v("attn_norm.weight");
  w.ffn_norm = v("ffn_norm.weight");
  AttentionWeights<T>& a = w.attn;
  a.wq_a = v("attn.wq_a.weight");
  a.q_norm = v("attn.q_norm.weight");
  a.wq_b = v("attn.wq_b.weight");
  a.wkv = v("attn.wkv.weight");
  a.kv_norm = v("attn.kv_norm.weight");
  a.wo_a = v("attn.wo_a.weight");
  a.wo_b = v("attn.wo_b.weight");
  a.attn_sink = v("attn.attn_sink");
  if (w.dims.has_compressor())
    a.compressor = {v("attn.compressor.wkv.weight"), v("attn.compressor.wgate.weight"),
                    v("attn.compressor.ape"), v("attn.compressor.norm.weight")};
  if (w.dims.has_indexer()) {
    a.indexer.wq_b = v("attn.indexer.wq_b.weight");
    a.indexer.weights_proj = v("attn.indexer.weights_proj.weight");
    a.indexer.compressor = {
        v("attn.indexer.compressor.wkv.weight"), v("attn.indexer.compressor.wgate.weight"),
        v("attn.indexer.compressor.ape"), v("attn.indexer.compressor.norm.weight")};
  }
  MoeWeights<T>& m = w.moe;
  m.gate = v("ffn.gate.weight");
  m.gate_bias = opt("ffn.gate.bias");
  if (c.is_hash_layer(layer)) m.tid2eid = hash.at(static_cast<size_t>(layer)).data();
  m.shared_w1 = opt("ffn.shared_experts.w1.weight");
  m.shared_w2 = opt("ffn.shared_experts.w2.weight");
  m.shared_w3 = opt("ffn.shared_experts.w3.weight");
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    const std::string ep = "ffn.experts." + std::to_string(e) + ".";
    m.w1.push_back(v(ep + "w1.weight"));
    m.w2.push_back(v(ep + "w2.weight"));
    m.w3.push_back(v(ep + "w3.weight"));
  }
  return w;
}

// Decoding state of one compressor (spec §2.11) for one sequence: the
// projection and gate rows of the last coff·m tokens (token s at ring slot
// s mod coff·m: exactly the current block and, when overlapping, the previous
// one) and every entry emitted so far, normalised and rotated.
template <class T>
struct CompressorState {
  std::vector<T> proj, gate;  // [coff·m, coff·c_x] rings
  std::vector<T> entries;     // [count, c_x]
  int64_t count = 0;
};

template <class T>
struct LayerState {
  std::vector<T> window;  // K=V latents, position t at ring slot t mod n_win: [n_win, c]
  CompressorState<T> compressor;
  CompressorState<T> indexer;  // CSA: the indexer's keys K^I
};

template <class T>
struct SequenceState {
  bool active = false;
  int64_t length = 0;
  std::vector<LayerState<T>> layers;
};

// Token `t` of a sequence brings its projection and gate rows; when t closes
// block i = t/m, entry i is pooled exactly as compressor_forward does (slots of
// the previous block first, softmax over the slots per channel), normalised and
// rotated to position i·m.
template <class T>
void compressor_push(const CompressorDims& d, const CompressorWeights<T>& w,
                     const kernels::RopeTable& rope, int64_t t, const T* proj, const T* gate,
                     CompressorState<T>& st) {
  const int64_t m = d.ratio, width = d.proj_dim(), cx = d.out_dim, ring = d.coff() * m;
  if (st.proj.empty()) {
    st.proj.assign(static_cast<size_t>(ring * width), T(0));
    st.gate.assign(static_cast<size_t>(ring * width), T(0));
  }
  std::copy(proj, proj + width, st.proj.data() + (t % ring) * width);
  std::copy(gate, gate + width, st.gate.data() + (t % ring) * width);
  if ((t + 1) % m != 0) return;
  const int64_t i = t / m;
  const int64_t slots = ring;
  // slot -> (token, column, ape row); false for the previous block of entry 0.
  auto slot_of = [&](int64_t k, int64_t e, int64_t* token, int64_t* column, int64_t* ape_row) {
    if (d.overlap && k < m) {
      if (i == 0) return false;
      *token = (i - 1) * m + k;
      *column = e;
      *ape_row = k;
      return true;
    }
    const int64_t r = d.overlap ? k - m : k;
    *token = i * m + r;
    *column = d.overlap ? cx + e : e;
    *ape_row = r;
    return true;
  };
  std::vector<T> score(static_cast<size_t>(slots)), pooled(static_cast<size_t>(cx));
  for (int64_t e = 0; e < cx; ++e) {
    T max_score = -std::numeric_limits<T>::infinity();
    int64_t token = 0, column = 0, ape_row = 0;
    for (int64_t k = 0; k < slots; ++k) {
      if (!slot_of(k, e, &token, &column, &ape_row)) continue;
      score[k] = st.gate[(token % ring) * width + column] + w.ape[ape_row * width + column];
      max_score = std::max(max_score, score[k]);
    }
    T sum = 0;
    for (int64_t k = 0; k < slots; ++k) {
      if (!slot_of(k, e, &token, &column, &ape_row)) continue;
      score[k] = std::exp(score[k] - max_score);
      sum += score[k];
    }
    T value = 0;
    for (int64_t k = 0; k < slots; ++k) {
      if (!slot_of(k, e, &token, &column, &ape_row)) continue;
      const T p = score[k] / sum;
      value += p * st.proj[(token % ring) * width + column];
    }
    pooled[e] = value;
  }
  st.entries.resize(static_cast<size_t>((st.count + 1) * cx));
  T* out = st.entries.data() + st.count * cx;
  T inv_rms = 0;
  kernels::rmsnorm_forward(pooled.data(), w.norm, out, &inv_rms, 1, cx, d.eps);
  const int64_t position = i * m;
  kernels::rope_apply(rope, out, 1, 1, cx, &position, /*inverse=*/false);
  ++st.count;
}

template <class T>
T dot(const T* x, const T* y, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}

// Per-call scratch of one layer's attention over R rows.
template <class T>
struct AttentionScratch {
  std::vector<T> q_lora, q_lora_inv, c_q, q_raw, q, q_inv, kv_raw, kv, kv_inv;
  std::vector<T> comp_proj, comp_gate;
  std::vector<T> index_q, index_weights, index_proj, index_gate;
  std::vector<T> o, z;
};

}  // namespace

template <class T>
struct Decoder<T>::Impl {
  const Model<T>* model = nullptr;
  std::vector<LayerWeights<T>> layers;
  std::vector<kernels::RopeTable> rope;  // per layer (base / YaRN differ by kind)
  int64_t rope_positions = 0;
  std::vector<SequenceState<T>> sequences;
  std::vector<int64_t> free_handles;

  // Per-call scratch (reused to avoid reallocation every step).
  std::vector<T> x, x_next, u, inv, normed, y, x_mid;
  MhcCache<T> mhc;
  MoeCache<T> moe;
  HcHeadCache<T> head_cache;
  AttentionScratch<T> scratch;

  void ensure_rope(int64_t positions) {
    if (positions <= rope_positions) return;
    const int64_t grown = std::max<int64_t>(positions, std::max<int64_t>(2 * rope_positions, 256));
    for (size_t l = 0; l < layers.size(); ++l) {
      const AttentionDims& d = layers[l].dims;
      rope[l] = kernels::RopeTable(d.rope_dim, d.rope_base, grown, d.yarn);
    }
    rope_positions = grown;
  }

  SequenceState<T>& sequence(int64_t handle) {
    if (handle < 0 || handle >= static_cast<int64_t>(sequences.size()) ||
        !sequences[static_cast<size_t>(handle)].active)
      throw Error("no active decoder sequence " + std::to_string(handle)).field("sequence");
    return sequences[static_cast<size_t>(handle)];
  }

  void attention(int64_t layer, const T* a, const std::vector<int64_t>& seq_of_row,
                 const std::vector<int64_t>& positions,
                 const std::vector<std::vector<int64_t>>& groups, T* out);
};

template <class T>
void Decoder<T>::Impl::attention(int64_t layer, const T* a, const std::vector<int64_t>& seq_of_row,
                                 const std::vector<int64_t>& positions,
                                 const std::vector<std::vector<int64_t>>& groups, T* out) {
  const LayerWeights<T>& lw = layers[static_cast<size_t>(layer)];
  const AttentionDims& d = lw.dims;
  const AttentionWeights<T>& w = lw.attn;
  const kernels::RopeTable& table = rope[static_cast<size_t>(layer)];
  AttentionScratch<T>& s = scratch;
  const int64_t R = static_cast<int64_t>(positions.size());
  const int64_t H = d.heads, c = d.head_dim, hc = H * c, dc = d.q_lora, hidden = d.hidden;

  // Per-token projections over all rows, as attention_forward computes them.
  s.q_lora.resize(R * dc);
  s.q_lora_inv.resize(R);
  s.c_q.resize(R * dc);
  kernels::linear_forward(a, w.wq_a, s.q_lora.data(), R, dc, hidden, kPrecision);
  kernels::rmsnorm_forward(s.q_lora.data(), w.q_norm, s.c_q.data(), s.q_lora_inv.data(), R, dc,
                           d.eps);
  s.q_raw.resize(R * hc);
  s.q.resize(R * hc);
  s.q_inv.resize(R * H);
  kernels::linear_forward(s.c_q.data(), w.wq_b, s.q_raw.data(), R, hc, dc, kPrecision);
  kernels::rmsnorm_forward(s.q_raw.data(), static_cast<const T*>(nullptr), s.q.data(),
                           s.q_inv.data(), R * H, c, d.eps);
  kernels::rope_apply(table, s.q.data(), R, H, c, positions.data(), false);
  s.kv_raw.resize(R * c);
  s.kv.resize(R * c);
  s.kv_inv.resize(R);
  kernels::linear_forward(a, w.wkv, s.kv_raw.data(), R, c, hidden, kPrecision);
  kernels::rmsnorm_forward(s.kv_raw.data(), w.kv_norm, s.kv.data(), s.kv_inv.data(), R, c, d.eps);
  kernels::rope_apply(table, s.kv.data(), R, 1, c, positions.data(), false);

  const CompressorDims cd = d.has_compressor() ? d.compressor() : CompressorDims{};
  if (d.has_compressor()) {
    s.comp_proj.resize(R * cd.proj_dim());
    s.comp_gate.resize(R * cd.proj_dim());
    kernels::linear_forward(a, w.compressor.wkv, s.comp_proj.data(), R, cd.proj_dim(), hidden,
                            kPrecision);
    kernels::linear_forward(a, w.compressor.wgate, s.comp_gate.data(), R, cd.proj_dim(), hidden,
                            kPrecision);
  }
  const IndexerDims id = d.has_indexer() ? d.indexer() : IndexerDims{};
  const CompressorDims icd = d.has_indexer() ? id.compressor() : CompressorDims{};
  const int64_t iq_dim = id.heads * id.head_dim;
  if (d.has_indexer()) {
    s.index_q.resize(R * iq_dim);
    kernels::linear_forward(s.c_q.data(), w.indexer.wq_b, s.index_q.data(), R, iq_dim, dc,
                            kPrecision);
    kernels::rope_apply(table, s.index_q.data(), R, id.heads, id.head_dim, positions.data(), false);
    s.index_weights.resize(R * id.heads);
    kernels::linear_forward(a, w.indexer.weights_proj, s.index_weights.data(), R, id.heads, hidden,
                            kPrecision);
    const T scale = static_cast<T>(
        1.0 / std::sqrt(static_cast<double>(id.head_dim) * static_cast<double>(id.heads)));
    for (auto& v : s.index_weights) v *= scale;
    s.index_proj.resize(R * icd.proj_dim());
    s.index_gate.resize(R * icd.proj_dim());
    kernels::linear_forward(a, w.indexer.compressor.wkv, s.index_proj.data(), R, icd.proj_dim(),
                            hidden, kPrecision);
    kernels::linear_forward(a, w.indexer.compressor.wgate, s.index_gate.data(), R, icd.proj_dim(),
                            hidden, kPrecision);
  }

  // Sequence by sequence (rows of one sequence in order: each reads the state its
  // predecessors left), sequences in parallel: they share nothing.
  s.o.assign(static_cast<size_t>(R * hc), T(0));
  const T inv_sqrt_c = static_cast<T>(1.0 / std::sqrt(static_cast<double>(c)));
  const int64_t n_groups = static_cast<int64_t>(groups.size());
  const int64_t window = d.window;
  // Rough multiply-adds of the core: below kParallelWork an OpenMP region costs more.
  const int64_t longest = *std::max_element(positions.begin(), positions.end()) + 1;
  const int64_t core_work =
      R * hc * (window + (d.has_compressor() ? longest / d.ratio : 0)) * (d.has_indexer() ? 2 : 1);
#pragma omp parallel for schedule(dynamic, 1) if (n_groups > 1 && core_work > kParallelWork)
  for (int64_t gi = 0; gi < n_groups; ++gi) {
    std::vector<T> logits;
    std::vector<const T*> keys;
    std::vector<T> scores;
    std::vector<int64_t> order, selected;
    for (int64_t r : groups[static_cast<size_t>(gi)]) {
      LayerState<T>& st =
          sequences[static_cast<size_t>(seq_of_row[r])].layers[static_cast<size_t>(layer)];
      const int64_t t = positions[r];
      if (st.window.empty()) st.window.assign(static_cast<size_t>(window * c), T(0));
      std::copy(s.kv.data() + r * c, s.kv.data() + (r + 1) * c,
                st.window.data() + (t % window) * c);
      if (d.has_compressor())
        compressor_push(cd, w.compressor, table, t, s.comp_proj.data() + r * cd.proj_dim(),
                        s.comp_gate.data() + r * cd.proj_dim(), st.compressor);
      if (d.has_indexer())
        compressor_push(icd, w.indexer.compressor, table, t,
                        s.index_proj.data() + r * icd.proj_dim(),
                        s.index_gate.data() + r * icd.proj_dim(), st.indexer);

      // Keys: the window oldest first, then the compressed set.
      keys.clear();
      const int64_t ws = std::max<int64_t>(0, t - window + 1);
      for (int64_t p = ws; p <= t; ++p) keys.push_back(st.window.data() + (p % window) * c);
      if (d.has_indexer()) {
        const int64_t visible = std::min((t + 1) / d.ratio, st.indexer.count);
        if (visible > 0) {
          const T* q = s.index_q.data() + r * iq_dim;
          const T* hw = s.index_weights.data() + r * id.heads;
          scores.resize(static_cast<size_t>(visible));
          for (int64_t i = 0; i < visible; ++i) {
            const T* key = st.indexer.entries.data() + i * id.head_dim;
            T score = 0;
            for (int64_t h = 0; h < id.heads; ++h) {
              T dp = 0;
              for (int64_t e = 0; e < id.head_dim; ++e) dp += q[h * id.head_dim + e] * key[e];
              score += hw[h] * std::max(dp, T(0));
            }
            scores[i] = score;
          }
          // The training forward's rule (ranks_before), so decoding selects
          // exactly the blocks the full forward selects, ties and NaN included.
          selected.resize(static_cast<size_t>(std::min(id.topk, visible)));
          const int64_t take =
              select_top_indices(scores.data(), visible, id.topk, selected.data(), order);
          for (int64_t k = 0; k < take; ++k)
            keys.push_back(st.compressor.entries.data() + selected[k] * c);
        }
      } else if (d.has_compressor()) {
        const int64_t visible = std::min((t + 1) / d.ratio, st.compressor.count);
        for (int64_t i = 0; i < visible; ++i) keys.push_back(st.compressor.entries.data() + i * c);
      }

      const int64_t n_keys = static_cast<int64_t>(keys.size());
      logits.resize(static_cast<size_t>(n_keys));
      for (int64_t h = 0; h < H; ++h) {
        const T* qh = s.q.data() + r * hc + h * c;
        const T sink = w.attn_sink[h];
        T max_logit = sink;
        for (int64_t k = 0; k < n_keys; ++k) {
          logits[k] = dot(qh, keys[k], c) * inv_sqrt_c;
          max_logit = std::max(max_logit, logits[k]);
        }
        T denom = std::exp(sink - max_logit);
        for (int64_t k = 0; k < n_keys; ++k) {
          logits[k] = std::exp(logits[k] - max_logit);
          denom += logits[k];
        }
        T* oh = s.o.data() + r * hc + h * c;
        for (int64_t k = 0; k < n_keys; ++k) {
          const T p = logits[k] / denom;
          const T* v = keys[k];
          for (int64_t e = 0; e < c; ++e) oh[e] += p * v[e];
        }
      }
    }
  }

  // Inverse RoPE at the query position, grouped low-rank output projection.
  kernels::rope_apply(table, s.o.data(), R, H, c, positions.data(), true);
  const int64_t g = d.o_groups, dg = d.o_lora, group_in = hc / g;
  s.z.assign(static_cast<size_t>(R * g * dg), T(0));
  for (int64_t j = 0; j < g; ++j)
    kernels::gemm<T>(kPrecision, false, true, R, dg, group_in, T(1), s.o.data() + j * group_in, hc,
                     w.wo_a + j * dg * group_in, group_in, T(0), s.z.data() + j * dg, g * dg);
  kernels::linear_forward(s.z.data(), w.wo_b, out, R, hidden, g * dg, kPrecision);
}

template <class T>
Decoder<T>::Decoder(const Model<T>& model) : impl_(std::make_unique<Impl>()) {
  const ModelConfig& c = model.config();
  impl_->model = &model;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    impl_->layers.push_back(bind_layer(c, model.params(), model.hash_tables(), l));
  impl_->rope.resize(impl_->layers.size());
  impl_->ensure_rope(256);
}

template <class T>
Decoder<T>::~Decoder() = default;
template <class T>
Decoder<T>::Decoder(Decoder&&) noexcept = default;
template <class T>
Decoder<T>& Decoder<T>::operator=(Decoder&&) noexcept = default;

template <class T>
int64_t Decoder<T>::add_sequence() {
  int64_t handle;
  if (!impl_->free_handles.empty()) {
    handle = impl_->free_handles.back();
    impl_->free_handles.pop_back();
  } else {
    handle = static_cast<int64_t>(impl_->sequences.size());
    impl_->sequences.emplace_back();
  }
  SequenceState<T>& st = impl_->sequences[static_cast<size_t>(handle)];
  st = SequenceState<T>{};
  st.active = true;
  st.layers.resize(impl_->layers.size());
  return handle;
}

template <class T>
int64_t Decoder<T>::fork_sequence(int64_t source) {
  impl_->sequence(source);  // validates
  const int64_t handle = add_sequence();
  impl_->sequences[static_cast<size_t>(handle)] = impl_->sequences[static_cast<size_t>(source)];
  return handle;
}

template <class T>
void Decoder<T>::release_sequence(int64_t sequence) {
  impl_->sequence(sequence) = SequenceState<T>{};
  impl_->free_handles.push_back(sequence);
}

template <class T>
int64_t Decoder<T>::length(int64_t sequence) const {
  return impl_->sequence(sequence).length;
}

template <class T>
int64_t Decoder<T>::active_sequences() const {
  return static_cast<int64_t>(impl_->sequences.size() - impl_->free_handles.size());
}

template <class T>
void Decoder<T>::feed(const std::vector<int64_t>& sequences, const std::vector<int64_t>& tokens,
                      T* logits, const std::vector<int64_t>& logit_rows) {
  Impl& im = *impl_;
  const ModelConfig& c = im.model->config();
  const ParamStore<T>& params = im.model->params();
  if (sequences.size() != tokens.size())
    throw Error("feed: " + std::to_string(sequences.size()) + " sequences for " +
                std::to_string(tokens.size()) + " tokens")
        .field("tokens");
  const int64_t R = static_cast<int64_t>(tokens.size());
  if (R == 0) return;
  const int64_t d = c.hidden_size, n = c.hc_mult, V = c.vocab_size;
  for (int64_t tok : tokens)
    if (tok < 0 || tok >= V)
      throw Error("token id " + std::to_string(tok) + " outside the vocabulary [0, " +
                  std::to_string(V) + ")")
          .field("tokens");
  for (int64_t r : logit_rows)
    if (r < 0 || r >= R) throw Error("logit row outside the fed rows").field("logit_rows");

  // Positions continue each sequence; rows grouped by sequence in first-appearance order.
  std::vector<int64_t> positions(static_cast<size_t>(R));
  std::vector<std::vector<int64_t>> groups;
  std::vector<int64_t> group_of(im.sequences.size(), -1);
  std::vector<int64_t> next_position(im.sequences.size(), 0);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t seq = sequences[r];
    const SequenceState<T>& st = im.sequence(seq);
    if (group_of[seq] < 0) {
      group_of[seq] = static_cast<int64_t>(groups.size());
      groups.emplace_back();
      next_position[seq] = st.length;
    }
    groups[static_cast<size_t>(group_of[seq])].push_back(r);
    positions[r] = next_position[seq]++;
  }
  im.ensure_rope(*std::max_element(positions.begin(), positions.end()) + 1);

  // Embedding copied into the n streams.
  const T* embed = params.value("embed.weight");
  im.x.resize(R * n * d);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < n; ++j)
      std::copy(embed + tokens[r] * d, embed + (tokens[r] + 1) * d, im.x.data() + (r * n + j) * d);
  im.x_next.resize(R * n * d);
  im.x_mid.resize(R * n * d);
  im.u.resize(R * d);
  im.inv.resize(R);
  im.normed.resize(R * d);
  im.y.resize(R * d);
  const MhcDims md = mhc_dims(c, R);
  for (int64_t l = 0; l < static_cast<int64_t>(im.layers.size()); ++l) {
    const LayerWeights<T>& lw = im.layers[static_cast<size_t>(l)];
    mhc_pre_forward(md, lw.attn_hc, im.x.data(), im.u.data(), im.mhc);
    kernels::rmsnorm_forward(im.u.data(), lw.attn_norm, im.normed.data(), im.inv.data(), R, d,
                             c.rms_norm_eps);
    im.attention(l, im.normed.data(), sequences, positions, groups, im.y.data());
    mhc_post_forward(md, im.mhc, im.x.data(), im.y.data(), im.x_mid.data());
    mhc_pre_forward(md, lw.ffn_hc, im.x_mid.data(), im.u.data(), im.mhc);
    kernels::rmsnorm_forward(im.u.data(), lw.ffn_norm, im.normed.data(), im.inv.data(), R, d,
                             c.rms_norm_eps);
    moe_forward(moe_dims(c, l, 1, R), lw.moe, im.normed.data(), tokens.data(), im.moe, im.y.data());
    mhc_post_forward(md, im.mhc, im.x_mid.data(), im.y.data(), im.x_next.data());
    std::swap(im.x, im.x_next);
  }
  for (const auto& group : groups) im.sequence(sequences[group.front()]).length += group.size();
  if (!logits) return;

  // HC head, final norm and LM head on the requested rows only.
  std::vector<int64_t> rows = logit_rows;
  if (rows.empty()) {
    rows.resize(static_cast<size_t>(R));
    std::iota(rows.begin(), rows.end(), int64_t{0});
  }
  const int64_t Q = static_cast<int64_t>(rows.size());
  std::vector<T> xq(static_cast<size_t>(Q * n * d)), hq(static_cast<size_t>(Q * d)),
      hn(static_cast<size_t>(Q * d)), inv(static_cast<size_t>(Q));
  for (int64_t i = 0; i < Q; ++i)
    std::copy(im.x.data() + rows[i] * n * d, im.x.data() + (rows[i] + 1) * n * d,
              xq.data() + i * n * d);
  const HcHeadWeights<T> head_w{params.value("hc_head_fn"), params.value("hc_head_base"),
                                params.value("hc_head_scale")};
  hc_head_forward(mhc_dims(c, Q), head_w, xq.data(), hq.data(), im.head_cache);
  kernels::rmsnorm_forward(hq.data(), params.value("norm.weight"), hn.data(), inv.data(), Q, d,
                           c.rms_norm_eps);
  kernels::linear_forward(hn.data(), params.value("head.weight"), logits, Q, V, d, kPrecision);
}

template class Decoder<float>;
template class Decoder<double>;

}  // namespace trex::infer
