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

kernels::AttentionKeySetDims key_set_dims(const AttentionDims& dims, const SeqShape& shape) {
  kernels::AttentionKeySetDims k;
  k.core = {shape.S, dims.window};
  k.heads = dims.heads;
  k.compressed = dims.has_compressor();
  k.ratio = dims.ratio;
  k.blocks = k.compressed ? dims.compressor().blocks(shape.S) : 0;
  return k;
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
  return {cache.kv.view({N, c}), cache.compressed.view({cache.compressed.size() / c, c}),
          cache.comp_offsets.view({N + 1}), cache.comp_list.view({cache.comp_list.size()}),
          cache.prob_offsets.view({N + 1})};
}

}  // namespace

template <class T>
std::vector<int64_t> attention_compressed_set(const AttentionDims& dims,
                                              const AttentionCache<T>& cache, int64_t b,
                                              int64_t t) {
  const int64_t row = b * cache.shape.S + t;
  const int64_t blocks = dims.has_compressor() ? dims.compressor().blocks(cache.shape.S) : 0;
  if (!cache.comp_offsets.backend() || row < 0 || row + 1 >= cache.comp_offsets.size())
    throw Error("no key set for row " + std::to_string(row) + " (run attention_forward first)")
        .field("cache");
  const kernels::Backend& ops = *cache.comp_offsets.backend();
  int64_t range[2];
  ops.copy_to_host(Tensor::of(cache.comp_offsets.data() + row, {2}, cache.comp_offsets.device()),
                   range);
  std::vector<int64_t> set(static_cast<size_t>(range[1] - range[0]));
  ops.copy_to_host(Tensor::of(cache.comp_list.data() + range[0], {range[1] - range[0]},
                              cache.comp_list.device()),
                   set.data());
  // Entry rows of sequence b -> its block numbers.
  std::transform(set.begin(), set.end(), set.begin(), [&](int64_t e) { return e - b * blocks; });
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
  const kernels::Backend& ops = ctx.ops();
  const int64_t d = dims.hidden;
  cache.positions.resize(N, ops);
  ops.sequence_positions(cache.positions.view({N}), std::max<int64_t>(shape.S, 1), 1);
  cache.a.resize(N * d, ops);
  ops.copy(Tensor::of(a, {N, d}), cache.a.view({N, d}));
  if (N == 0) return 0.0;
  const kernels::LinearOptions linear{ctx.precision};
  const Tensor positions = cache.positions.view({N});

  // Query path: c_Q = RMSNorm(a W_qaᵀ); q = per-head unweighted RMSNorm(c_Q W_qbᵀ); RoPE.
  cache.q_lora.resize(N * dc, ops);
  cache.q_lora_inv.resize(N, ops);
  cache.c_q.resize(N * dc, ops);
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_flops(N, dc, dims.hidden));
    ops.linear_forward(Tensor::of(a, {N, d}), Tensor::of(w.wq_a, {dc, d}),
                       cache.q_lora.view({N, dc}), linear);
  }
  ops.rmsnorm_forward(cache.q_lora.view({N, dc}), Tensor::of(w.q_norm, {dc}),
                      cache.c_q.view({N, dc}), cache.q_lora_inv.view({N}), dims.eps);
  cache.q_raw.resize(N * hc, ops);
  cache.q_inv.resize(N * H, ops);
  cache.q.resize(N * hc, ops);
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_flops(N, hc, dc));
    ops.linear_forward(cache.c_q.view({N, dc}), Tensor::of(w.wq_b, {hc, dc}),
                       cache.q_raw.view({N, hc}), linear);
  }
  ops.rmsnorm_forward(cache.q_raw.view({N * H, c}), Tensor(), cache.q.view({N * H, c}),
                      cache.q_inv.view({N * H}), dims.eps);
  ops.rope(cache.rope, cache.q.view({N, H, c}), positions, false);

  // Shared K=V latent.
  cache.kv_raw.resize(N * c, ops);
  cache.kv_inv.resize(N, ops);
  cache.kv.resize(N * c, ops);
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_flops(N, c, dims.hidden));
    ops.linear_forward(Tensor::of(a, {N, d}), Tensor::of(w.wkv, {c, d}), cache.kv_raw.view({N, c}),
                       linear);
  }
  ops.rmsnorm_forward(cache.kv_raw.view({N, c}), Tensor::of(w.kv_norm, {c}), cache.kv.view({N, c}),
                      cache.kv_inv.view({N}), dims.eps);
  ops.rope(cache.rope, cache.kv.view({N, 1, c}), positions, false);

  // Compressed entries and the compressed key set of every query.
  const int64_t blocks = dims.has_compressor() ? dims.compressor().blocks(shape.S) : 0;
  cache.compressed.assign(shape.B * blocks * c, T(0), ops);  // empty without a compressor
  if (dims.has_compressor())
    compressor_forward(dims.compressor(), w.compressor, shape, a, cache.rope, cache.compressor,
                       cache.compressed.data(), ctx);
  if (dims.has_indexer()) {
    const bool need_scores = !options.fixed_selection || options.compute_indexer_loss;
    if (need_scores) {
      indexer_forward(dims.indexer(), w.indexer, shape, a, cache.c_q.data(), cache.rope,
                      cache.indexer, options.fixed_selection, ctx);
    } else if (cache.indexer.selected.size() != N * dims.index_topk) {
      throw Error("fixed_selection without a stored selection for this shape")
          .field("indexer.selected");
    }
  }
  // The compressed key sets: first their sizes (comp_offsets, prob_offsets),
  // then the entries.
  const kernels::AttentionKeySetDims key_dims = key_set_dims(dims, shape);
  const Tensor selected =
      dims.has_indexer() ? cache.indexer.selected.view({N, dims.index_topk}) : Tensor();
  if (selected.defined() && ops.first_invisible_selection(key_dims, selected) >= 0)
    throw Error("selected compressed entry is not visible").field("indexer.selected");
  cache.comp_offsets.resize(N + 1, ops);
  cache.prob_offsets.resize(N + 1, ops);
  const kernels::AttentionKeySetSizes sizes = ops.attention_key_offsets(
      key_dims, selected, cache.comp_offsets.view({N + 1}), cache.prob_offsets.view({N + 1}));
  cache.comp_list.resize(sizes.compressed_keys, ops);
  ops.attention_compressed_keys(key_dims, selected, cache.comp_offsets.view({N + 1}),
                                cache.comp_list.view({sizes.compressed_keys}));

  // Core: per query token, gather window + compressed keys; softmax with sink.
  const int64_t probs = sizes.probabilities;
  cache.prob_count = probs;
  cache.prob.assign(probs, T(0), ops);
  cache.sink_prob.assign(N * H, T(0), ops);
  cache.o.assign(N * hc, T(0), ops);
  const kernels::AttentionCoreDims core{shape.S, dims.window, ctx.precision};
  ops.attention_core_forward(core, cache.q.view({N, H, c}), key_tensors(cache, N, c),
                             Tensor::of(w.attn_sink, {H}), cache.prob.view({probs}),
                             cache.sink_prob.view({N, H}), cache.o.view({N, H, c}));

  // Inverse RoPE at the query position, then the grouped low-rank projection.
  cache.o_rot.resize(N * hc, ops);
  ops.copy(cache.o.view({N * hc}), cache.o_rot.view({N * hc}));
  ops.rope(cache.rope, cache.o_rot.view({N, H, c}), positions, true);
  const int64_t g = dims.o_groups;
  const int64_t dg = dims.o_lora;
  const int64_t group_in = hc / g;
  cache.z.assign(N * g * dg, T(0), ops);
  TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_flops(N, g * dg, group_in) +
                                               profile::linear_flops(N, dims.hidden, g * dg));
  ops.grouped_linear_forward(g, cache.o_rot.view({N, hc}), Tensor::of(w.wo_a, {g * dg, group_in}),
                             cache.z.view({N, g * dg}), ctx.precision);
  ops.linear_forward(cache.z.view({N, g * dg}), Tensor::of(w.wo_b, {d, g * dg}),
                     Tensor::of(out, {N, d}), linear);

  if (options.compute_indexer_loss) {
    TREX_PROFILE(profile::Op::kIndexer);
    // Target: main attention probabilities summed over heads on the selected
    // compressed entries, L1-normalised per query.
    const int64_t k_max = dims.index_topk;
    kernels::Array<T> target(N * k_max, ops);
    ops.attention_selected_mass(core, H, cache.prob.view({probs}), cache.prob_offsets.view({N + 1}),
                                cache.comp_offsets.view({N + 1}),
                                cache.indexer.selected.view({N, k_max}), target.view({N, k_max}));
    cache.indexer_loss = indexer_loss(dims.indexer(), shape, target.data(), cache.indexer, ctx);
  }
  return cache.indexer_loss;
}

template <class T>
void attention_drop_recomputable(AttentionCache<T>& cache) {
  for (kernels::Array<T>* array : {&cache.a, &cache.c_q, &cache.q, &cache.kv, &cache.prob,
                                   &cache.sink_prob, &cache.o, &cache.o_rot})
    *array = kernels::Array<T>{};
}

template <class T>
void attention_rematerialize(const AttentionDims& dims, const AttentionWeights<T>& w, const T* a,
                             AttentionCache<T>& cache, const kernels::OpContext& ctx) {
  const SeqShape& shape = cache.shape;
  const int64_t N = shape.tokens(), H = dims.heads, c = dims.head_dim, hc = H * c;
  const int64_t dc = dims.q_lora, d = dims.hidden;
  const kernels::Backend& ops = ctx.ops();
  cache.a.resize(N * d, ops);
  ops.copy(Tensor::of(a, {N, d}), cache.a.view({N, d}));
  if (N == 0) return;
  const Tensor positions = cache.positions.view({N});
  // The forward's norms and rotations, on the kept projections.
  cache.c_q.resize(N * dc, ops);
  ops.rmsnorm_forward(cache.q_lora.view({N, dc}), Tensor::of(w.q_norm, {dc}),
                      cache.c_q.view({N, dc}), cache.q_lora_inv.view({N}), dims.eps);
  cache.q.resize(N * hc, ops);
  ops.rmsnorm_forward(cache.q_raw.view({N * H, c}), Tensor(), cache.q.view({N * H, c}),
                      cache.q_inv.view({N * H}), dims.eps);
  ops.rope(cache.rope, cache.q.view({N, H, c}), positions, false);
  cache.kv.resize(N * c, ops);
  ops.rmsnorm_forward(cache.kv_raw.view({N, c}), Tensor::of(w.kv_norm, {c}), cache.kv.view({N, c}),
                      cache.kv_inv.view({N}), dims.eps);
  ops.rope(cache.rope, cache.kv.view({N, 1, c}), positions, false);
  // The core, over the kept key sets.
  cache.prob.assign(cache.prob_count, T(0), ops);
  cache.sink_prob.assign(N * H, T(0), ops);
  cache.o.assign(N * hc, T(0), ops);
  const kernels::AttentionCoreDims core{shape.S, dims.window, ctx.precision};
  ops.attention_core_forward(core, cache.q.view({N, H, c}), key_tensors(cache, N, c),
                             Tensor::of(w.attn_sink, {H}), cache.prob.view({cache.prob_count}),
                             cache.sink_prob.view({N, H}), cache.o.view({N, H, c}));
  cache.o_rot.resize(N * hc, ops);
  ops.copy(cache.o.view({N * hc}), cache.o_rot.view({N * hc}));
  ops.rope(cache.rope, cache.o_rot.view({N, H, c}), positions, true);
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
  const Tensor positions = cache.positions.view({N});

  // Output projections.
  kernels::Array<T> dz(N * g * dg, ops);
  kernels::Array<T> d_o(N * hc, ops);
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj,
                 profile::linear_backward_flops(N, dims.hidden, g * dg) +
                     profile::linear_backward_flops(N, g * dg, group_in));
    ops.linear_backward(cache.z.view({N, g * dg}), Tensor::of(w.wo_b, {d, g * dg}),
                        Tensor::of(dout, {N, d}), dz.view({N, g * dg}),
                        Tensor::optional(grads.wo_b, {d, g * dg}), linear);
    ops.grouped_linear_backward(
        g, cache.o_rot.view({N, hc}), Tensor::of(w.wo_a, {g * dg, group_in}), dz.view({N, g * dg}),
        d_o.view({N, hc}), Tensor::optional(grads.wo_a, {g * dg, group_in}), ctx.precision);
  }
  // Backward of the inverse rotation is the forward rotation.
  ops.rope(cache.rope, d_o.view({N, H, c}), positions, false);

  // The core: dq, dkv (window keys), dcompressed, the sink gradient.
  kernels::Array<T> dq(N * hc, ops);
  kernels::Array<T> dkv(N * c, ops);
  kernels::Array<T> dcompressed(cache.compressed.size(), ops);
  ops.attention_core_backward(
      kernels::AttentionCoreDims{shape.S, dims.window, ctx.precision}, cache.q.view({N, H, c}),
      key_tensors(cache, N, c), cache.prob.view({cache.prob.size()}), cache.sink_prob.view({N, H}),
      cache.o.view({N, H, c}), d_o.view({N, H, c}), dq.view({N, H, c}), dkv.view({N, c}),
      dcompressed.view({dcompressed.size() / c, c}), Tensor::optional(grads.attn_sink, {H}));

  // Query path back to a (da written here).
  ops.rope(cache.rope, dq.view({N, H, c}), positions, true);
  ops.rmsnorm_backward(cache.q_raw.view({N * H, c}), Tensor(), cache.q_inv.view({N * H}),
                       dq.view({N * H, c}), dq.view({N * H, c}), Tensor());
  kernels::Array<T> dcq(N * dc, ops);
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_backward_flops(N, hc, dc));
    ops.linear_backward(cache.c_q.view({N, dc}), Tensor::of(w.wq_b, {hc, dc}), dq.view({N, hc}),
                        dcq.view({N, dc}), Tensor::optional(grads.wq_b, {hc, dc}), linear);
  }
  ops.rmsnorm_backward(cache.q_lora.view({N, dc}), Tensor::of(w.q_norm, {dc}),
                       cache.q_lora_inv.view({N}), dcq.view({N, dc}), dcq.view({N, dc}),
                       Tensor::optional(grads.q_norm, {dc}));
  kernels::Array<T> da_local;
  T* da_out = da;
  if (!da_out) {
    da_local.resize(N * dims.hidden, ops);
    da_out = da_local.data();
  }
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_backward_flops(N, dc, dims.hidden));
    ops.linear_backward(cache.a.view({N, d}), Tensor::of(w.wq_a, {dc, d}), dcq.view({N, dc}),
                        Tensor::of(da_out, {N, d}), Tensor::optional(grads.wq_a, {dc, d}), linear);
  }
  // KV path.
  ops.rope(cache.rope, dkv.view({N, 1, c}), positions, true);
  ops.rmsnorm_backward(cache.kv_raw.view({N, c}), Tensor::of(w.kv_norm, {c}),
                       cache.kv_inv.view({N}), dkv.view({N, c}), dkv.view({N, c}),
                       Tensor::optional(grads.kv_norm, {c}));
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_backward_flops(N, c, dims.hidden));
    ops.linear_backward(cache.a.view({N, d}), Tensor::of(w.wkv, {c, d}), dkv.view({N, c}),
                        Tensor::of(da_out, {N, d}), Tensor::optional(grads.wkv, {c, d}),
                        accumulate);
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
      const AttentionDims&, const AttentionCache<T>&, int64_t, int64_t);                          \
  template void attention_drop_recomputable<T>(AttentionCache<T>&);                               \
  template void attention_rematerialize<T>(const AttentionDims&, const AttentionWeights<T>&,      \
                                           const T*, AttentionCache<T>&,                          \
                                           const kernels::OpContext&);
TREX_INSTANTIATE_ATTENTION(float)
TREX_INSTANTIATE_ATTENTION(double)
#undef TREX_INSTANTIATE_ATTENTION

}  // namespace trex::model
