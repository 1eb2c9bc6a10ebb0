#include "trex/kernels/cpu/indexer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "trex/kernels/cpu/attention_core.hpp"
#include "trex/kernels/top_k.hpp"

namespace trex::kernels {
namespace {

// Below this many multiply-adds a loop runs serially: an OpenMP region costs more.
constexpr int64_t kParallelWork = int64_t{1} << 18;

// scores [visible], dots [heads, visible], picks [take] (take = min(k, visible)).
template <class T>
SelectionBoundary row_boundary(const T* scores, const T* dots, int64_t heads, int64_t visible,
                               const int64_t* picks, int64_t take) {
  SelectionBoundary rb;
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

template <class T>
T indexer_score(const IndexerScoreDims& dims, const IndexerScoring<T>& in, int64_t row,
                int64_t block) {
  const int64_t b = row / dims.seq;
  const T* key = in.keys + (b * dims.blocks + block) * in.head_dim;
  const T* q = in.q + row * in.heads * in.head_dim;
  const T* hw = in.head_weights + row * in.heads;
  // The head dots through the vectorised attention kernel, as the all-blocks
  // scoring of indexer_select does (kernel results do not depend on the key
  // count), so a block scores the same here as in the selection.
  std::vector<T> dots(static_cast<size_t>(in.heads));
  attention_dots(in.heads, 1, in.head_dim, q, in.head_dim, &key, T(1), dots.data(), 1);
  T score = 0;
  for (int64_t h = 0; h < in.heads; ++h) score += hw[h] * std::max(dots[h], T(0));
  return score;
}

template <class T>
void indexer_select(const IndexerScoreDims& dims, const IndexerScoring<T>& in, int64_t tokens,
                    int64_t* selected, std::vector<SelectionBoundary>* boundaries) {
  const int64_t k_max = dims.topk;
  const int64_t heads = in.heads, hd = in.head_dim, qdim = heads * hd;
  std::fill(selected, selected + tokens * k_max, int64_t{-1});
  if (boundaries) boundaries->assign(static_cast<size_t>(tokens), SelectionBoundary{});
#pragma omp parallel for schedule(dynamic, 4) if (tokens * dims.blocks * qdim > kParallelWork)
  for (int64_t r = 0; r < tokens; ++r) {
    const int64_t visible = dims.visible(r);
    if (visible == 0) continue;
    // Every visible block against all heads in one [heads, hd]·[hd, visible]
    // product, then Σ_h w_h·ReLU(dot) in head order (as indexer_score).
    const int64_t b = r / dims.seq;
    const T* key_base = in.keys + b * dims.blocks * hd;
    std::vector<const T*> key_rows(static_cast<size_t>(visible));
    for (int64_t i = 0; i < visible; ++i) key_rows[i] = key_base + i * hd;
    std::vector<T> dots(static_cast<size_t>(heads * visible));
    attention_dots(heads, visible, hd, in.q + r * qdim, hd, key_rows.data(), T(1), dots.data(),
                   visible);
    const T* hw = in.head_weights + r * heads;
    std::vector<T> scores(static_cast<size_t>(visible), T(0));
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < visible; ++i)
        scores[i] += hw[h] * std::max(dots[h * visible + i], T(0));
    // top-min(k, N) over all blocks with invisible ones at −∞, invisible picks
    // discarded == top-min(k, visible) over the visible ones. Ties: ranks_before
    // (lower block index first), each row by one thread from its own scores.
    std::vector<int64_t> order;
    int64_t* picks = selected + r * k_max;
    const int64_t take = select_top_indices(scores.data(), visible, k_max, picks, order);
    if (boundaries)
      (*boundaries)[static_cast<size_t>(r)] =
          row_boundary(scores.data(), dots.data(), heads, visible, picks, take);
  }
}

template <class T>
void indexer_selected_scores(const IndexerScoreDims& dims, const IndexerScoring<T>& in,
                             int64_t tokens, const int64_t* selected, T* scores) {
  const int64_t k_max = dims.topk, qdim = in.heads * in.head_dim;
  std::fill(scores, scores + tokens * k_max, T(0));
#pragma omp parallel for schedule(static) if (tokens * k_max * qdim > kParallelWork)
  for (int64_t r = 0; r < tokens; ++r)
    for (int64_t k = 0; k < k_max; ++k) {
      const int64_t i = selected[r * k_max + k];
      if (i >= 0) scores[r * k_max + k] = indexer_score(dims, in, r, i);
    }
}

template <class T>
double indexer_kl_loss(int64_t tokens, int64_t k_max, const int64_t* selected, const T* scores,
                       const T* target, T* dscores) {
  std::fill(dscores, dscores + tokens * k_max, T(0));
  std::vector<double> per_token(static_cast<size_t>(tokens), 0.0);
#pragma omp parallel for schedule(static) if (tokens * k_max > kParallelWork)
  for (int64_t r = 0; r < tokens; ++r) {
    const int64_t* sel = selected + r * k_max;
    const T* score = scores + r * k_max;
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
      dscores[r * k_max + k] = std::exp(log_q) - p;
    }
    per_token[r] = kl;
  }
  double loss = 0.0;
  for (double v : per_token) loss += v;  // fixed order
  return loss;
}

template <class T>
void indexer_score_backward(const IndexerScoreDims& dims, const IndexerScoring<T>& in,
                            int64_t tokens, const int64_t* selected, const T* dscores, T scale,
                            T* dq, T* dweights, T* dkeys) {
  const int64_t k_max = dims.topk;
  const int64_t nh = in.heads;
  const int64_t hd = in.head_dim;
  std::fill(dq, dq + tokens * nh * hd, T(0));
  std::fill(dweights, dweights + tokens * nh, T(0));
  std::fill(dkeys, dkeys + tokens / dims.seq * dims.blocks * hd, T(0));
  // dscore of every (token, pick, head): dK is reduced from it in a fixed order.
  std::vector<T> dlogit(static_cast<size_t>(tokens * k_max * nh), T(0));
#pragma omp parallel for schedule(static) if (tokens * k_max * nh * hd > kParallelWork)
  for (int64_t r = 0; r < tokens; ++r) {
    const int64_t b = r / dims.seq;
    const T* q = in.q + r * nh * hd;
    const T* hw = in.head_weights + r * nh;
    for (int64_t k = 0; k < k_max; ++k) {
      const int64_t i = selected[r * k_max + k];
      if (i < 0) continue;
      const T d_index = scale * dscores[r * k_max + k];
      const T* key = in.keys + (b * dims.blocks + i) * hd;
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
  for (int64_t r = 0; r < tokens; ++r) {
    const int64_t b = r / dims.seq;
    for (int64_t k = 0; k < k_max; ++k) {
      const int64_t i = selected[r * k_max + k];
      if (i < 0) continue;
      T* dkey = dkeys + (b * dims.blocks + i) * hd;
      for (int64_t h = 0; h < nh; ++h) {
        const T ds = dlogit[(r * k_max + k) * nh + h];
        if (ds == T(0)) continue;
        const T* q = in.q + (r * nh + h) * hd;
        for (int64_t e = 0; e < hd; ++e) dkey[e] += ds * q[e];
      }
    }
  }
}

#define TREX_INDEXER_INSTANTIATE(T)                                                             \
  template T indexer_score<T>(const IndexerScoreDims&, const IndexerScoring<T>&, int64_t,       \
                              int64_t);                                                         \
  template void indexer_select<T>(const IndexerScoreDims&, const IndexerScoring<T>&, int64_t,   \
                                  int64_t*, std::vector<SelectionBoundary>*);                   \
  template void indexer_selected_scores<T>(const IndexerScoreDims&, const IndexerScoring<T>&,   \
                                           int64_t, const int64_t*, T*);                        \
  template double indexer_kl_loss<T>(int64_t, int64_t, const int64_t*, const T*, const T*, T*); \
  template void indexer_score_backward<T>(const IndexerScoreDims&, const IndexerScoring<T>&,    \
                                          int64_t, const int64_t*, const T*, T, T*, T*, T*);
TREX_INDEXER_INSTANTIATE(float)
TREX_INDEXER_INSTANTIATE(double)
#undef TREX_INDEXER_INSTANTIATE

}  // namespace trex::kernels
