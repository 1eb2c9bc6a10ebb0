#include "trex/model/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"
#include "trex/kernels/cpu/attention_core.hpp"
#include "trex/kernels/cpu/gemm.hpp"
#include "trex/kernels/cpu/norms.hpp"

namespace trex::model {

// Below this many multiply-adds a loop runs serially: an OpenMP region costs more.
constexpr int64_t kParallelWork = int64_t{1} << 18;

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

template <class T>
T dot(const T* x, const T* y, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}

// Key rows of query row r in prob order: window (oldest first), then its
// compressed entries in comp_list order. Returns their count.
template <class T>
int64_t gather_keys(const AttentionDims& dims, const AttentionCache<T>& cache, int64_t r,
                    std::vector<const T*>& keys) {
  const int64_t S = cache.shape.S;
  const int64_t c = dims.head_dim;
  const int64_t ws = cache.window_start(r, dims.window);
  const int64_t n_window = r % S - ws + 1;
  const int64_t first = cache.comp_offsets[r];
  const int64_t n_comp = cache.comp_offsets[r + 1] - first;
  keys.resize(static_cast<size_t>(n_window + n_comp));
  const T* window_rows = cache.kv.data() + (r - r % S + ws) * c;
  for (int64_t k = 0; k < n_window; ++k) keys[k] = window_rows + k * c;
  for (int64_t k = 0; k < n_comp; ++k)
    keys[n_window + k] = cache.compressed.data() + cache.comp_list[first + k] * c;
  return n_window + n_comp;
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
                         const AttentionOptions& options) {
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

  // Query path: c_Q = RMSNorm(a W_qaᵀ); q = per-head unweighted RMSNorm(c_Q W_qbᵀ); RoPE.
  cache.q_lora.resize(static_cast<size_t>(N * dc));
  cache.q_lora_inv.resize(static_cast<size_t>(N));
  cache.c_q.resize(cache.q_lora.size());
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_flops(N, dc, dims.hidden));
    kernels::linear_forward(a, w.wq_a, cache.q_lora.data(), N, dc, dims.hidden);
  }
  kernels::rmsnorm_forward(cache.q_lora.data(), w.q_norm, cache.c_q.data(), cache.q_lora_inv.data(),
                           N, dc, dims.eps);
  cache.q_raw.resize(static_cast<size_t>(N * hc));
  cache.q_inv.resize(static_cast<size_t>(N * H));
  cache.q.resize(cache.q_raw.size());
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_flops(N, hc, dc));
    kernels::linear_forward(cache.c_q.data(), w.wq_b, cache.q_raw.data(), N, hc, dc);
  }
  kernels::rmsnorm_forward(cache.q_raw.data(), static_cast<const T*>(nullptr), cache.q.data(),
                           cache.q_inv.data(), N * H, c, dims.eps);
  kernels::rope_apply(cache.rope, cache.q.data(), N, H, c, cache.positions.data(), false);

  // Shared K=V latent.
  cache.kv_raw.resize(static_cast<size_t>(N * c));
  cache.kv_inv.resize(static_cast<size_t>(N));
  cache.kv.resize(cache.kv_raw.size());
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_flops(N, c, dims.hidden));
    kernels::linear_forward(a, w.wkv, cache.kv_raw.data(), N, c, dims.hidden);
  }
  kernels::rmsnorm_forward(cache.kv_raw.data(), w.kv_norm, cache.kv.data(), cache.kv_inv.data(), N,
                           c, dims.eps);
  kernels::rope_apply(cache.rope, cache.kv.data(), N, 1, c, cache.positions.data(), false);

  // Compressed entries and the compressed key set of every query.
  int64_t blocks = 0;
  cache.compressed.clear();
  if (dims.has_compressor()) {
    const CompressorDims cdims = dims.compressor();
    blocks = cdims.blocks(shape.S);
    cache.compressed.assign(static_cast<size_t>(shape.B * blocks * c), T(0));
    compressor_forward(cdims, w.compressor, shape, a, cache.rope, cache.compressor,
                       cache.compressed.data());
  }
  if (dims.has_indexer()) {
    const bool need_scores = !options.fixed_selection || options.compute_indexer_loss;
    if (need_scores) {
      indexer_forward(dims.indexer(), w.indexer, shape, a, cache.c_q.data(), cache.rope,
                      cache.indexer, options.fixed_selection);
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
  cache.prob.assign(static_cast<size_t>(cache.prob_offsets[N]), T(0));
  cache.sink_prob.assign(static_cast<size_t>(N * H), T(0));
  cache.o.assign(static_cast<size_t>(N * hc), T(0));
  const T inv_sqrt_c = static_cast<T>(1.0 / std::sqrt(static_cast<double>(c)));
  // All heads of a token share its keys (MQA): scores = one [H, keys] product,
  // output = one [H, keys]·[keys, c] product.
#pragma omp parallel if (static_cast <int64_t>(cache.prob.size()) * c > kParallelWork)
  {
    std::vector<const T*> keys;
#pragma omp for schedule(dynamic, 4)
    for (int64_t r = 0; r < N; ++r) {
      const int64_t n_keys = gather_keys(dims, cache, r, keys);
      T* p_row = cache.prob.data() + cache.prob_offsets[r];
      const T* q_row = cache.q.data() + r * hc;
      kernels::attention_dots(H, n_keys, c, q_row, c, keys.data(), inv_sqrt_c, p_row, n_keys);
      for (int64_t h = 0; h < H; ++h) {
        T* p = p_row + h * n_keys;
        const T sink = w.attn_sink[h];
        T max_logit = sink;
        for (int64_t k = 0; k < n_keys; ++k) max_logit = std::max(max_logit, p[k]);
        const T sink_exp = std::exp(sink - max_logit);
        T denom = sink_exp;
        for (int64_t k = 0; k < n_keys; ++k) {
          p[k] = std::exp(p[k] - max_logit);
          denom += p[k];
        }
        const T inv_denom = T(1) / denom;
        for (int64_t k = 0; k < n_keys; ++k) p[k] *= inv_denom;
        cache.sink_prob[r * H + h] = sink_exp * inv_denom;
      }
      kernels::attention_combine(H, n_keys, c, p_row, n_keys, keys.data(), cache.o.data() + r * hc,
                                 c);
    }
  }

  // Inverse RoPE at the query position, then the grouped low-rank projection.
  cache.o_rot = cache.o;
  kernels::rope_apply(cache.rope, cache.o_rot.data(), N, H, c, cache.positions.data(), true);
  const int64_t g = dims.o_groups;
  const int64_t dg = dims.o_lora;
  const int64_t group_in = hc / g;
  cache.z.assign(static_cast<size_t>(N * g * dg), T(0));
  TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_flops(N, g * dg, group_in) +
                                               profile::linear_flops(N, dims.hidden, g * dg));
  for (int64_t j = 0; j < g; ++j)
    kernels::gemm<T>(false, true, N, dg, group_in, T(1), cache.o_rot.data() + j * group_in, hc,
                     w.wo_a + j * dg * group_in, group_in, T(0), cache.z.data() + j * dg, g * dg);
  kernels::linear_forward(cache.z.data(), w.wo_b, out, N, dims.hidden, g * dg);

  if (options.compute_indexer_loss) {
    TREX_PROFILE(profile::Op::kIndexer);
    // Target: main attention probabilities summed over heads on the selected
    // compressed entries, L1-normalised per query.
    const int64_t k_max = dims.index_topk;
    std::vector<T> target(static_cast<size_t>(N * k_max), T(0));
    for (int64_t r = 0; r < N; ++r) {
      const int64_t n_window = r % shape.S - cache.window_start(r, dims.window) + 1;
      const int64_t n_comp = cache.comp_offsets[r + 1] - cache.comp_offsets[r];
      const int64_t n_keys = n_window + n_comp;
      // comp_list holds the valid picks of `selected` in order; map them back.
      T total = 0;
      for (int64_t k = 0, j = 0; k < k_max && j < n_comp; ++k) {
        if (cache.indexer.selected[r * k_max + k] < 0) continue;
        T sum = 0;
        for (int64_t h = 0; h < H; ++h)
          sum += cache.prob[cache.prob_offsets[r] + h * n_keys + n_window + j];
        target[r * k_max + k] = sum;
        total += sum;
        ++j;
      }
      if (total > T(0))
        for (int64_t k = 0; k < k_max; ++k) target[r * k_max + k] /= total;
    }
    cache.indexer_loss = indexer_loss(dims.indexer(), shape, target.data(), cache.indexer);
  }
  return cache.indexer_loss;
}

template <class T>
void attention_backward(const AttentionDims& dims, const AttentionWeights<T>& w,
                        const AttentionCache<T>& cache, const T* dout, AttentionGrads<T>& grads,
                        T* da) {
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

  // Output projections.
  std::vector<T> dz(static_cast<size_t>(N * g * dg), T(0));
  std::vector<T> d_o(static_cast<size_t>(N * hc), T(0));
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj,
                 profile::linear_backward_flops(N, dims.hidden, g * dg) +
                     profile::linear_backward_flops(N, g * dg, group_in));
    kernels::linear_backward(cache.z.data(), w.wo_b, dout, dz.data(), grads.wo_b, N, dims.hidden,
                             g * dg);
    for (int64_t j = 0; j < g; ++j) {
      if (grads.wo_a)
        kernels::gemm<T>(true, false, dg, group_in, N, T(1), dz.data() + j * dg, g * dg,
                         cache.o_rot.data() + j * group_in, hc, T(1),
                         grads.wo_a + j * dg * group_in, group_in);
      kernels::gemm<T>(false, false, N, group_in, dg, T(1), dz.data() + j * dg, g * dg,
                       w.wo_a + j * dg * group_in, group_in, T(0), d_o.data() + j * group_in, hc);
    }
  }
  // Backward of the inverse rotation is the forward rotation.
  kernels::rope_apply(cache.rope, d_o.data(), N, H, c, cache.positions.data(), false);

  // Pass 1 (per query): dlogit, dq, sink term. As in the forward, all heads of
  // a token share its keys: g·vᵀ is one [H, keys] product, dq one [H, keys]·[keys, c].
  const T inv_sqrt_c = static_cast<T>(1.0 / std::sqrt(static_cast<double>(c)));
  std::vector<T> dlogit(cache.prob.size(), T(0));
  std::vector<T> dq(static_cast<size_t>(N * hc), T(0));
  std::vector<T> dsink_part(static_cast<size_t>(N * H), T(0));
  const bool parallel = static_cast<int64_t>(cache.prob.size()) * c > kParallelWork;
#pragma omp parallel if (parallel)
  {
    std::vector<const T*> keys;
#pragma omp for schedule(dynamic, 4)
    for (int64_t r = 0; r < N; ++r) {
      const int64_t n_keys = gather_keys(dims, cache, r, keys);
      const T* go_row = d_o.data() + r * hc;
      const T* p_row = cache.prob.data() + cache.prob_offsets[r];
      T* dl_row = dlogit.data() + cache.prob_offsets[r];
      kernels::attention_dots(H, n_keys, c, go_row, c, keys.data(), T(1), dl_row, n_keys);
      for (int64_t h = 0; h < H; ++h) {
        const T D = dot(go_row + h * c, cache.o.data() + r * hc + h * c, c);
        dsink_part[r * H + h] = -cache.sink_prob[r * H + h] * D;
        const T* p = p_row + h * n_keys;
        T* dl = dl_row + h * n_keys;
        for (int64_t k = 0; k < n_keys; ++k) dl[k] = p[k] * (dl[k] - D);
      }
      T* dq_row = dq.data() + r * hc;
      kernels::attention_combine(H, n_keys, c, dl_row, n_keys, keys.data(), dq_row, c);
      for (int64_t e = 0; e < hc; ++e) dq_row[e] *= inv_sqrt_c;
    }
  }
  if (grads.attn_sink)
    for (int64_t r = 0; r < N; ++r)
      for (int64_t h = 0; h < H; ++h) grads.attn_sink[h] += dsink_part[r * H + h];

  // Pass 2 (per key): a key/value receives p·g (value role) + dlogit·q/√c (key role)
  // from every query that attends to it, summed in query order whatever the
  // partition. coef holds, per key slot, [p of every head, dlogit/√c of every head]
  // against rows [g of every head, q of every head] of the query.
  auto query_rows = [&](int64_t r, std::vector<const T*>& rows) {
    rows.resize(static_cast<size_t>(2 * H));
    for (int64_t h = 0; h < H; ++h) {
      rows[h] = d_o.data() + r * hc + h * c;
      rows[H + h] = cache.q.data() + r * hc + h * c;
    }
  };
  auto key_coefficients = [&](int64_t r, int64_t k, T* coef) {
    const int64_t n_window = r % shape.S - cache.window_start(r, dims.window) + 1;
    const int64_t n_keys = n_window + cache.comp_offsets[r + 1] - cache.comp_offsets[r];
    for (int64_t h = 0; h < H; ++h) {
      const int64_t at = cache.prob_offsets[r] + h * n_keys + k;
      coef[h] = cache.prob[at];
      coef[H + h] = dlogit[at] * inv_sqrt_c;
    }
  };
  // Window keys in blocks of consecutive rows: each query's g and q rows are
  // loaded once per block instead of once per key.
  constexpr int64_t kKeyBlock = 16;
  const int64_t key_blocks = (shape.S + kKeyBlock - 1) / kKeyBlock;
  std::vector<T> dkv(static_cast<size_t>(N * c), T(0));
#pragma omp parallel if (parallel)
  {
    std::vector<const T*> rows;
    std::vector<T> coef;
#pragma omp for schedule(dynamic, 1)
    for (int64_t block = 0; block < shape.B * key_blocks; ++block) {
      const int64_t b = block / key_blocks;
      const int64_t s0 = (block % key_blocks) * kKeyBlock;
      const int64_t s1 = std::min(shape.S, s0 + kKeyBlock);
      const int64_t t_last = std::min(shape.S - 1, s1 - 1 + dims.window - 1);
      for (int64_t t = s0; t <= t_last; ++t) {
        const int64_t r = b * shape.S + t;
        const int64_t ws = cache.window_start(r, dims.window);
        const int64_t lo = std::max(s0, ws);
        const int64_t hi = std::min(s1 - 1, t);
        if (lo > hi) continue;
        const int64_t m = hi - lo + 1;
        coef.resize(static_cast<size_t>(m * 2 * H));
        for (int64_t i = 0; i < m; ++i) key_coefficients(r, lo + i - ws, coef.data() + i * 2 * H);
        query_rows(r, rows);
        kernels::attention_combine(m, 2 * H, c, coef.data(), 2 * H, rows.data(),
                                   dkv.data() + (b * shape.S + lo) * c, c);
      }
    }
  }
  std::vector<T> dcompressed(cache.compressed.size(), T(0));
  if (dims.has_compressor() && !cache.compressed.empty()) {
    const int64_t entries = static_cast<int64_t>(cache.compressed.size()) / c;
    // Reverse index entry → (query row, key slot), built in query order.
    std::vector<int64_t> count(static_cast<size_t>(entries + 1), 0);
    for (int64_t x : cache.comp_list) ++count[x + 1];
    for (int64_t e = 0; e < entries; ++e) count[e + 1] += count[e];
    std::vector<std::pair<int64_t, int64_t>> users(cache.comp_list.size());
    std::vector<int64_t> fill(count.begin(), count.end() - 1);
    for (int64_t r = 0; r < N; ++r) {
      const int64_t n_window = r % shape.S - cache.window_start(r, dims.window) + 1;
      for (int64_t k = cache.comp_offsets[r]; k < cache.comp_offsets[r + 1]; ++k)
        users[fill[cache.comp_list[k]]++] = {r, n_window + k - cache.comp_offsets[r]};
    }
#pragma omp parallel if (static_cast <int64_t>(cache.comp_list.size()) * hc > kParallelWork)
    {
      std::vector<const T*> rows;
      std::vector<T> coef(static_cast<size_t>(2 * H));
#pragma omp for schedule(dynamic, 1)
      for (int64_t e = 0; e < entries; ++e)
        for (int64_t u = count[e]; u < count[e + 1]; ++u) {
          key_coefficients(users[u].first, users[u].second, coef.data());
          query_rows(users[u].first, rows);
          kernels::attention_combine(1, 2 * H, c, coef.data(), 2 * H, rows.data(),
                                     dcompressed.data() + e * c, c);
        }
    }
  }

  // Query path back to a (da written here).
  kernels::rope_apply(cache.rope, dq.data(), N, H, c, cache.positions.data(), true);
  kernels::rmsnorm_backward(cache.q_raw.data(), static_cast<const T*>(nullptr), cache.q_inv.data(),
                            dq.data(), dq.data(), static_cast<T*>(nullptr), N * H, c);
  std::vector<T> dcq(static_cast<size_t>(N * dc), T(0));
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_backward_flops(N, hc, dc));
    kernels::linear_backward(cache.c_q.data(), w.wq_b, dq.data(), dcq.data(), grads.wq_b, N, hc,
                             dc);
  }
  kernels::rmsnorm_backward(cache.q_lora.data(), w.q_norm, cache.q_lora_inv.data(), dcq.data(),
                            dcq.data(), grads.q_norm, N, dc);
  std::vector<T> da_local;
  T* da_out = da;
  if (!da_out) {
    da_local.assign(static_cast<size_t>(N * dims.hidden), T(0));
    da_out = da_local.data();
  }
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_backward_flops(N, dc, dims.hidden));
    kernels::linear_backward(cache.a.data(), w.wq_a, dcq.data(), da_out, grads.wq_a, N, dc,
                             dims.hidden, /*accumulate_dx=*/false);
  }
  // KV path.
  kernels::rope_apply(cache.rope, dkv.data(), N, 1, c, cache.positions.data(), true);
  kernels::rmsnorm_backward(cache.kv_raw.data(), w.kv_norm, cache.kv_inv.data(), dkv.data(),
                            dkv.data(), grads.kv_norm, N, c);
  {
    TREX_PROFILE(profile::Op::kGemmAttnProj, profile::linear_backward_flops(N, c, dims.hidden));
    kernels::linear_backward(cache.a.data(), w.wkv, dkv.data(), da_out, grads.wkv, N, c,
                             dims.hidden, /*accumulate_dx=*/true);
  }
  // Compressed branch (only entries some query attended to carry gradient).
  if (dims.has_compressor())
    compressor_backward(dims.compressor(), w.compressor, shape, cache.a.data(), cache.rope,
                        cache.compressor, dcompressed.data(), grads.compressor, da_out);
  // Indexer: trained only by its own loss, inputs detached.
  if (dims.has_indexer() && cache.options.compute_indexer_loss)
    indexer_backward(dims.indexer(), w.indexer, shape, cache.a.data(), cache.c_q.data(), cache.rope,
                     cache.indexer, static_cast<T>(cache.options.indexer_loss_weight),
                     grads.indexer);
}

#define TREX_INSTANTIATE_ATTENTION(T)                                                              \
  template double attention_forward<T>(const AttentionDims&, const AttentionWeights<T>&,           \
                                       const SeqShape&, const T*, AttentionCache<T>&, T*,          \
                                       const AttentionOptions&);                                   \
  template void attention_backward<T>(const AttentionDims&, const AttentionWeights<T>&,            \
                                      const AttentionCache<T>&, const T*, AttentionGrads<T>&, T*); \
  template std::vector<int64_t> attention_compressed_set<T>(                                       \
      const AttentionDims&, const AttentionCache<T>&, int64_t, int64_t);
TREX_INSTANTIATE_ATTENTION(float)
TREX_INSTANTIATE_ATTENTION(double)
#undef TREX_INSTANTIATE_ATTENTION

}  // namespace trex::model
