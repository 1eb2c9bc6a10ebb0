#include "trex/kernels/cpu/decode.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "trex/kernels/top_k.hpp"

namespace trex::kernels {
namespace {

template <class T>
T dot(const T* x, const T* y, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}

}  // namespace

template <class T>
void decode_indexer_select(const T* q, const T* head_weights, int64_t heads, int64_t head_dim,
                           const T* keys, int64_t visible, int64_t take, int64_t* selected) {
  const T* hw = head_weights;
  std::vector<T> scores(static_cast<size_t>(visible));
  for (int64_t i = 0; i < visible; ++i) {
    const T* key = keys + i * head_dim;
    T score = 0;
    for (int64_t h = 0; h < heads; ++h) {
      T dp = 0;
      for (int64_t e = 0; e < head_dim; ++e) dp += q[h * head_dim + e] * key[e];
      score += hw[h] * std::max(dp, T(0));
    }
    scores[i] = score;
  }
  std::vector<int64_t> order;
  select_top_indices(scores.data(), visible, take, selected, order);
}

template <class T>
void decode_attention(const T* q, int64_t heads, int64_t c, const T* keys, int64_t n, const T* sink,
                      T* o) {
  const T inv_sqrt_c = static_cast<T>(1.0 / std::sqrt(static_cast<double>(c)));
  std::fill_n(o, heads * c, T(0));
  std::vector<T> logits(static_cast<size_t>(n));
  for (int64_t h = 0; h < heads; ++h) {
    const T* qh = q + h * c;
    const T sink_logit = sink[h];
    T max_logit = sink_logit;
    for (int64_t k = 0; k < n; ++k) {
      logits[k] = dot(qh, keys + k * c, c) * inv_sqrt_c;
      max_logit = std::max(max_logit, logits[k]);
    }
    T denom = std::exp(sink_logit - max_logit);
    for (int64_t k = 0; k < n; ++k) {
      logits[k] = std::exp(logits[k] - max_logit);
      denom += logits[k];
    }
    T* oh = o + h * c;
    for (int64_t k = 0; k < n; ++k) {
      const T p = logits[k] / denom;
      const T* v = keys + k * c;
      for (int64_t e = 0; e < c; ++e) oh[e] += p * v[e];
    }
  }
}

#define TREX_DECODE_INSTANTIATE(T)                                                                \
  template void decode_indexer_select<T>(const T*, const T*, int64_t, int64_t, const T*, int64_t, \
                                         int64_t, int64_t*);                                      \
  template void decode_attention<T>(const T*, int64_t, int64_t, const T*, int64_t, const T*, T*);
TREX_DECODE_INSTANTIATE(float)
TREX_DECODE_INSTANTIATE(double)
#undef TREX_DECODE_INSTANTIATE

}  // namespace trex::kernels
