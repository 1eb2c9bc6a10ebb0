#include "trex/model/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"

namespace trex::model {

using kernels::Tensor;

AttentionDims AttentionDims::from_config(const ModelConfig& config, int64_t layer) {
  const int64_t layers = static_cast<int64_t>(config.compress_ratios.size());
  if (layer < 0 || layer >= layers)
    throw Error("layer " + std::to_string(layer) + " has no compress_ratios entry (" +
                std::to_string(layers) + " entries)")
        .field("compress_ratios");
  AttentionDims d;
  d.hidden = config.hidden_size;
  d.heads = config.num_attention_heads;
  d.head_dim = config.head_dim;
  d.rope_dim = config.qk_rope_head_dim;
  d.q_lora = config.q_lora_rank;
  d.o_groups = config.o_groups;
  d.o_lora = config.o_lora_rank;
  d.window = config.sliding_window;
  d.ratio = config.ratio(layer);
  d.eps = config.rms_norm_eps;
  if (d.ratio == 0) {
    d.rope_base = config.rope_theta;  // pure SWA: no YaRN
  } else {
    d.rope_base = config.compress_rope_theta;
    if (config.rope_scaling.yarn) {
      d.yarn = kernels::YarnScaling{config.rope_scaling.factor,
                                    config.rope_scaling.original_max_position_embeddings,
                                    config.rope_scaling.beta_fast, config.rope_scaling.beta_slow};
    }
  }
  if (d.ratio == 4) {
    d.index_heads = config.index_n_heads;
    d.index_head_dim = config.index_head_dim;
    d.index_topk = config.index_topk;
  }
  d.validate();
  return d;
}

AttentionKind AttentionDims::kind() const {
  if (ratio == 0) return AttentionKind::kSliding;
  return ratio == 4 ? AttentionKind::kCompressedSparse : AttentionKind::kHeavilyCompressed;
}

CompressorDims AttentionDims::compressor() const {
  return {hidden, ratio, head_dim, rope_dim, ratio == 4, eps};
}

IndexerDims AttentionDims::indexer() const {
  return {hidden, q_lora, index_heads, index_head_dim, rope_dim, ratio, index_topk, eps};
}

void AttentionDims::validate() const {
  if (hidden <= 0) throw Error("must be positive").field("hidden_size");
  if (heads <= 0) throw Error("must be positive").field("num_attention_heads");
  if (head_dim <= 0) throw Error("must be positive").field("head_dim");
  if (rope_dim <= 0 || rope_dim % 2 != 0 || rope_dim > head_dim)
    throw Error("must be even, positive and <= head_dim").field("qk_rope_head_dim");
  if (q_lora <= 0) throw Error("must be positive").field("q_lora_rank");
  if (o_groups <= 0 || heads % o_groups != 0)
    throw Error("must divide num_attention_heads").field("o_groups");
  if (o_lora <= 0) throw Error("must be positive").field("o_lora_rank");
  if (window <= 0) throw Error("must be positive").field("sliding_window");
  if (ratio < 0) throw Error("must be >= 0").field("compress_ratios");
  if (!(rope_base > 1.0))
    throw Error("must be > 1").field(ratio ? "compress_rope_theta" : "rope_theta");
  if (ratio == 4) indexer().validate();
}

namespace {

template <class T>
void require_weights(const AttentionDims& dims, const AttentionWeights<T>& w) {
  auto need = [](const void* p, const char* name) {
    if (!p) throw Error("missing attention weight").field(name);
  };
  need(w.wq_a, "attn.wq_a.weight");
  need(w.q_norm, "attn.q_norm.weight");
  need(w.wq_b, "attn.wq_b.weight");
  need(w.wkv, "attn.wkv.weight");
  need(w.kv_norm, "attn.kv_norm.weight");
  need(w.wo_a, "attn.wo_a.weight");
  need(w.wo_b, "attn.wo_b.weight");
  need(w.attn_sink, "attn.attn_sink");
  if (dims.has_compressor()) {
    need(w.compressor.wkv, "attn.compressor.wkv.weight");
    need(w.compressor.wgate, "attn.compressor.wgate.weight");
    need(w.compressor.ape, "attn.compressor.ape");
    need(w.compressor.norm, "attn.compressor.norm.weight");
  }
  if (dims.has_indexer()) {
    need(w.indexer.wq_b, "attn.indexer.wq_b.weight");
    need(w.indexer.weights_proj, "attn.indexer.weights_proj.weight");
    need(w.indexer.compressor.wkv, "attn.indexer.compressor.wkv.weight");
    need(w.indexer.compressor.wgate, "attn.indexer.compressor.wgate.weight");
    need(w.indexer.compressor.ape, "attn.indexer.compressor.ape");
    need(w.indexer.compressor.norm, "attn.indexer.compressor.norm.weight");
  }
}

// The key sets of every query row (kernels::AttentionKeyTensors).
template <class T>
kernels::AttentionKeyTensors key_tensors(const AttentionCache<T>& cache, int64_t N, int64_t c) {
  return {
      Tensor::of(cache.kv.data(), {N, c}),
      Tensor::of(cache.compressed.data(), {static_cast<int64_t>(cache.compressed.size()) / c, c}),
      Tensor::of(cache.comp_offsets.data(), {N + 1}),
      Tensor::of(cache.comp_list.data(), {static_cast<int64_t>(cache.comp_list.size())}),
      Tensor::of(cache.prob_offsets.data(), {N + 1})};
}

}  // namespace

template <class T>
std::vector<int64_t> attention_compressed_set(const AttentionDims& dims,
                                              const AttentionCache<T>& cache, int64_t b,
                                              int64_t t) {
  const int64_t row = b * cache.shape.S + t;
  const int64_t blocks = dims.has_compressor() ? dims.compressor().blocks(cache.shape.S) : 0;
  std::vector<int64_t> set;
  for (int64_t k = cache.comp_offsets[row]; k < cache.comp_offsets[row + 1]; ++k)
    set.push_back(cache.comp_list[k] - b * blocks);
  return set;
}

template <class T>
double attention_forward(const AttentionDims& dims, const AttentionWeights<T>& w,
                         const SeqShape& shape, const T* a, AttentionCache<T>& cache, T* out,
                         const AttentionOptions& options, const kernels::OpContext& ctx) {
  dims.validate();
  require_weights(dims, w);
  if (shape.B < 0 || shape.S < 0) throw Error("negative batch shape").field("shape");
  if (options.compute_indexer_loss && !dims.has_indexer())
    throw Error("the indexer loss needs a CSA layer (ratio 4)").field("compute_indexer_loss");
  const int64_t N = shape.tokens();
  const int64_t H = dims.heads;
  const int64_t c = dims.head_dim;
  const int64_t hc = H * c;
  const int64_t dc = dims.q_lora;
  cache.shape = shape;
  cache.options = options;
  cache.indexer_loss = 0.0;
  cache.rope =
      kernels::RopeTable(dims.rope_dim, dims.rope_base, std::max<int64_t>(shape.S, 1), dims.yarn);
  cache.positions.resize(static_cast<size_t>(N));
  for (int64_t r = 0; r < N; ++r) cache.positions[r] = r % shape.S;
  cache.a.assign(a, a + N * dims.hidden);
  if (N == 0) return 0.0;
  const kernels::Backend& ops = ctx.ops();
  const kernels::LinearOptions linear{ctx.precision};
  const int64_t d = dims.hidden;
  const Tensor positions = Tensor::of(cache.positions.data(), {N});

  // Query path: c_Q = RMSNorm(a W_qaᵀ); q = per-head unweighted RMSNorm(c_Q W_qbᵀ); RoPE.
  cache.q_lora.resize(static_cast<size_t>(N * dc));
  cache.q_lora_inv.resize(static_cast<size_t>(N));
  cache.c_q.resize(cache.q_lora.size());
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_flops(N, dc, dims.hidden));
    ops.linear_forward(Tensor::of(a, {N, d}), Tensor::of(w.wq_a, {dc, d}),
                       Tensor::of(cache.q_lora.data(), {N, dc}), linear);
  }
  ops.rmsnorm_forward(Tensor::of(cache.q_lora.data(), {N, dc}), Tensor::of(w.q_norm, {dc}),
                      Tensor::of(cache.c_q.data(), {N, dc}),
                      Tensor::of(cache.q_lora_inv.data(), {N}), dims.eps);
  cache.q_raw.resize(static_cast<size_t>(N * hc));
  cache.q_inv.resize(static_cast<size_t>(N * H));
  cache.q.resize(cache.q_raw.size());
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_flops(N, hc, dc));
    ops.linear_forward(Tensor::of(cache.c_q.data(), {N, dc}), Tensor::of(w.wq_b, {hc, dc}),
                       Tensor::of(cache.q_raw.data(), {N, hc}), linear);
  }
  ops.rmsnorm_forward(Tensor::of(cache.q_raw.data(), {N * H, c}), Tensor(),
                      Tensor::of(cache.q.data(), {N * H, c}),
                      Tensor::of(cache.q_inv.data(), {N * H}), dims.eps);
  ops.rope(cache.rope, Tensor::of(cache.q.data(), {N, H, c}), positions, false);

  // Shared K=V latent.
  cache.kv_raw.resize(static_cast<size_t>(N * c));
  cache.kv_inv.resize(static_cast<size_t>(N));
  cache.kv.resize(cache.kv_raw.size());
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_flops(N, c, dims.hidden));
    ops.linear_forward(Tensor::of(a, {N, d}), Tensor::of(w.wkv, {c, d}),
                       Tensor::of(cache.kv_raw.data(), {N, c}), linear);
  }
  ops.rmsnorm_forward(Tensor::of(cache.kv_raw.data(), {N, c}), Tensor::of(w.kv_norm, {c}),
                      Tensor::of(cache.kv.data(), {N, c}), Tensor::of(cache.kv_inv.data(), {N}),
                      dims.eps);
  ops.rope(cache.rope, Tensor::of(cache.kv.data(), {N, 1, c}), positions, false);

  // Compressed entries and the compressed key set of every query.
  int64_t blocks = 0;
  cache.compressed.clear();
  if (dims.has_compressor()) {
    const CompressorDims cdims = dims.compressor();
    blocks = cdims.blocks(shape.S);
    cache.compressed.assign(static_cast<size_t>(shape.B * blocks * c), T(0));
    compressor_forward(cdims, w.compressor, shape, a, cache.rope, cache.compressor,
                       cache.compressed.data(), ctx);
  }
  if (dims.has_indexer()) {
    const bool need_scores = !options.fixed_selection || options.compute_indexer_loss;
    if (need_scores) {
      indexer_forward(dims.indexer(), w.indexer, shape, a, cache.c_q.data(), cache.rope,
                      cache.indexer, options.fixed_selection, ctx);
    } else if (cache.indexer.selected.size() != static_cast<size_t>(N * dims.index_topk)) {
      throw Error("fixed_selection without a stored selection for this shape")
          .field("indexer.selected");
    }
  }
  cache.comp_offsets.assign(static_cast<size_t>(N + 1), 0);
  cache.comp_list.clear();
  for (int64_t r = 0; r < N; ++r) {
    const int64_t b = r / shape.S;
    const int64_t t = r % shape.S;
    if (dims.has_indexer()) {
      for (int64_t k = 0; k < dims.index_topk; ++k) {
        const int64_t i = cache.indexer.selected[r * dims.index_topk + k];
        if (i < 0) continue;
        if (i >= visible_blocks(t, dims.ratio, blocks))
          throw Error("selected compressed entry is not visible").field("indexer.selected");
        cache.comp_list.push_back(b * blocks + i);
      }
    } else if (dims.has_compressor()) {
      const int64_t visible = visible_blocks(t, dims.ratio, blocks);
      for (int64_t i = 0; i < visible; ++i) cache.comp_list.push_back(b * blocks + i);
    }
    cache.comp_offsets[r + 1] = static_cast<int64_t>(cache.comp_list.size());
  }
  cache.prob_offsets.assign(static_cast<size_t>(N + 1), 0);
  for (int64_t r = 0; r < N; ++r) {
    const int64_t keys = (r % shape.S - cache.window_start(r, dims.window) + 1) +
                         (cache.comp_offsets[r + 1] - cache.comp_offsets[r]);
    cache.prob_offsets[r + 1] = cache.prob_offsets[r] + H * keys;
  }

  // Core: per query token, gather window + compressed keys; softmax with sink.
  const int64_t probs = cache.prob_offsets[N];
  cache.prob.assign(static_cast<size_t>(probs), T(0));
  cache.sink_prob.assign(static_cast<size_t>(N * H), T(0));
  cache.o.assign(static_cast<size_t>(N * hc), T(0));
  const kernels::AttentionCoreDims core{shape.S, dims.window};
  ops.attention_core_forward(core, Tensor::of(cache.q.data(), {N, H, c}), key_tensors(cache, N, c),
                             Tensor::of(w.attn_sink, {H}), Tensor::of(cache.prob.data(), {probs}),
                             Tensor::of(cache.sink_prob.data(), {N, H}),
                             Tensor::of(cache.o.data(), {N, H, c}));

  // Inverse RoPE at the query position, then the grouped low-rank projection.
  cache.o_rot = cache.o;
  ops.rope(cache.rope, Tensor::of(cache.o_rot.data(), {N, H, c}), positions, true);
  const int64_t g = dims.o_groups;
  const int64_t dg = dims.o_lora;
  const int64_t group_in = hc / g;
  cache.z.assign(static_cast<size_t>(N * g * dg), T(0));
  TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_flops(N, g * dg, group_in) +
                                               profile::linear_flops(N, dims.hidden, g * dg));
  ops.grouped_linear_forward(g, Tensor::of(cache.o_rot.data(), {N, hc}),
                             Tensor::of(w.wo_a, {g * dg, group_in}),
                             Tensor::of(cache.z.data(), {N, g * dg}), ctx.precision);
  ops.linear_forward(Tensor::of(cache.z.data(), {N, g * dg}), Tensor::of(w.wo_b, {d, g * dg}),
                     Tensor::of(out, {N, d}), linear);

  if (options.compute_indexer_loss) {
    TREX_PROFILE(profile::Op::kIndexer);
    // Target: main attention probabilities summed over heads on the selected
    // compressed entries, L1-normalised per query.
    const int64_t k_max = dims.index_topk;
    std::vector<T> target(static_cast<size_t>(N * k_max), T(0));
    ops.attention_selected_mass(core, H, Tensor::of(cache.prob.data(), {probs}),
                                Tensor::of(cache.prob_offsets.data(), {N + 1}),
                                Tensor::of(cache.comp_offsets.data(), {N + 1}),
                                Tensor::of(cache.indexer.selected.data(), {N, k_max}),
                                Tensor::of(target.data(), {N, k_max}));
    cache.indexer_loss = indexer_loss(dims.indexer(), shape, target.data(), cache.indexer, ctx);
  }
  return cache.indexer_loss;
}

template <class T>
void attention_backward(const AttentionDims& dims, const AttentionWeights<T>& w,
                        const AttentionCache<T>& cache, const T* dout, AttentionGrads<T>& grads,
                        T* da, const kernels::OpContext& ctx) {
  const SeqShape& shape = cache.shape;
  const int64_t N = shape.tokens();
  const int64_t H = dims.heads;
  const int64_t c = dims.head_dim;
  const int64_t hc = H * c;
  const int64_t dc = dims.q_lora;
  const int64_t g = dims.o_groups;
  const int64_t dg = dims.o_lora;
  const int64_t group_in = hc / g;
  if (N == 0) return;
  const kernels::Backend& ops = ctx.ops();
  const kernels::LinearOptions linear{ctx.precision};
  const kernels::LinearOptions accumulate{ctx.precision, true};
  const int64_t d = dims.hidden;
  const Tensor positions = Tensor::of(cache.positions.data(), {N});

  // Output projections.
  std::vector<T> dz(static_cast<size_t>(N * g * dg), T(0));
  std::vector<T> d_o(static_cast<size_t>(N * hc), T(0));
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj,
                 profile::linear_backward_flops(N, dims.hidden, g * dg) +
                     profile::linear_backward_flops(N, g * dg, group_in));
    ops.linear_backward(Tensor::of(cache.z.data(), {N, g * dg}), Tensor::of(w.wo_b, {d, g * dg}),
                        Tensor::of(dout, {N, d}), Tensor::of(dz.data(), {N, g * dg}),
                        Tensor::optional(grads.wo_b, {d, g * dg}), linear);
    ops.grouped_linear_backward(g, Tensor::of(cache.o_rot.data(), {N, hc}),
                                Tensor::of(w.wo_a, {g * dg, group_in}),
                                Tensor::of(dz.data(), {N, g * dg}), Tensor::of(d_o.data(), {N, hc}),
                                Tensor::optional(grads.wo_a, {g * dg, group_in}), ctx.precision);
  }
  // Backward of the inverse rotation is the forward rotation.
  ops.rope(cache.rope, Tensor::of(d_o.data(), {N, H, c}), positions, false);

  // The core: dq, dkv (window keys), dcompressed, the sink gradient.
  std::vector<T> dq(static_cast<size_t>(N * hc), T(0));
  std::vector<T> dkv(static_cast<size_t>(N * c), T(0));
  std::vector<T> dcompressed(cache.compressed.size(), T(0));
  ops.attention_core_backward(
      kernels::AttentionCoreDims{shape.S, dims.window}, Tensor::of(cache.q.data(), {N, H, c}),
      key_tensors(cache, N, c), Tensor::of(cache.prob.data(), {cache.prob_offsets[N]}),
      Tensor::of(cache.sink_prob.data(), {N, H}), Tensor::of(cache.o.data(), {N, H, c}),
      Tensor::of(d_o.data(), {N, H, c}), Tensor::of(dq.data(), {N, H, c}),
      Tensor::of(dkv.data(), {N, c}),
      Tensor::of(dcompressed.data(), {static_cast<int64_t>(dcompressed.size()) / c, c}),
      Tensor::optional(grads.attn_sink, {H}));

  // Query path back to a (da written here).
  ops.rope(cache.rope, Tensor::of(dq.data(), {N, H, c}), positions, true);
  ops.rmsnorm_backward(Tensor::of(cache.q_raw.data(), {N * H, c}), Tensor(),
                       Tensor::of(cache.q_inv.data(), {N * H}), Tensor::of(dq.data(), {N * H, c}),
                       Tensor::of(dq.data(), {N * H, c}), Tensor());
  std::vector<T> dcq(static_cast<size_t>(N * dc), T(0));
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_backward_flops(N, hc, dc));
    ops.linear_backward(Tensor::of(cache.c_q.data(), {N, dc}), Tensor::of(w.wq_b, {hc, dc}),
                        Tensor::of(dq.data(), {N, hc}), Tensor::of(dcq.data(), {N, dc}),
                        Tensor::optional(grads.wq_b, {hc, dc}), linear);
  }
  ops.rmsnorm_backward(Tensor::of(cache.q_lora.data(), {N, dc}), Tensor::of(w.q_norm, {dc}),
                       Tensor::of(cache.q_lora_inv.data(), {N}), Tensor::of(dcq.data(), {N, dc}),
                       Tensor::of(dcq.data(), {N, dc}), Tensor::optional(grads.q_norm, {dc}));
  std::vector<T> da_local;
  T* da_out = da;
  if (!da_out) {
    da_local.assign(static_cast<size_t>(N * dims.hidden), T(0));
    da_out = da_local.data();
  }
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_backward_flops(N, dc, dims.hidden));
    ops.linear_backward(Tensor::of(cache.a.data(), {N, d}), Tensor::of(w.wq_a, {dc, d}),
                        Tensor::of(dcq.data(), {N, dc}), Tensor::of(da_out, {N, d}),
                        Tensor::optional(grads.wq_a, {dc, d}), linear);
  }
  // KV path.
  ops.rope(cache.rope, Tensor::of(dkv.data(), {N, 1, c}), positions, true);
  ops.rmsnorm_backward(Tensor::of(cache.kv_raw.data(), {N, c}), Tensor::of(w.kv_norm, {c}),
                       Tensor::of(cache.kv_inv.data(), {N}), Tensor::of(dkv.data(), {N, c}),
                       Tensor::of(dkv.data(), {N, c}), Tensor::optional(grads.kv_norm, {c}));
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_backward_flops(N, c, dims.hidden));
    ops.linear_backward(Tensor::of(cache.a.data(), {N, d}), Tensor::of(w.wkv, {c, d}),
                        Tensor::of(dkv.data(), {N, c}), Tensor::of(da_out, {N, d}),
                        Tensor::optional(grads.wkv, {c, d}), accumulate);
  }
  // Compressed branch (only entries some query attended to carry gradient).
  if (dims.has_compressor())
    compressor_backward(dims.compressor(), w.compressor, shape, cache.a.data(), cache.rope,
                        cache.compressor, dcompressed.data(), grads.compressor, da_out, ctx);
  // Indexer: trained only by its own loss, inputs detached.
  if (dims.has_indexer() && cache.options.compute_indexer_loss)
    indexer_backward(dims.indexer(), w.indexer, shape, cache.a.data(), cache.c_q.data(), cache.rope,
                     cache.indexer, static_cast<T>(cache.options.indexer_loss_weight),
                     grads.indexer, ctx);
}

#define TREX_INSTANTIATE_ATTENTION(T)                                                             \
  template double attention_forward<T>(const AttentionDims&, const AttentionWeights<T>&,          \
                                       const SeqShape&, const T*, AttentionCache<T>&, T*,         \
                                       const AttentionOptions&, const kernels::OpContext&);       \
  template void attention_backward<T>(const AttentionDims&, const AttentionWeights<T>&,           \
                                      const AttentionCache<T>&, const T*, AttentionGrads<T>&, T*, \
                                      const kernels::OpContext&);                                 \
  template std::vector<int64_t> attention_compressed_set<T>(                                      \
      const AttentionDims&, const AttentionCache<T>&, int64_t, int64_t);
TREX_INSTANTIATE_ATTENTION(float)
TREX_INSTANTIATE_ATTENTION(double)
#undef TREX_INSTANTIATE_ATTENTION

}  // namespace trex::model
