#include "trex/kernels/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "trex/kernels/cpu/attention_core.hpp"

namespace trex::kernels {
namespace {

// Below this many multiply-adds a loop runs serially: an OpenMP region costs more.
constexpr int64_t kParallelWork = int64_t{1} << 18;

template <class T>
T dot(const T* x, const T* y, int64_t n) {
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}

// Key rows of query row r in prob order: window (oldest first), then its
// compressed entries in comp_list order. Returns their count.
template <class T>
int64_t gather_keys(const AttentionCoreDims& dims, int64_t c, const AttentionKeySets<T>& ks,
                    int64_t r, std::vector<const T*>& keys) {
  const int64_t S = dims.seq;
  const int64_t ws = dims.window_start(r);
  const int64_t n_window = r % S - ws + 1;
  const int64_t first = ks.comp_offsets[r];
  const int64_t n_comp = ks.comp_offsets[r + 1] - first;
  keys.resize(static_cast<size_t>(n_window + n_comp));
  const T* window_rows = ks.kv + (r - r % S + ws) * c;
  for (int64_t k = 0; k < n_window; ++k) keys[k] = window_rows + k * c;
  for (int64_t k = 0; k < n_comp; ++k)
    keys[n_window + k] = ks.compressed + ks.comp_list[first + k] * c;
  return n_window + n_comp;
}

}  // namespace

template <class T>
void attention_core_forward(const AttentionCoreDims& dims, int64_t N, int64_t H, int64_t c,
                            const T* q, const AttentionKeySets<T>& ks, const T* sink, T* prob,
                            T* sink_prob, T* o) {
  const int64_t hc = H * c;
  const int64_t probs = ks.prob_offsets[N];
  std::fill(prob, prob + probs, T(0));
  std::fill(sink_prob, sink_prob + N * H, T(0));
  std::fill(o, o + N * hc, T(0));
  const T inv_sqrt_c = static_cast<T>(1.0 / std::sqrt(static_cast<double>(c)));
  // All heads of a token share its keys (MQA): scores = one [H, keys] product,
  // output = one [H, keys]·[keys, c] product.
#pragma omp parallel if (probs * c > kParallelWork)
  {
    std::vector<const T*> keys;
#pragma omp for schedule(dynamic, 4)
    for (int64_t r = 0; r < N; ++r) {
      const int64_t n_keys = gather_keys(dims, c, ks, r, keys);
      T* p_row = prob + ks.prob_offsets[r];
      const T* q_row = q + r * hc;
      attention_dots(H, n_keys, c, q_row, c, keys.data(), inv_sqrt_c, p_row, n_keys);
      for (int64_t h = 0; h < H; ++h) {
        T* p = p_row + h * n_keys;
        const T sink_h = sink[h];
        T max_logit = sink_h;
        for (int64_t k = 0; k < n_keys; ++k) max_logit = std::max(max_logit, p[k]);
        const T sink_exp = std::exp(sink_h - max_logit);
        T denom = sink_exp;
        for (int64_t k = 0; k < n_keys; ++k) {
          p[k] = std::exp(p[k] - max_logit);
          denom += p[k];
        }
        const T inv_denom = T(1) / denom;
        for (int64_t k = 0; k < n_keys; ++k) p[k] *= inv_denom;
        sink_prob[r * H + h] = sink_exp * inv_denom;
      }
      attention_combine(H, n_keys, c, p_row, n_keys, keys.data(), o + r * hc, c);
    }
  }
}

template <class T>
void attention_core_backward(const AttentionCoreDims& dims, int64_t N, int64_t H, int64_t c,
                             const T* q, const AttentionKeySets<T>& ks, const T* prob,
                             const T* sink_prob, const T* o, const T* d_o, T* dq, T* dkv,
                             T* dcompressed, T* dsink) {
  const int64_t hc = H * c;
  const int64_t S = dims.seq, B = N / S;
  const int64_t probs = ks.prob_offsets[N];
  const int64_t* comp_offsets = ks.comp_offsets;
  const int64_t comp_count = comp_offsets[N];
  std::fill(dq, dq + N * hc, T(0));
  std::fill(dkv, dkv + N * c, T(0));
  std::fill(dcompressed, dcompressed + ks.entries * c, T(0));

  // Pass 1 (per query): dlogit, dq, sink term. As in the forward, all heads of
  // a token share its keys: g·vᵀ is one [H, keys] product, dq one [H, keys]·[keys, c].
  const T inv_sqrt_c = static_cast<T>(1.0 / std::sqrt(static_cast<double>(c)));
  std::vector<T> dlogit(static_cast<size_t>(probs), T(0));
  std::vector<T> dsink_part(static_cast<size_t>(N * H), T(0));
  const bool parallel = probs * c > kParallelWork;
#pragma omp parallel if (parallel)
  {
    std::vector<const T*> keys;
#pragma omp for schedule(dynamic, 4)
    for (int64_t r = 0; r < N; ++r) {
      const int64_t n_keys = gather_keys(dims, c, ks, r, keys);
      const T* go_row = d_o + r * hc;
      const T* p_row = prob + ks.prob_offsets[r];
      T* dl_row = dlogit.data() + ks.prob_offsets[r];
      attention_dots(H, n_keys, c, go_row, c, keys.data(), T(1), dl_row, n_keys);
      for (int64_t h = 0; h < H; ++h) {
        const T D = dot(go_row + h * c, o + r * hc + h * c, c);
        dsink_part[r * H + h] = -sink_prob[r * H + h] * D;
        const T* p = p_row + h * n_keys;
        T* dl = dl_row + h * n_keys;
        for (int64_t k = 0; k < n_keys; ++k) dl[k] = p[k] * (dl[k] - D);
      }
      T* dq_row = dq + r * hc;
      attention_combine(H, n_keys, c, dl_row, n_keys, keys.data(), dq_row, c);
      for (int64_t e = 0; e < hc; ++e) dq_row[e] *= inv_sqrt_c;
    }
  }
  if (dsink)
    for (int64_t r = 0; r < N; ++r)
      for (int64_t h = 0; h < H; ++h) dsink[h] += dsink_part[r * H + h];

  // Pass 2 (per key): a key/value receives p·g (value role) + dlogit·q/√c (key role)
  // from every query that attends to it, summed in query order whatever the
  // partition. coef holds, per key slot, [p of every head, dlogit/√c of every head]
  // against rows [g of every head, q of every head] of the query.
  auto query_rows = [&](int64_t r, std::vector<const T*>& rows) {
    rows.resize(static_cast<size_t>(2 * H));
    for (int64_t h = 0; h < H; ++h) {
      rows[h] = d_o + r * hc + h * c;
      rows[H + h] = q + r * hc + h * c;
    }
  };
  auto key_coefficients = [&](int64_t r, int64_t k, T* coef) {
    const int64_t n_window = r % S - dims.window_start(r) + 1;
    const int64_t n_keys = n_window + comp_offsets[r + 1] - comp_offsets[r];
    for (int64_t h = 0; h < H; ++h) {
      const int64_t at = ks.prob_offsets[r] + h * n_keys + k;
      coef[h] = prob[at];
      coef[H + h] = dlogit[at] * inv_sqrt_c;
    }
  };
  // Window keys in blocks of consecutive rows: each query's g and q rows are
  // loaded once per block instead of once per key.
  constexpr int64_t kKeyBlock = 16;
  const int64_t key_blocks = (S + kKeyBlock - 1) / kKeyBlock;
#pragma omp parallel if (parallel)
  {
    std::vector<const T*> rows;
    std::vector<T> coef;
#pragma omp for schedule(dynamic, 1)
    for (int64_t block = 0; block < B * key_blocks; ++block) {
      const int64_t b = block / key_blocks;
      const int64_t s0 = (block % key_blocks) * kKeyBlock;
      const int64_t s1 = std::min(S, s0 + kKeyBlock);
      const int64_t t_last = std::min(S - 1, s1 - 1 + dims.window - 1);
      for (int64_t t = s0; t <= t_last; ++t) {
        const int64_t r = b * S + t;
        const int64_t ws = dims.window_start(r);
        const int64_t lo = std::max(s0, ws);
        const int64_t hi = std::min(s1 - 1, t);
        if (lo > hi) continue;
        const int64_t m = hi - lo + 1;
        coef.resize(static_cast<size_t>(m * 2 * H));
        for (int64_t i = 0; i < m; ++i) key_coefficients(r, lo + i - ws, coef.data() + i * 2 * H);
        query_rows(r, rows);
        attention_combine(m, 2 * H, c, coef.data(), 2 * H, rows.data(), dkv + (b * S + lo) * c, c);
      }
    }
  }
  const int64_t entries = ks.entries;
  if (entries == 0) return;
  // Reverse index entry → (query row, key slot), built in query order.
  std::vector<int64_t> count(static_cast<size_t>(entries + 1), 0);
  for (int64_t i = 0; i < comp_count; ++i) ++count[ks.comp_list[i] + 1];
  for (int64_t e = 0; e < entries; ++e) count[e + 1] += count[e];
  std::vector<std::pair<int64_t, int64_t>> users(static_cast<size_t>(comp_count));
  std::vector<int64_t> fill(count.begin(), count.end() - 1);
  for (int64_t r = 0; r < N; ++r) {
    const int64_t n_window = r % S - dims.window_start(r) + 1;
    for (int64_t k = comp_offsets[r]; k < comp_offsets[r + 1]; ++k)
      users[fill[ks.comp_list[k]]++] = {r, n_window + k - comp_offsets[r]};
  }
#pragma omp parallel if (comp_count * hc > kParallelWork)
  {
    std::vector<const T*> rows;
    std::vector<T> coef(static_cast<size_t>(2 * H));
#pragma omp for schedule(dynamic, 1)
    for (int64_t e = 0; e < entries; ++e)
      for (int64_t u = count[e]; u < count[e + 1]; ++u) {
        key_coefficients(users[u].first, users[u].second, coef.data());
        query_rows(users[u].first, rows);
        attention_combine(1, 2 * H, c, coef.data(), 2 * H, rows.data(), dcompressed + e * c, c);
      }
  }
}

template <class T>
void attention_selected_mass(const AttentionCoreDims& dims, int64_t N, int64_t H, int64_t k_max,
                             const T* prob, const int64_t* prob_offsets,
                             const int64_t* comp_offsets, const int64_t* selected, T* target) {
  std::fill(target, target + N * k_max, T(0));
  for (int64_t r = 0; r < N; ++r) {
    const int64_t n_window = dims.window_keys(r);
    const int64_t n_comp = comp_offsets[r + 1] - comp_offsets[r];
    const int64_t n_keys = n_window + n_comp;
    // comp_list holds the valid picks of `selected` in order; map them back.
    T total = 0;
    for (int64_t k = 0, j = 0; k < k_max && j < n_comp; ++k) {
      if (selected[r * k_max + k] < 0) continue;
      T sum = 0;
      for (int64_t h = 0; h < H; ++h) sum += prob[prob_offsets[r] + h * n_keys + n_window + j];
      target[r * k_max + k] = sum;
      total += sum;
      ++j;
    }
    if (total > T(0))
      for (int64_t k = 0; k < k_max; ++k) target[r * k_max + k] /= total;
  }
}

#define TREX_ATTENTION_INSTANTIATE(T)                                                             \
  template void attention_core_forward<T>(const AttentionCoreDims&, int64_t, int64_t, int64_t,    \
                                          const T*, const AttentionKeySets<T>&, const T*, T*, T*, \
                                          T*);                                                    \
  template void attention_core_backward<T>(const AttentionCoreDims&, int64_t, int64_t, int64_t,   \
                                           const T*, const AttentionKeySets<T>&, const T*,        \
                                           const T*, const T*, const T*, T*, T*, T*, T*);         \
  template void attention_selected_mass<T>(const AttentionCoreDims&, int64_t, int64_t, int64_t,   \
                                           const T*, const int64_t*, const int64_t*,              \
                                           const int64_t*, T*);
TREX_ATTENTION_INSTANTIATE(float)
TREX_ATTENTION_INSTANTIATE(double)
#undef TREX_ATTENTION_INSTANTIATE

}  // namespace trex::kernels
