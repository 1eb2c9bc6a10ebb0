#include "trex/infer/decoder.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "trex/core/error.hpp"
#include "trex/kernels/array.hpp"
#include "trex/kernels/backend.hpp"
#include "trex/kernels/cpu/rope.hpp"
#include "trex/model/attention.hpp"
#include "trex/model/mhc.hpp"
#include "trex/model/moe.hpp"

namespace trex::infer {

// The decoder re-runs the model's blocks token by token on its weights, with
// the model's backend.
using namespace trex::model;
namespace {

using kernels::Tensor;

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
// The per-sequence state stays in host vectors: the entries grow by one row
// per closed block, keeping the rows already emitted.
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
// block i = t/m, entry i is pooled by the training forward's pooling op
// (compressor_pool_forward over the block's tokens in order, and the previous
// block's when overlapping), normalised and rotated to position i·m.
template <class T>
void compressor_push(const kernels::Backend& ops, const CompressorDims& d,
                     const CompressorWeights<T>& w, const kernels::RopeTable& rope, int64_t t,
                     const T* proj, const T* gate, CompressorState<T>& st) {
  const int64_t m = d.ratio, width = d.proj_dim(), cx = d.out_dim, ring = d.coff() * m;
  if (st.proj.empty()) {
    st.proj.assign(static_cast<size_t>(ring * width), T(0));
    st.gate.assign(static_cast<size_t>(ring * width), T(0));
  }
  ops.copy(Tensor::of(proj, {width}), Tensor::of(st.proj.data() + (t % ring) * width, {width}));
  ops.copy(Tensor::of(gate, {width}), Tensor::of(st.gate.data() + (t % ring) * width, {width}));
  if ((t + 1) % m != 0) return;
  const int64_t i = t / m;
  // The tokens of the pooled blocks, oldest first: block i, after block i − 1
  // when overlapping (entry 0 has none before it). Pooled as one sequence, its
  // last entry is entry i.
  const int64_t first = d.overlap && i > 0 ? (i - 1) * m : i * m;
  const int64_t tokens = (i + 1) * m - first;
  std::vector<int64_t> slots(static_cast<size_t>(tokens));
  std::iota(slots.begin(), slots.end(), first);
  for (int64_t& slot : slots) slot %= ring;
  std::vector<T> block_proj(static_cast<size_t>(tokens * width));
  std::vector<T> block_gate(static_cast<size_t>(tokens * width));
  const Tensor slot_index = Tensor::of(slots.data(), {tokens});
  ops.gather_rows(Tensor::of(st.proj.data(), {ring, width}), slot_index,
                  Tensor::of(block_proj.data(), {tokens, width}));
  ops.gather_rows(Tensor::of(st.gate.data(), {ring, width}), slot_index,
                  Tensor::of(block_gate.data(), {tokens, width}));
  const kernels::CompressorPoolDims pool{1, tokens, m, cx, d.overlap};
  const int64_t entries = pool.entries();
  std::vector<T> prob(static_cast<size_t>(entries * pool.slots() * cx));
  std::vector<T> pooled(static_cast<size_t>(entries * cx));
  ops.compressor_pool_forward(pool, Tensor::of(block_gate.data(), {tokens, width}),
                              Tensor::of(block_proj.data(), {tokens, width}),
                              Tensor::of(w.ape, {m, width}),
                              Tensor::of(prob.data(), {entries, pool.slots(), cx}),
                              Tensor::of(pooled.data(), {entries, cx}));
  st.entries.resize(static_cast<size_t>((st.count + 1) * cx));
  T* out = st.entries.data() + st.count * cx;
  T inv_rms = 0;
  ops.rmsnorm_forward(Tensor::of(pooled.data() + (entries - 1) * cx, {1, cx}),
                      Tensor::of(w.norm, {cx}), Tensor::of(out, {1, cx}), Tensor::of(&inv_rms, {1}),
                      d.eps);
  const int64_t position = i * m;
  ops.rope(rope, Tensor::of(out, {1, 1, cx}), Tensor::of(&position, {1}), /*inverse=*/false);
  ++st.count;
}

// Per-call scratch of one layer's attention over R rows.
template <class T>
struct AttentionScratch {
  kernels::Array<T> q_lora, q_lora_inv, c_q, q_raw, q, q_inv, kv_raw, kv, kv_inv;
  kernels::Array<T> comp_proj, comp_gate;
  kernels::Array<T> index_q, index_weights, index_proj, index_gate;
  kernels::Array<T> o, z;
};

}  // namespace

template <class T>
struct Decoder<T>::Impl {
  // A model whose weights are stored as bf16 is decoded once for the
  // decoder's lifetime (generation reads every layer per token); null when
  // the model's store is fp32 and the decoder reads it in place.
  std::unique_ptr<ParamStore<T>> decoded;
  const ParamStore<T>& params() const { return decoded ? *decoded : model->params(); }
  const Model<T>* model = nullptr;
  kernels::OpContext ctx;  // the model's backend, GEMMs in fp32
  std::vector<LayerWeights<T>> layers;
  std::vector<kernels::RopeTable> rope;  // per layer (base / YaRN differ by kind)
  int64_t rope_positions = 0;
  std::vector<SequenceState<T>> sequences;
  std::vector<int64_t> free_handles;

  // Per-call scratch from the backend (reused while the row count stays).
  kernels::Array<T> x, x_next, u, inv, normed, y, x_mid;
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
  const kernels::Backend& ops = ctx.ops();
  const kernels::LinearOptions linear{ctx.precision};
  AttentionScratch<T>& s = scratch;
  const int64_t R = static_cast<int64_t>(positions.size());
  const int64_t H = d.heads, c = d.head_dim, hc = H * c, dc = d.q_lora, hidden = d.hidden;
  const Tensor rows_a = Tensor::of(a, {R, hidden});
  const Tensor row_positions = Tensor::of(positions.data(), {R});

  // Per-token projections over all rows, as attention_forward computes them.
  s.q_lora.resize(R * dc, ops);
  s.q_lora_inv.resize(R, ops);
  s.c_q.resize(R * dc, ops);
  ops.linear_forward(rows_a, Tensor::of(w.wq_a, {dc, hidden}), s.q_lora.view({R, dc}), linear);
  ops.rmsnorm_forward(s.q_lora.view({R, dc}), Tensor::of(w.q_norm, {dc}), s.c_q.view({R, dc}),
                      s.q_lora_inv.view({R}), d.eps);
  s.q_raw.resize(R * hc, ops);
  s.q.resize(R * hc, ops);
  s.q_inv.resize(R * H, ops);
  ops.linear_forward(s.c_q.view({R, dc}), Tensor::of(w.wq_b, {hc, dc}), s.q_raw.view({R, hc}),
                     linear);
  ops.rmsnorm_forward(s.q_raw.view({R * H, c}), Tensor(), s.q.view({R * H, c}),
                      s.q_inv.view({R * H}), d.eps);
  ops.rope(table, s.q.view({R, H, c}), row_positions, false);
  s.kv_raw.resize(R * c, ops);
  s.kv.resize(R * c, ops);
  s.kv_inv.resize(R, ops);
  ops.linear_forward(rows_a, Tensor::of(w.wkv, {c, hidden}), s.kv_raw.view({R, c}), linear);
  ops.rmsnorm_forward(s.kv_raw.view({R, c}), Tensor::of(w.kv_norm, {c}), s.kv.view({R, c}),
                      s.kv_inv.view({R}), d.eps);
  ops.rope(table, s.kv.view({R, 1, c}), row_positions, false);

  const CompressorDims cd = d.has_compressor() ? d.compressor() : CompressorDims{};
  if (d.has_compressor()) {
    const int64_t width = cd.proj_dim();
    s.comp_proj.resize(R * width, ops);
    s.comp_gate.resize(R * width, ops);
    ops.linear_forward(rows_a, Tensor::of(w.compressor.wkv, {width, hidden}),
                       s.comp_proj.view({R, width}), linear);
    ops.linear_forward(rows_a, Tensor::of(w.compressor.wgate, {width, hidden}),
                       s.comp_gate.view({R, width}), linear);
  }
  const IndexerDims id = d.has_indexer() ? d.indexer() : IndexerDims{};
  const CompressorDims icd = d.has_indexer() ? id.compressor() : CompressorDims{};
  const int64_t iq_dim = id.heads * id.head_dim;
  if (d.has_indexer()) {
    s.index_q.resize(R * iq_dim, ops);
    ops.linear_forward(s.c_q.view({R, dc}), Tensor::of(w.indexer.wq_b, {iq_dim, dc}),
                       s.index_q.view({R, iq_dim}), linear);
    ops.rope(table, s.index_q.view({R, id.heads, id.head_dim}), row_positions, false);
    s.index_weights.resize(R * id.heads, ops);
    ops.linear_forward(rows_a, Tensor::of(w.indexer.weights_proj, {id.heads, hidden}),
                       s.index_weights.view({R, id.heads}), linear);
    ops.scale(s.index_weights.view({R, id.heads}),
              1.0 / std::sqrt(static_cast<double>(id.head_dim) * static_cast<double>(id.heads)));
    const int64_t width = icd.proj_dim();
    s.index_proj.resize(R * width, ops);
    s.index_gate.resize(R * width, ops);
    ops.linear_forward(rows_a, Tensor::of(w.indexer.compressor.wkv, {width, hidden}),
                       s.index_proj.view({R, width}), linear);
    ops.linear_forward(rows_a, Tensor::of(w.indexer.compressor.wgate, {width, hidden}),
                       s.index_gate.view({R, width}), linear);
  }

  // Sequence by sequence (rows of one sequence in order: each reads the state its
  // predecessors left), sequences in parallel: they share nothing.
  s.o.assign(R * hc, T(0), ops);
  const int64_t n_groups = static_cast<int64_t>(groups.size());
  const int64_t window = d.window;
  // Rough multiply-adds of the core: below kParallelWork an OpenMP region costs more.
  const int64_t longest = *std::max_element(positions.begin(), positions.end()) + 1;
  const int64_t core_work =
      R * hc * (window + (d.has_compressor() ? longest / d.ratio : 0)) * (d.has_indexer() ? 2 : 1);
#pragma omp parallel for schedule(dynamic, 1) if (n_groups > 1 && core_work > kParallelWork)
  for (int64_t gi = 0; gi < n_groups; ++gi) {
    std::vector<T> keys;
    std::vector<int64_t> window_slots, selected;
    for (int64_t r : groups[static_cast<size_t>(gi)]) {
      LayerState<T>& st =
          sequences[static_cast<size_t>(seq_of_row[r])].layers[static_cast<size_t>(layer)];
      const int64_t t = positions[r];
      if (st.window.empty()) st.window.assign(static_cast<size_t>(window * c), T(0));
      ops.copy(Tensor::of(s.kv.data() + r * c, {c}),
               Tensor::of(st.window.data() + (t % window) * c, {c}));
      if (d.has_compressor())
        compressor_push(ops, cd, w.compressor, table, t, s.comp_proj.data() + r * cd.proj_dim(),
                        s.comp_gate.data() + r * cd.proj_dim(), st.compressor);
      if (d.has_indexer())
        compressor_push(ops, icd, w.indexer.compressor, table, t,
                        s.index_proj.data() + r * icd.proj_dim(),
                        s.index_gate.data() + r * icd.proj_dim(), st.indexer);

      // Keys: the window oldest first, then the compressed set.
      const int64_t ws = std::max<int64_t>(0, t - window + 1);
      window_slots.resize(static_cast<size_t>(t - ws + 1));
      std::iota(window_slots.begin(), window_slots.end(), ws);
      for (int64_t& slot : window_slots) slot %= window;
      selected.clear();
      if (d.has_indexer()) {
        const int64_t visible = std::min((t + 1) / d.ratio, st.indexer.count);
        if (visible > 0) {
          // The training forward's rule (ranks_before), so decoding selects
          // exactly the blocks the full forward selects, ties and NaN included.
          selected.resize(static_cast<size_t>(std::min(id.topk, visible)));
          ops.decode_indexer_select(
              Tensor::of(s.index_q.data() + r * iq_dim, {id.heads, id.head_dim}),
              Tensor::of(s.index_weights.data() + r * id.heads, {id.heads}),
              Tensor::of(st.indexer.entries.data(), {visible, id.head_dim}),
              Tensor::of(selected.data(), {static_cast<int64_t>(selected.size())}));
        }
      } else if (d.has_compressor()) {
        const int64_t visible = std::min((t + 1) / d.ratio, st.compressor.count);
        selected.resize(static_cast<size_t>(visible));
        std::iota(selected.begin(), selected.end(), int64_t{0});
      }
      const int64_t n_window = static_cast<int64_t>(window_slots.size());
      const int64_t n_compressed = static_cast<int64_t>(selected.size());
      keys.resize(static_cast<size_t>((n_window + n_compressed) * c));
      ops.gather_rows(Tensor::of(st.window.data(), {window, c}),
                      Tensor::of(window_slots.data(), {n_window}),
                      Tensor::of(keys.data(), {n_window, c}));
      if (n_compressed > 0)
        ops.gather_rows(Tensor::of(st.compressor.entries.data(), {st.compressor.count, c}),
                        Tensor::of(selected.data(), {n_compressed}),
                        Tensor::of(keys.data() + n_window * c, {n_compressed, c}));
      ops.decode_attention(Tensor::of(s.q.data() + r * hc, {H, c}),
                           Tensor::of(keys.data(), {n_window + n_compressed, c}),
                           Tensor::of(w.attn_sink, {H}), Tensor::of(s.o.data() + r * hc, {H, c}));
    }
  }

  // Inverse RoPE at the query position, grouped low-rank output projection.
  ops.rope(table, s.o.view({R, H, c}), row_positions, true);
  const int64_t g = d.o_groups, dg = d.o_lora, group_in = hc / g;
  s.z.assign(R * g * dg, T(0), ops);
  ops.grouped_linear_forward(g, s.o.view({R, hc}), Tensor::of(w.wo_a, {g * dg, group_in}),
                             s.z.view({R, g * dg}), ctx.precision);
  ops.linear_forward(s.z.view({R, g * dg}), Tensor::of(w.wo_b, {hidden, g * dg}),
                     Tensor::of(out, {R, hidden}), linear);
}

template <class T>
Decoder<T>::Decoder(const Model<T>& model) : impl_(std::make_unique<Impl>()) {
  const ModelConfig& c = model.config();
  impl_->model = &model;
  impl_->ctx = {model.op_context().backend, kPrecision};
  if (model.params().storage() != model::ParamStorage::kF32) {
    const ParamStore<T>& stored = model.params();
    impl_->decoded = std::make_unique<ParamStore<T>>(stored.specs());
    stored.read(0, stored.size(), impl_->decoded->values().data());
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    impl_->layers.push_back(bind_layer(c, impl_->params(), model.hash_tables(), l));
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
  const ParamStore<T>& params = im.params();
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
  const kernels::Backend& ops = im.ctx.ops();
  const Tensor token_ids = Tensor::of(tokens.data(), {R});
  im.x.resize(R * n * d, ops);
  ops.gather_rows(Tensor::of(params.value("embed.weight"), {V, d}), token_ids,
                  im.x.view({R, n, d}));
  im.x_next.resize(R * n * d, ops);
  im.x_mid.resize(R * n * d, ops);
  im.u.resize(R * d, ops);
  im.inv.resize(R, ops);
  im.normed.resize(R * d, ops);
  im.y.resize(R * d, ops);
  const MhcDims md = mhc_dims(c, R);
  for (int64_t l = 0; l < static_cast<int64_t>(im.layers.size()); ++l) {
    const LayerWeights<T>& lw = im.layers[static_cast<size_t>(l)];
    mhc_pre_forward(md, lw.attn_hc, im.x.data(), im.u.data(), im.mhc, im.ctx);
    ops.rmsnorm_forward(im.u.view({R, d}), Tensor::of(lw.attn_norm, {d}), im.normed.view({R, d}),
                        im.inv.view({R}), c.rms_norm_eps);
    im.attention(l, im.normed.data(), sequences, positions, groups, im.y.data());
    mhc_post_forward(md, im.mhc, im.x.data(), im.y.data(), im.x_mid.data(), im.ctx);
    mhc_pre_forward(md, lw.ffn_hc, im.x_mid.data(), im.u.data(), im.mhc, im.ctx);
    ops.rmsnorm_forward(im.u.view({R, d}), Tensor::of(lw.ffn_norm, {d}), im.normed.view({R, d}),
                        im.inv.view({R}), c.rms_norm_eps);
    moe_forward(moe_dims(c, l, 1, R), lw.moe, im.normed.data(), tokens.data(), im.moe, im.y.data(),
                /*fixed_selection=*/false, static_cast<TokenDispatcher<T>*>(nullptr), im.ctx);
    mhc_post_forward(md, im.mhc, im.x_mid.data(), im.y.data(), im.x_next.data(), im.ctx);
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
  kernels::Array<T> xq(Q * n * d, ops), hq(Q * d, ops), hn(Q * d, ops), inv(Q, ops);
  ops.gather_rows(im.x.view({R, n * d}), Tensor::of(rows.data(), {Q}), xq.view({Q, n * d}));
  const HcHeadWeights<T> head_w{params.value("hc_head_fn"), params.value("hc_head_base"),
                                params.value("hc_head_scale")};
  hc_head_forward(mhc_dims(c, Q), head_w, xq.data(), hq.data(), im.head_cache, im.ctx);
  ops.rmsnorm_forward(hq.view({Q, d}), Tensor::of(params.value("norm.weight"), {d}),
                      hn.view({Q, d}), inv.view({Q}), c.rms_norm_eps);
  ops.linear_forward(hn.view({Q, d}), Tensor::of(params.value("head.weight"), {V, d}),
                     Tensor::of(logits, {Q, V}), {im.ctx.precision});
}

template class Decoder<float>;
template class Decoder<double>;

}  // namespace trex::infer
