#include "trex/model/indexer.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"
#include "trex/kernels/cpu/attention_core.hpp"
#include "trex/kernels/cpu/gemm.hpp"

namespace trex::model {

// Below this many multiply-adds a loop runs serially: an OpenMP region costs more.
constexpr int64_t kParallelWork = int64_t{1} << 18;

void IndexerDims::validate() const {
  if (heads <= 0) throw Error("indexer needs at least one head").field("index_n_heads");
  if (head_dim <= 0 || head_dim < rope_dim)
    throw Error("indexer head dim must be >= rope dims").field("index_head_dim");
  if (topk <= 0) throw Error("indexer top-k must be positive").field("index_topk");
  if (q_lora <= 0) throw Error("q_lora_rank must be positive").field("q_lora_rank");
  compressor().validate();
}

template <class T>
int64_t select_top_indices(const T* scores, int64_t n, int64_t k, int64_t* out,
                           std::vector<int64_t>& order) {
  const int64_t take = std::max<int64_t>(0, std::min(k, n));
  order.resize(static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::iota(order.begin(), order.end(), int64_t{0});
  // ranks_before is a strict total order, so the first `take` are unique
  // whatever partial_sort does internally.
  std::partial_sort(order.begin(), order.begin() + take, order.end(),
                    [&](int64_t x, int64_t y) { return ranks_before(scores[x], x, scores[y], y); });
  std::copy(order.begin(), order.begin() + take, out);
  return take;
}

namespace {

std::atomic<IndexerSelectionStats*> g_probe{nullptr};
std::mutex g_probe_mutex;  // serialises additions to *g_probe

// One token row's part of IndexerSelectionStats.
struct RowBoundary {
  bool decides = false, tie = false, zero_tie = false;
  double margin = std::numeric_limits<double>::infinity();
  double zero_relu = std::numeric_limits<double>::infinity();
};

// scores [visible], dots [heads, visible], picks [take] (take = min(k, visible)).
template <class T>
RowBoundary row_boundary(const T* scores, const T* dots, int64_t heads, int64_t visible,
                         const int64_t* picks, int64_t take) {
  RowBoundary rb;
  double dot_scale = 0.0, score_scale = 0.0;
  for (int64_t i = 0; i < heads * visible; ++i)
    dot_scale = std::max(dot_scale, std::abs(static_cast<double>(dots[i])));
  for (int64_t i = 0; i < visible; ++i) {
    score_scale = std::max(score_scale, std::abs(static_cast<double>(scores[i])));
    if (scores[i] != T(0)) continue;
    double max_dot = -std::numeric_limits<double>::infinity();
    for (int64_t h = 0; h < heads; ++h)
      max_dot = std::max(max_dot, static_cast<double>(dots[h * visible + i]));
    rb.zero_relu = std::min(rb.zero_relu, -max_dot / std::max(dot_scale, 1e-300));
  }
  if (visible <= take) return rb;
  rb.decides = true;
  std::vector<char> picked(static_cast<size_t>(visible), 0);
  for (int64_t k = 0; k < take; ++k) picked[static_cast<size_t>(picks[k])] = 1;
  int64_t next = -1;  // the (take+1)-th in ranks_before order
  for (int64_t i = 0; i < visible; ++i)
    if (!picked[static_cast<size_t>(i)] &&
        (next < 0 || ranks_before(scores[i], i, scores[next], next)))
      next = i;
  const T kth = scores[picks[take - 1]], after = scores[next];
  if (kth == after) {
    rb.tie = true;
    rb.zero_tie = kth == T(0);
  } else {
    rb.margin =
        (static_cast<double>(kth) - static_cast<double>(after)) / std::max(score_scale, 1e-300);
  }
  return rb;
}

}  // namespace

IndexerSelectionProbe::IndexerSelectionProbe(IndexerSelectionStats& stats) {
  IndexerSelectionStats* expected = nullptr;
  if (!g_probe.compare_exchange_strong(expected, &stats, std::memory_order_acq_rel))
    throw Error("an IndexerSelectionProbe is already installed");
}

IndexerSelectionProbe::~IndexerSelectionProbe() {
  std::lock_guard<std::mutex> lock(g_probe_mutex);
  g_probe.store(nullptr, std::memory_order_release);
}

template <class T>
T indexer_score(const IndexerDims& dims, const IndexerCache<T>& cache, const SeqShape& shape,
                int64_t row, int64_t block) {
  const int64_t b = row / shape.S;
  const T* key = cache.keys.data() + (b * cache.blocks + block) * dims.head_dim;
  const T* q = cache.q.data() + row * dims.heads * dims.head_dim;
  const T* hw = cache.head_weights.data() + row * dims.heads;
  // The head dots through the vectorised attention kernel, as the forward's
  // all-blocks scoring does (kernel results do not depend on the key count),
  // so a block scores the same here as in the selection.
  std::vector<T> dots(static_cast<size_t>(dims.heads));
  kernels::attention_dots(dims.heads, 1, dims.head_dim, q, dims.head_dim, &key, T(1), dots.data(),
                          1);
  T score = 0;
  for (int64_t h = 0; h < dims.heads; ++h) score += hw[h] * std::max(dots[h], T(0));
  return score;
}

template <class T>
void indexer_forward(const IndexerDims& dims, const IndexerWeights<T>& w, const SeqShape& shape,
                     const T* a, const T* c_q, const kernels::RopeTable& rope,
                     IndexerCache<T>& cache, bool fixed_selection) {
  TREX_PROFILE(profile::Op::kIndexer);
  dims.validate();
  if (!w.wq_b) throw Error("missing indexer weight").field("indexer.wq_b.weight");
  if (!w.weights_proj) throw Error("missing indexer weight").field("indexer.weights_proj.weight");
  const int64_t tokens = shape.tokens();
  const int64_t qdim = dims.heads * dims.head_dim;
  const int64_t k_max = dims.topk;
  cache.q.assign(static_cast<size_t>(tokens * qdim), T(0));
  cache.head_weights.assign(static_cast<size_t>(tokens * dims.heads), T(0));
  if (tokens > 0) {
    {
      TREX_PROFILE(profile::Op::kGemmIndexer, profile::linear_flops(tokens, qdim, dims.q_lora));
      kernels::linear_forward(c_q, w.wq_b, cache.q.data(), tokens, qdim, dims.q_lora);
    }
    std::vector<int64_t> positions(static_cast<size_t>(tokens));
    for (int64_t r = 0; r < tokens; ++r) positions[r] = r % shape.S;
    kernels::rope_apply(rope, cache.q.data(), tokens, dims.heads, dims.head_dim, positions.data(),
                        false);
    {
      TREX_PROFILE(profile::Op::kGemmIndexer,
                   profile::linear_flops(tokens, dims.heads, dims.hidden));
      kernels::linear_forward(a, w.weights_proj, cache.head_weights.data(), tokens, dims.heads,
                              dims.hidden);
    }
    const T scale = static_cast<T>(
        1.0 / std::sqrt(static_cast<double>(dims.head_dim) * static_cast<double>(dims.heads)));
    for (auto& v : cache.head_weights) v *= scale;
  }
  const CompressorDims cdims = dims.compressor();
  cache.blocks = cdims.blocks(shape.S);
  cache.keys.assign(static_cast<size_t>(shape.B * cache.blocks * dims.head_dim), T(0));
  compressor_forward(cdims, w.compressor, shape, a, rope, cache.compressor, cache.keys.data());

  if (fixed_selection) {
    if (cache.selected.size() != static_cast<size_t>(tokens * k_max))
      throw Error("fixed_selection without a stored selection for this shape")
          .field("indexer.selected");
    for (int64_t r = 0; r < tokens; ++r) {
      const int64_t visible = visible_blocks(r % shape.S, dims.ratio, cache.blocks);
      for (int64_t k = 0; k < k_max; ++k) {
        const int64_t i = cache.selected[r * k_max + k];
        if (i >= visible) throw Error("stored selection is not visible").field("indexer.selected");
      }
    }
  } else {
    cache.selected.assign(static_cast<size_t>(tokens * k_max), -1);
    IndexerSelectionStats* const probe = g_probe.load(std::memory_order_acquire);
    std::vector<RowBoundary> boundaries(probe ? static_cast<size_t>(tokens) : 0);
#pragma omp parallel for schedule(dynamic, 4) if (tokens * cache.blocks * qdim > kParallelWork)
    for (int64_t r = 0; r < tokens; ++r) {
      const int64_t visible = visible_blocks(r % shape.S, dims.ratio, cache.blocks);
      if (visible == 0) continue;
      // Every visible block against all heads in one [heads, hd]·[hd, visible]
      // product, then Σ_h w_h·ReLU(dot) in head order (as indexer_score).
      const int64_t b = r / shape.S;
      const T* key_base = cache.keys.data() + b * cache.blocks * dims.head_dim;
      std::vector<const T*> key_rows(static_cast<size_t>(visible));
      for (int64_t i = 0; i < visible; ++i) key_rows[i] = key_base + i * dims.head_dim;
      std::vector<T> dots(static_cast<size_t>(dims.heads * visible));
      kernels::attention_dots(dims.heads, visible, dims.head_dim,
                              cache.q.data() + r * dims.heads * dims.head_dim, dims.head_dim,
                              key_rows.data(), T(1), dots.data(), visible);
      const T* hw = cache.head_weights.data() + r * dims.heads;
      std::vector<T> scores(static_cast<size_t>(visible), T(0));
      for (int64_t h = 0; h < dims.heads; ++h)
        for (int64_t i = 0; i < visible; ++i)
          scores[i] += hw[h] * std::max(dots[h * visible + i], T(0));
      // top-min(k, N) over all blocks with invisible ones at −∞, invisible picks
      // discarded == top-min(k, visible) over the visible ones. Ties: ranks_before
      // (lower block index first), each row by one thread from its own scores.
      std::vector<int64_t> order;
      int64_t* picks = cache.selected.data() + r * k_max;
      const int64_t take = select_top_indices(scores.data(), visible, k_max, picks, order);
      if (probe)
        boundaries[static_cast<size_t>(r)] =
            row_boundary(scores.data(), dots.data(), dims.heads, visible, picks, take);
    }
    if (probe) {
      std::lock_guard<std::mutex> lock(g_probe_mutex);
      // Re-checked under the lock: a probe removed meanwhile receives nothing.
      if (g_probe.load(std::memory_order_acquire) != probe) boundaries.clear();
      for (const RowBoundary& rb : boundaries) {
        probe->min_zero_block_relu_margin =
            std::min(probe->min_zero_block_relu_margin, rb.zero_relu);
        if (!rb.decides) continue;
        ++probe->decisions;
        probe->boundary_ties += rb.tie;
        probe->zero_ties += rb.zero_tie;
        probe->min_margin = std::min(probe->min_margin, rb.margin);
      }
    }
  }
  cache.selected_scores.assign(static_cast<size_t>(tokens * k_max), T(0));
#pragma omp parallel for schedule(static) if (tokens * k_max * qdim > kParallelWork)
  for (int64_t r = 0; r < tokens; ++r)
    for (int64_t k = 0; k < k_max; ++k) {
      const int64_t i = cache.selected[r * k_max + k];
      if (i >= 0) cache.selected_scores[r * k_max + k] = indexer_score(dims, cache, shape, r, i);
    }
}

template <class T>
double indexer_loss(const IndexerDims& dims, const SeqShape& shape, const T* target,
                    IndexerCache<T>& cache) {
  const int64_t tokens = shape.tokens();
  const int64_t k_max = dims.topk;
  cache.dscores.assign(static_cast<size_t>(tokens * k_max), T(0));
  std::vector<double> per_token(static_cast<size_t>(tokens), 0.0);
#pragma omp parallel for schedule(static) if (tokens * k_max > kParallelWork)
  for (int64_t r = 0; r < tokens; ++r) {
    const int64_t* sel = cache.selected.data() + r * k_max;
    const T* score = cache.selected_scores.data() + r * k_max;
    T max_score = -std::numeric_limits<T>::infinity();
    int64_t count = 0;
    for (int64_t k = 0; k < k_max; ++k)
      if (sel[k] >= 0) {
        max_score = std::max(max_score, score[k]);
        ++count;
      }
    if (count == 0) continue;
    T sum = 0;
    for (int64_t k = 0; k < k_max; ++k)
      if (sel[k] >= 0) sum += std::exp(score[k] - max_score);
    const T log_sum = std::log(sum);
    double kl = 0.0;
    for (int64_t k = 0; k < k_max; ++k) {
      if (sel[k] < 0) continue;
      const T log_q = score[k] - max_score - log_sum;
      const T p = target[r * k_max + k];
      if (p > T(0)) kl += static_cast<double>(p) * (std::log(static_cast<double>(p)) - log_q);
      cache.dscores[r * k_max + k] = std::exp(log_q) - p;
    }
    per_token[r] = kl;
  }
  double loss = 0.0;
  for (double v : per_token) loss += v;  // fixed order
  return loss;
}

template <class T>
void indexer_backward(const IndexerDims& dims, const IndexerWeights<T>& w, const SeqShape& shape,
                      const T* a, const T* c_q, const kernels::RopeTable& rope,
                      const IndexerCache<T>& cache, T scale, IndexerGrads<T>& grads) {
  const int64_t tokens = shape.tokens();
  if (tokens == 0) return;
  TREX_PROFILE(profile::Op::kIndexer);
  const int64_t k_max = dims.topk;
  const int64_t nh = dims.heads;
  const int64_t hd = dims.head_dim;
  std::vector<T> dq(static_cast<size_t>(tokens * nh * hd), T(0));
  std::vector<T> dweights(static_cast<size_t>(tokens * nh), T(0));
  // dscore of every (token, pick, head): dK is reduced from it in a fixed order.
  std::vector<T> dlogit(static_cast<size_t>(tokens * k_max * nh), T(0));
#pragma omp parallel for schedule(static) if (tokens * k_max * nh * hd > kParallelWork)
  for (int64_t r = 0; r < tokens; ++r) {
    const int64_t b = r / shape.S;
    const T* q = cache.q.data() + r * nh * hd;
    const T* hw = cache.head_weights.data() + r * nh;
    for (int64_t k = 0; k < k_max; ++k) {
      const int64_t i = cache.selected[r * k_max + k];
      if (i < 0) continue;
      const T d_index = scale * cache.dscores[r * k_max + k];
      const T* key = cache.keys.data() + (b * cache.blocks + i) * hd;
      for (int64_t h = 0; h < nh; ++h) {
        T dot = 0;
        for (int64_t e = 0; e < hd; ++e) dot += q[h * hd + e] * key[e];
        if (dot <= T(0)) continue;  // ReLU
        dweights[r * nh + h] += d_index * dot;
        const T ds = d_index * hw[h];
        dlogit[(r * k_max + k) * nh + h] = ds;
        for (int64_t e = 0; e < hd; ++e) dq[(r * nh + h) * hd + e] += ds * key[e];
      }
    }
  }
  std::vector<T> dkeys(cache.keys.size(), T(0));
  for (int64_t r = 0; r < tokens; ++r) {
    const int64_t b = r / shape.S;
    for (int64_t k = 0; k < k_max; ++k) {
      const int64_t i = cache.selected[r * k_max + k];
      if (i < 0) continue;
      T* dkey = dkeys.data() + (b * cache.blocks + i) * hd;
      for (int64_t h = 0; h < nh; ++h) {
        const T ds = dlogit[(r * k_max + k) * nh + h];
        if (ds == T(0)) continue;
        const T* q = cache.q.data() + (r * nh + h) * hd;
        for (int64_t e = 0; e < hd; ++e) dkey[e] += ds * q[e];
      }
    }
  }
  std::vector<int64_t> positions(static_cast<size_t>(tokens));
  for (int64_t r = 0; r < tokens; ++r) positions[r] = r % shape.S;
  kernels::rope_apply(rope, dq.data(), tokens, nh, hd, positions.data(), /*inverse=*/true);
  if (grads.wq_b) {
    TREX_PROFILE(profile::Op::kGemmIndexer, profile::linear_flops(tokens, nh * hd, dims.q_lora));
    kernels::linear_backward<T>(c_q, w.wq_b, dq.data(), nullptr, grads.wq_b, tokens, nh * hd,
                                dims.q_lora);
  }
  if (grads.weights_proj) {
    const T head_scale =
        static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd) * static_cast<double>(nh)));
    for (auto& v : dweights) v *= head_scale;
    TREX_PROFILE(profile::Op::kGemmIndexer, profile::linear_flops(tokens, nh, dims.hidden));
    kernels::linear_backward<T>(a, w.weights_proj, dweights.data(), nullptr, grads.weights_proj,
                                tokens, nh, dims.hidden);
  }
  compressor_backward(dims.compressor(), w.compressor, shape, a, rope, cache.compressor,
                      dkeys.data(), grads.compressor, static_cast<T*>(nullptr));
}

#define TREX_INSTANTIATE_INDEXER(T)                                                                \
  template int64_t select_top_indices<T>(const T*, int64_t, int64_t, int64_t*,                     \
                                         std::vector<int64_t>&);                                   \
  template T indexer_score<T>(const IndexerDims&, const IndexerCache<T>&, const SeqShape&,         \
                              int64_t, int64_t);                                                   \
  template void indexer_forward<T>(const IndexerDims&, const IndexerWeights<T>&, const SeqShape&,  \
                                   const T*, const T*, const kernels::RopeTable&,                  \
                                   IndexerCache<T>&, bool);                                        \
  template double indexer_loss<T>(const IndexerDims&, const SeqShape&, const T*,                   \
                                  IndexerCache<T>&);                                               \
  template void indexer_backward<T>(const IndexerDims&, const IndexerWeights<T>&, const SeqShape&, \
                                    const T*, const T*, const kernels::RopeTable&,                 \
                                    const IndexerCache<T>&, T, IndexerGrads<T>&);
TREX_INSTANTIATE_INDEXER(float)
TREX_INSTANTIATE_INDEXER(double)
#undef TREX_INSTANTIATE_INDEXER

}  // namespace trex::model
