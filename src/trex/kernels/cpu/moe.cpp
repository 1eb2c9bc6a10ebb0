#include "trex/kernels/cpu/moe.hpp"

#include <cstdint>

#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>
#include <vector>

#include "trex/core/profile.hpp"
#include "trex/kernels/cpu/elementwise.hpp"
#include "trex/kernels/cpu/gemm.hpp"

namespace trex::kernels {
namespace {

// Top-k of (s + b) in descending order, by the engine's tie rule (ranks_before,
// kernels/top_k.hpp): equal values go to the lower expert index, NaN after
// every number. One token per call, so independent of the thread count.
template <class T>
void select_top_k(const T* scores, const T* bias, int64_t E, int64_t K, int32_t* out,
                  std::vector<char>& taken) {
  taken.assign(static_cast<size_t>(E), 0);
  for (int64_t k = 0; k < K; ++k) {
    int64_t best = -1;
    double best_value = 0.0;
    for (int64_t e = 0; e < E; ++e) {
      if (taken[e]) continue;
      const double value =
          static_cast<double>(scores[e]) + (bias ? static_cast<double>(bias[e]) : 0.0);
      if (best < 0 || value > best_value || (std::isnan(best_value) && !std::isnan(value))) {
        best = e;
        best_value = value;
      }
    }
    taken[best] = 1;
    out[k] = static_cast<int32_t>(best);
  }
}

template <class T>
T sigmoid(T v) {
  if (v >= T(0)) return T(1) / (T(1) + std::exp(-v));
  const T e = std::exp(v);
  return e / (T(1) + e);
}

bool clamp_enabled(double limit) {
  return limit > 0.0;
}

}  // namespace

SqrtSoftplus sqrt_softplus(double logit) {
  if (logit >= 0.0) {
    const double softplus = logit + std::log1p(std::exp(-logit));
    const double s = std::sqrt(softplus);
    const double sigma = 1.0 / (1.0 + std::exp(-logit));
    return {s, sigma / (2.0 * s)};
  }
  // softplus(ℓ) = log1p(z) with z = e^ℓ ∈ (0, 1); write it as z·r, r = log1p(z)/z ∈ [log 2, 1],
  // so s = e^{ℓ/2}·sqrt(r) and σ/(2s) = e^{ℓ/2}/(2(1+z)sqrt(r)) never form 0/0.
  const double z = std::exp(logit);
  const double r = z > 0.0 ? std::log1p(z) / z : 1.0;
  const double half = std::exp(0.5 * logit);
  const double root_r = std::sqrt(r);
  return {half * root_r, half / (2.0 * (1.0 + z) * root_r)};
}

template <class T>
void router_scores(const T* logits, int64_t n, T* scores) {
#pragma omp parallel for schedule(static) if (n > (1 << 14))
  for (int64_t i = 0; i < n; ++i)
    scores[i] = static_cast<T>(sqrt_softplus(static_cast<double>(logits[i])).value);
}

template <class T>
void router_top_k(const T* scores, const T* bias, int64_t N, int64_t E, int64_t K,
                  int32_t* expert_index) {
#pragma omp parallel if (N * E * K > (1 << 14))
  {
    std::vector<char> taken;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < N; ++t)
      select_top_k(scores + t * E, bias, E, K, expert_index + t * K, taken);
  }
}

void router_hash(const int64_t* token_ids, const int64_t* tid2eid, int64_t N, int64_t K,
                 int32_t* expert_index) {
  for (int64_t t = 0; t < N; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = tid2eid[token_ids[t] * K + k];
      // Outside int32 a truncated value could look like a valid expert: -1 instead.
      expert_index[t * K + k] = e >= INT32_MIN && e <= INT32_MAX ? static_cast<int32_t>(e) : -1;
    }
}

template <class T>
void router_combine(const RouterCombineParams& params, const T* scores, const int32_t* expert_index,
                    int64_t N, int64_t E, int64_t K, T* combine) {
  const double gamma = params.routed_scaling;
  for (int64_t t = 0; t < N; ++t) {
    const T* s = scores + t * E;
    const int32_t* idx = expert_index + t * K;
    double denom = 1.0;
    if (params.norm_topk_prob) {
      denom = 0.0;
      for (int64_t k = 0; k < K; ++k) denom += static_cast<double>(s[idx[k]]);
    }
    for (int64_t k = 0; k < K; ++k)
      combine[t * K + k] =
          denom > 0.0 ? static_cast<T>(gamma * static_cast<double>(s[idx[k]]) / denom) : T(0);
  }
}

void router_balance_frequencies(const int32_t* expert_index, int64_t K, int64_t E,
                                const int64_t* sequences, int64_t B, double* freq) {
  std::fill_n(freq, B * E, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t first = sequences[2 * b], len = sequences[2 * b + 1];
    const double norm =
        static_cast<double>(E) / (static_cast<double>(K) * static_cast<double>(len));
    double* f = freq + b * E;
    for (int64_t t = first; t < first + len; ++t) {
      const int32_t* row = expert_index + t * K;
      for (int64_t k = 0; k < K; ++k) {
        bool duplicate = false;
        for (int64_t j = 0; j < k; ++j) duplicate = duplicate || row[j] == row[k];
        if (!duplicate) f[row[k]] += norm;
      }
    }
  }
}

template <class T>
double router_balance_loss(double weight, const T* scores, int64_t N, int64_t E, const double* freq,
                           const int64_t* sequences, int64_t B) {
  std::vector<double> per_seq(static_cast<size_t>(B), 0.0);
#pragma omp parallel for schedule(static) if (B > 1 && N * E > (1 << 12))
  for (int64_t b = 0; b < B; ++b) {
    const int64_t row = sequences[2 * b];
    const int64_t S = sequences[2 * b + 1];
    std::vector<double> prob(static_cast<size_t>(E), 0.0);
    for (int64_t t = row; t < row + S; ++t) {
      const T* s = scores + t * E;
      double total = 0.0;
      for (int64_t e = 0; e < E; ++e) total += static_cast<double>(s[e]);
      if (total <= 0.0) continue;
      for (int64_t e = 0; e < E; ++e) prob[e] += static_cast<double>(s[e]) / total;
    }
    double loss = 0.0;
    for (int64_t e = 0; e < E; ++e) loss += freq[b * E + e] * prob[e] / static_cast<double>(S);
    per_seq[b] = weight * loss;
  }
  double total = 0.0;
  for (int64_t b = 0; b < B; ++b) total += per_seq[b];
  return B > 0 ? total / static_cast<double>(B) : 0.0;
}

template <class T>
void router_backward(const RouterCombineParams& params, const RouterBalance& balance,
                     const T* logits, const T* scores, const int32_t* expert_index,
                     const T* combine, const T* d_combine, int64_t E, int64_t K, int64_t begin,
                     int64_t end, T* dlogits) {
  const double gamma = params.routed_scaling;
  const bool balance_active = balance.sequences != nullptr;
  TREX_PROFILE(profile::Op::kRouter);
#pragma omp parallel if ((end - begin) * E > (1 << 12))
  {
    std::vector<double> ds(static_cast<size_t>(E));
#pragma omp for schedule(static)
    for (int64_t t = begin; t < end; ++t) {
      std::fill(ds.begin(), ds.end(), 0.0);
      const T* s = scores + t * E;
      const int32_t* idx = expert_index + t * K;
      double dw[64];
      std::vector<double> dw_big;
      double* dwp = dw;
      if (K > 64) {
        dw_big.resize(static_cast<size_t>(K));
        dwp = dw_big.data();
      }
      for (int64_t k = 0; k < K; ++k) dwp[k] = static_cast<double>(d_combine[t * K + k]);
      if (params.norm_topk_prob) {
        double denom = 0.0, dot = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          denom += static_cast<double>(s[idx[k]]);
          dot += dwp[k] * static_cast<double>(combine[t * K + k]);
        }
        if (denom > 0.0)
          for (int64_t k = 0; k < K; ++k) ds[idx[k]] += (gamma * dwp[k] - dot) / denom;
      } else {
        for (int64_t k = 0; k < K; ++k) ds[idx[k]] += gamma * dwp[k];
      }
      const int64_t b = balance_active ? balance.sequence_of[t] : -1;
      if (b >= 0) {
        double total = 0.0;
        for (int64_t e = 0; e < E; ++e) total += static_cast<double>(s[e]);
        if (total > 0.0) {
          // dL/ds'_{e,t} = α f_{b,e} / (T_b·B) · dL_bal; s' = s/Σs.
          const double coef = balance.weight * balance.d_loss /
                              (static_cast<double>(balance.sequences[2 * b + 1]) *
                               static_cast<double>(balance.count));
          double dot = 0.0;
          for (int64_t e = 0; e < E; ++e)
            dot += coef * balance.freq[b * E + e] * static_cast<double>(s[e]) / total;
          for (int64_t e = 0; e < E; ++e) ds[e] += (coef * balance.freq[b * E + e] - dot) / total;
        }
      }
      for (int64_t e = 0; e < E; ++e) {
        if (ds[e] == 0.0) continue;
        dlogits[t * E + e] = static_cast<T>(
            ds[e] * sqrt_softplus(static_cast<double>(logits[t * E + e])).derivative);
      }
    }
  }
}

template <class T>
void router_bias_update(T* bias, const int64_t* load, int64_t n_experts, double speed) {
  int64_t total = 0;
  for (int64_t e = 0; e < n_experts; ++e) total += load[e];
  for (int64_t e = 0; e < n_experts; ++e) {
    const int64_t scaled = load[e] * n_experts;  // load_e vs total/E, exactly
    if (scaled > total)
      bias[e] = static_cast<T>(static_cast<double>(bias[e]) - speed);
    else if (scaled < total)
      bias[e] = static_cast<T>(static_cast<double>(bias[e]) + speed);
  }
}

template <class T>
void swiglu_forward(const T* gate_pre, const T* up_pre, const T* row_scale, int64_t rows, int64_t I,
                    double limit, T* h) {
  const int64_t n = rows;
  const bool clamp = clamp_enabled(limit);
  const T L = static_cast<T>(limit);
  TREX_PROFILE(profile::Op::kSwiglu);
#pragma omp parallel for schedule(static) if (n * I > (1 << 14))
  for (int64_t r = 0; r < n; ++r) {
    const T scale = row_scale ? row_scale[r] : T(1);
    if constexpr (std::is_same_v<T, float>) {
      swiglu_forward_row(gate_pre + r * I, up_pre + r * I, I, scale, clamp ? L : -1.0f, h + r * I);
      continue;
    }
    for (int64_t i = 0; i < I; ++i) {
      T g = gate_pre[r * I + i];
      T v = up_pre[r * I + i];
      if (clamp) {
        g = std::min(g, L);
        v = std::clamp(v, -L, L);
      }
      h[r * I + i] = scale * (g * sigmoid(g) * v);
    }
  }
}

template <class T>
void swiglu_backward(const T* gate_pre, const T* up_pre, const T* row_scale, const T* dh,
                     int64_t rows, int64_t I, double limit, T* dg, T* dv, T* d_row_scale) {
  const int64_t n = rows;
  const bool clamp = clamp_enabled(limit);
  const T L = static_cast<T>(limit);
  TREX_PROFILE(profile::Op::kSwiglu);
#pragma omp parallel for schedule(static) if (n * I > (1 << 14))
  for (int64_t r = 0; r < n; ++r) {
    const T scale = row_scale ? row_scale[r] : T(1);
    if constexpr (std::is_same_v<T, float>) {
      const float dscale = swiglu_backward_row(gate_pre + r * I, up_pre + r * I, dh + r * I, I,
                                               scale, clamp ? L : -1.0f, dg + r * I, dv + r * I);
      if (d_row_scale) d_row_scale[r] = dscale;
      continue;
    }
    T dscale = T(0);
    for (int64_t i = 0; i < I; ++i) {
      const T g_raw = gate_pre[r * I + i];
      const T v_raw = up_pre[r * I + i];
      const bool g_pass = !clamp || g_raw <= L;
      const bool v_pass = !clamp || (v_raw >= -L && v_raw <= L);
      const T g = g_pass ? g_raw : L;
      const T v = clamp ? std::clamp(v_raw, -L, L) : v_raw;
      const T sg = sigmoid(g);
      const T act = g * sg;
      const T grad_h_scaled = dh[r * I + i];
      dscale += grad_h_scaled * act * v;
      const T grad_h = grad_h_scaled * scale;
      dg[r * I + i] = g_pass ? grad_h * v * sg * (T(1) + g * (T(1) - sg)) : T(0);
      dv[r * I + i] = v_pass ? grad_h * act : T(0);
    }
    if (d_row_scale) d_row_scale[r] = dscale;
  }
}

template <class T>
void grouped_rows_linear_forward(const int64_t* offsets, int64_t groups, const T* x,
                                 const T* const* w, int64_t N, int64_t K, T* y,
                                 Precision precision) {
  run_gemm_tasks(groups, [&](int64_t g) {
    const int64_t begin = offsets[g], n = offsets[g + 1] - begin;
    if (n > 0) linear_forward(x + begin * K, w[g], y + begin * N, n, N, K, precision);
  });
}

template <class T>
void grouped_rows_linear_backward(const int64_t* offsets, int64_t groups, const T* x,
                                  const T* const* w, const T* dy, T* dx, T* const* dw, int64_t N,
                                  int64_t K, Precision precision, bool accumulate_dx) {
  run_gemm_tasks(groups, [&](int64_t g) {
    const int64_t begin = offsets[g], n = offsets[g + 1] - begin;
    if (n > 0)
      linear_backward(x + begin * K, w[g], dy + begin * N, dx ? dx + begin * K : nullptr,
                      dw ? dw[g] : nullptr, n, N, K, precision, accumulate_dx);
  });
}

template <class T>
void moe_permute(const T* x, int64_t d, int64_t top_k, const int64_t* pair_order, int64_t P,
                 const T* combine, int64_t width, T* rows, T* row_combine) {
  const int64_t K = top_k;
#pragma omp parallel for schedule(static) if (P * d > (1 << 14))
  for (int64_t row = 0; row < P; ++row) {
    const int64_t p = pair_order[row];
    std::copy_n(x + (p / K) * d, d, rows + row * width);
    if (!combine) continue;
    if (row_combine)
      row_combine[row] = combine[p];
    else
      rows[row * width + d] = combine[p];
  }
}

template <class T>
void moe_unpermute(const T* rows, int64_t d, const int64_t* pair_row, int64_t M, int64_t K, T* y) {
  TREX_PROFILE(profile::Op::kCombine);
#pragma omp parallel for schedule(static) if (M * d > (1 << 14))
  for (int64_t t = 0; t < M; ++t) {
    T* yt = y + t * d;
    for (int64_t k = 0; k < K; ++k) {
      const T* o = rows + pair_row[t * K + k] * d;
      for (int64_t i = 0; i < d; ++i) yt[i] += o[i];
    }
  }
}

template <class T>
void pack_rows(const T* rows, const T* weights, int64_t d, const int64_t* index, int64_t M,
               int64_t width, T* packed) {
  for (int64_t i = 0; i < M; ++i) {
    const int64_t g = index[i];
    std::copy_n(rows + g * d, d, packed + i * width);
    if (width > d) packed[i * width + d] = weights[g];
  }
}

template <class T>
void unpack_rows(const T* packed, int64_t width, const int64_t* index, int64_t M, int64_t d,
                 T* rows, T* weights) {
  for (int64_t i = 0; i < M; ++i) {
    const int64_t g = index ? index[i] : i;
    std::copy_n(packed + i * width, d, rows + g * d);
    if (width > d) weights[g] = packed[i * width + d];
  }
}

#define TREX_MOE_KERNELS_INSTANTIATE(T)                                                            \
  template void router_scores<T>(const T*, int64_t, T*);                                           \
  template void router_top_k<T>(const T*, const T*, int64_t, int64_t, int64_t, int32_t*);          \
  template void router_combine<T>(const RouterCombineParams&, const T*, const int32_t*, int64_t,   \
                                  int64_t, int64_t, T*);                                           \
  template double router_balance_loss<T>(double, const T*, int64_t, int64_t, const double*,        \
                                         const int64_t*, int64_t);                                 \
  template void router_backward<T>(const RouterCombineParams&, const RouterBalance&, const T*,     \
                                   const T*, const int32_t*, const T*, const T*, int64_t, int64_t, \
                                   int64_t, int64_t, T*);                                          \
  template void router_bias_update<T>(T*, const int64_t*, int64_t, double);                        \
  template void swiglu_forward<T>(const T*, const T*, const T*, int64_t, int64_t, double, T*);     \
  template void swiglu_backward<T>(const T*, const T*, const T*, const T*, int64_t, int64_t,       \
                                   double, T*, T*, T*);                                            \
  template void grouped_rows_linear_forward<T>(const int64_t*, int64_t, const T*, const T* const*, \
                                               int64_t, int64_t, T*, Precision);                   \
  template void grouped_rows_linear_backward<T>(const int64_t*, int64_t, const T*,                 \
                                                const T* const*, const T*, T*, T* const*, int64_t, \
                                                int64_t, Precision, bool);                         \
  template void moe_permute<T>(const T*, int64_t, int64_t, const int64_t*, int64_t, const T*,      \
                               int64_t, T*, T*);                                                   \
  template void moe_unpermute<T>(const T*, int64_t, const int64_t*, int64_t, int64_t, T*);         \
  template void pack_rows<T>(const T*, const T*, int64_t, const int64_t*, int64_t, int64_t, T*);   \
  template void unpack_rows<T>(const T*, int64_t, const int64_t*, int64_t, int64_t, T*, T*);

TREX_MOE_KERNELS_INSTANTIATE(float)
TREX_MOE_KERNELS_INSTANTIATE(double)
#undef TREX_MOE_KERNELS_INSTANTIATE

}  // namespace trex::kernels
