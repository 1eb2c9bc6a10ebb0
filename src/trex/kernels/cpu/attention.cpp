#include "trex/kernels/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "trex/kernels/cpu/attention_core.hpp"
#include "trex/kernels/cpu/gemm.hpp"

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

// The window keys of a block of consecutive query tokens are one contiguous
// run of kv rows, so the window part of the core is done as dense GEMMs over
// that run (scores, output, dq, and per key block dkv), with the entries outside
// each query's window set to zero; only the few compressed keys of a query
// (gathered, per query) use the row-pointer kernels. Blocks are fixed by the
// shape, each GEMM by its block, so the bits do not depend on the thread count.
constexpr int64_t kQueryBlock = 64;  // query tokens per forward / dq block
constexpr int64_t kKeyBlock = 64;    // key rows per dkv block

// Query block i of the N = B·S rows: sequence b, tokens t0 .. t1−1, and the
// window run of kv rows k0 .. t1−1 that covers every query of the block.
struct QueryBlock {
  int64_t b, t0, t1, k0;
  int64_t tokens() const { return t1 - t0; }
  int64_t keys() const { return t1 - k0; }
};

QueryBlock query_block(const AttentionCoreDims& dims, int64_t i) {
  const int64_t S = dims.seq;
  const int64_t per_seq = (S + kQueryBlock - 1) / kQueryBlock;
  QueryBlock qb;
  qb.b = i / per_seq;
  qb.t0 = (i % per_seq) * kQueryBlock;
  qb.t1 = std::min(S, qb.t0 + kQueryBlock);
  qb.k0 = dims.window_start(qb.b * S + qb.t0);
  return qb;
}

template <class T>
std::vector<T>& scratch(int slot) {
  static thread_local std::vector<T> buffers[2];
  return buffers[slot];
}

// The inverse of scatter_window: the window part of row (t, h) of dense into
// prob-layout row dst (n_keys values per head).
template <class T>
void gather_window(const QueryBlock& qb, int64_t H, int64_t t, int64_t ws, int64_t n_window,
                   const T* dense, int64_t n_keys, T* dst) {
  for (int64_t h = 0; h < H; ++h) {
    const T* row = dense + ((t - qb.t0) * H + h) * qb.keys() + (ws - qb.k0);
    std::copy(row, row + n_window, dst + h * n_keys);
  }
}

// Row (t, h) of a block's dense [tokens·H, keys] matrix holds the window part
// of prob-layout row `src` (n_window values) at column ws − k0; zeros elsewhere.
template <class T>
void scatter_window(const QueryBlock& qb, int64_t H, int64_t t, int64_t ws, int64_t n_window,
                    const T* src, int64_t n_keys, T* dense) {
  const int64_t ld = qb.keys();
  for (int64_t h = 0; h < H; ++h) {
    T* row = dense + ((t - qb.t0) * H + h) * ld;
    std::fill(row, row + ld, T(0));
    std::copy(src + h * n_keys, src + h * n_keys + n_window, row + (ws - qb.k0));
  }
}

// The compressed keys of query row r in comp_list order; returns their count.
template <class T>
int64_t compressed_keys(const AttentionKeySets<T>& ks, int64_t r, int64_t c,
                        std::vector<const T*>& keys) {
  const int64_t first = ks.comp_offsets[r];
  const int64_t n = ks.comp_offsets[r + 1] - first;
  keys.resize(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) keys[k] = ks.compressed + ks.comp_list[first + k] * c;
  return n;
}

// Query row r's keys: its window (from window_start, n_window rows) and its
// compressed entries (pointers in comp).
struct QueryKeys {
  int64_t row, window_start, window, compressed;
  int64_t keys() const { return window + compressed; }
};

template <class T>
QueryKeys query_keys(const AttentionCoreDims& dims, const AttentionKeySets<T>& ks, int64_t r,
                     int64_t c, std::vector<const T*>& comp) {
  const int64_t ws = dims.window_start(r);
  return {r, ws, r % dims.seq - ws + 1, compressed_keys(ks, r, c, comp)};
}

// dense [tokens·H, keys] = alpha · (the block's rows of a [N, H, c]) · (its window run)ᵀ,
// in this thread's scratch slot 0: scores (a = q) or g·vᵀ (a = d_o).
template <class T>
std::vector<T>& block_products(const AttentionCoreDims& dims, const QueryBlock& qb, int64_t H,
                               int64_t c, const T* a, const T* kv, T alpha) {
  const int64_t rows = qb.tokens() * H, nk = qb.keys(), S = dims.seq;
  std::vector<T>& dense = scratch<T>(0);
  dense.resize(static_cast<size_t>(rows * nk));
  gemm<T>(dims.precision, false, true, rows, nk, c, alpha, a + (qb.b * S + qb.t0) * H * c, c,
          kv + (qb.b * S + qb.k0) * c, c, T(0), dense.data(), nk);
  return dense;
}

// out rows of the block [tokens·H, c] = dense · (window run) + the compressed
// keys weighted by coef (prob-layout rows: prob for the output, dlogit for dq).
template <class T>
void block_combine(const AttentionCoreDims& dims, const QueryBlock& qb, int64_t H, int64_t c,
                   const AttentionKeySets<T>& ks, const std::vector<T>& dense, const T* coef,
                   T* out) {
  const int64_t S = dims.seq, hc = H * c;
  gemm<T>(dims.precision, false, false, qb.tokens() * H, c, qb.keys(), T(1), dense.data(),
          qb.keys(), ks.kv + (qb.b * S + qb.k0) * c, c, T(0), out + (qb.b * S + qb.t0) * hc, c);
  std::vector<const T*> comp;
  for (int64_t t = qb.t0; t < qb.t1; ++t) {
    const int64_t r = qb.b * S + t;
    const int64_t n_window = dims.window_keys(r);
    const int64_t n_comp = compressed_keys(ks, r, c, comp);
    if (n_comp > 0)
      attention_combine(H, n_comp, c, coef + ks.prob_offsets[r] + n_window, n_window + n_comp,
                        comp.data(), out + r * hc, c);
  }
}

}  // namespace

template <class T>
void attention_core_forward(const AttentionCoreDims& dims, int64_t N, int64_t H, int64_t c,
                            const T* q, const AttentionKeySets<T>& ks, const T* sink, T* prob,
                            T* sink_prob, T* o) {
  const int64_t hc = H * c;
  const int64_t S = dims.seq;
  if (N == 0) return;
  const T inv_sqrt_c = static_cast<T>(1.0 / std::sqrt(static_cast<double>(c)));
  const int64_t blocks = (N / S) * ((S + kQueryBlock - 1) / kQueryBlock);
  run_gemm_tasks(blocks, [&](int64_t i) {
    const QueryBlock qb = query_block(dims, i);
    // Scores of every query of the block against the whole run (MQA: all heads share it).
    std::vector<T>& dense = block_products(dims, qb, H, c, q, ks.kv, inv_sqrt_c);
    std::vector<const T*> comp;
    for (int64_t t = qb.t0; t < qb.t1; ++t) {
      const QueryKeys qk = query_keys(dims, ks, qb.b * S + t, c, comp);
      const int64_t r = qk.row, ws = qk.window_start, n_window = qk.window, n_keys = qk.keys();
      T* p_row = prob + ks.prob_offsets[r];
      gather_window(qb, H, t, ws, n_window, dense.data(), n_keys, p_row);
      attention_dots(H, qk.compressed, c, q + r * hc, c, comp.data(), inv_sqrt_c, p_row + n_window,
                     n_keys);
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
      scatter_window(qb, H, t, ws, n_window, p_row, n_keys, dense.data());
    }
    block_combine(dims, qb, H, c, ks, dense, prob, o);
  });
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
  std::fill(dcompressed, dcompressed + ks.entries * c, T(0));
  if (N == 0) return;

  // Pass 1 (per query block): dlogit = p·(g·vᵀ − D) for every key, the sink
  // term, and dq = dlogit·K/√c (the window part one GEMM per block).
  const T inv_sqrt_c = static_cast<T>(1.0 / std::sqrt(static_cast<double>(c)));
  std::vector<T> dlogit(static_cast<size_t>(probs), T(0));
  std::vector<T> dsink_part(static_cast<size_t>(N * H), T(0));
  const int64_t query_blocks = B * ((S + kQueryBlock - 1) / kQueryBlock);
  run_gemm_tasks(query_blocks, [&](int64_t i) {
    const QueryBlock qb = query_block(dims, i);
    std::vector<T>& dense = block_products(dims, qb, H, c, d_o, ks.kv, T(1));
    std::vector<const T*> comp;
    for (int64_t t = qb.t0; t < qb.t1; ++t) {
      const QueryKeys qk = query_keys(dims, ks, qb.b * S + t, c, comp);
      const int64_t r = qk.row, ws = qk.window_start, n_window = qk.window, n_keys = qk.keys();
      const T* go_row = d_o + r * hc;
      T* dl_row = dlogit.data() + ks.prob_offsets[r];
      gather_window(qb, H, t, ws, n_window, dense.data(), n_keys, dl_row);
      attention_dots(H, qk.compressed, c, go_row, c, comp.data(), T(1), dl_row + n_window, n_keys);
      const T* p_row = prob + ks.prob_offsets[r];
      for (int64_t h = 0; h < H; ++h) {
        const T D = dot(go_row + h * c, o + r * hc + h * c, c);
        dsink_part[r * H + h] = -sink_prob[r * H + h] * D;
        const T* p = p_row + h * n_keys;
        T* dl = dl_row + h * n_keys;
        for (int64_t k = 0; k < n_keys; ++k) dl[k] = p[k] * (dl[k] - D);
      }
      scatter_window(qb, H, t, ws, n_window, dl_row, n_keys, dense.data());
    }
    block_combine(dims, qb, H, c, ks, dense, dlogit.data(), dq);
    for (int64_t t = qb.t0; t < qb.t1; ++t) {
      T* dq_row = dq + (qb.b * S + t) * hc;
      for (int64_t e = 0; e < hc; ++e) dq_row[e] *= inv_sqrt_c;
    }
  });
  if (dsink)
    for (int64_t r = 0; r < N; ++r)
      for (int64_t h = 0; h < H; ++h) dsink[h] += dsink_part[r * H + h];

  // Pass 2 (per block of window keys s0 .. s1−1): a key/value receives p·g
  // (value role) + dlogit·q/√c (key role) from every query whose window holds
  // it — queries s0 .. s1−1+window−1, one contiguous run of rows — as two
  // GEMMs with the block's probabilities and dlogits laid out densely.
  const int64_t key_blocks = (S + kKeyBlock - 1) / kKeyBlock;
  run_gemm_tasks(B * key_blocks, [&](int64_t i) {
    const int64_t b = i / key_blocks;
    const int64_t s0 = (i % key_blocks) * kKeyBlock;
    const int64_t s1 = std::min(S, s0 + kKeyBlock);
    const int64_t t_last = std::min(S - 1, s1 - 1 + dims.window - 1);
    const int64_t kb = s1 - s0, rows = (t_last - s0 + 1) * H;
    std::vector<T>& p_dense = scratch<T>(0);
    std::vector<T>& g_dense = scratch<T>(1);
    p_dense.assign(static_cast<size_t>(rows * kb), T(0));
    g_dense.assign(static_cast<size_t>(rows * kb), T(0));
    for (int64_t t = s0; t <= t_last; ++t) {
      const int64_t r = b * S + t;
      const int64_t ws = dims.window_start(r);
      const int64_t lo = std::max(s0, ws), hi = std::min(s1 - 1, t);
      if (lo > hi) continue;
      const int64_t n_keys = t - ws + 1 + comp_offsets[r + 1] - comp_offsets[r];
      for (int64_t h = 0; h < H; ++h) {
        const int64_t at = ks.prob_offsets[r] + h * n_keys + (lo - ws);
        const int64_t row = ((t - s0) * H + h) * kb + (lo - s0);
        std::copy(prob + at, prob + at + (hi - lo + 1), p_dense.data() + row);
        std::copy(dlogit.data() + at, dlogit.data() + at + (hi - lo + 1), g_dense.data() + row);
      }
    }
    const int64_t first_row = b * S + s0;
    gemm<T>(dims.precision, true, false, kb, c, rows, T(1), p_dense.data(), kb,
            d_o + first_row * hc, c, T(0), dkv + first_row * c, c);
    gemm<T>(dims.precision, true, false, kb, c, rows, inv_sqrt_c, g_dense.data(), kb,
            q + first_row * hc, c, T(1), dkv + first_row * c, c);
  });
  const int64_t entries = ks.entries;
  if (entries == 0) return;
  // Compressed entries: per entry, the queries that attend to it in query
  // order. coef holds, per key slot, [p of every head, dlogit/√c of every head]
  // against rows [g of every head, q of every head] of the query.
  auto query_rows = [&](int64_t r, std::vector<const T*>& rows) {
    rows.resize(static_cast<size_t>(2 * H));
    for (int64_t h = 0; h < H; ++h) {
      rows[h] = d_o + r * hc + h * c;
      rows[H + h] = q + r * hc + h * c;
    }
  };
  auto key_coefficients = [&](int64_t r, int64_t k, T* coef) {
    const int64_t n_keys = dims.window_keys(r) + comp_offsets[r + 1] - comp_offsets[r];
    for (int64_t h = 0; h < H; ++h) {
      const int64_t at = ks.prob_offsets[r] + h * n_keys + k;
      coef[h] = prob[at];
      coef[H + h] = dlogit[at] * inv_sqrt_c;
    }
  };
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
