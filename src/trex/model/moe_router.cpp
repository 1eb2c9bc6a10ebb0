#include "trex/model/moe_router.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "trex/core/profile.hpp"
#include "trex/kernels/cpu/gemm.hpp"

namespace trex::model {
namespace {

// Top-k of (s + b) in descending order, by the engine's tie rule (ranks_before,
// model/indexer.hpp): equal values go to the lower expert index, NaN after
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

// The sequences of the balance loss: the listed ones, or the B rows of S tokens.
std::vector<MoeSequence> balance_ranges(const MoeDims& dims) {
  if (!dims.balance_sequences.empty()) return dims.balance_sequences;
  std::vector<MoeSequence> rows(static_cast<size_t>(dims.batch));
  for (int64_t b = 0; b < dims.batch; ++b) rows[b] = {b * dims.seq, dims.seq};
  return rows;
}

// f_{b,e} = E/(K·T_b)·#{t in sequence b : e ∈ idx_t}, written to freq [sequences, E].
void balance_frequencies(const MoeDims& dims, const std::vector<MoeSequence>& sequences,
                         const int32_t* idx, std::vector<double>& freq) {
  const int64_t B = static_cast<int64_t>(sequences.size()), E = dims.n_experts, K = dims.top_k;
  freq.assign(static_cast<size_t>(B * E), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const MoeSequence& seq = sequences[static_cast<size_t>(b)];
    const double norm =
        static_cast<double>(E) / (static_cast<double>(K) * static_cast<double>(seq.len));
    double* f = freq.data() + b * E;
    for (int64_t t = seq.row; t < seq.row + seq.len; ++t) {
      const int32_t* row = idx + t * K;
      for (int64_t k = 0; k < K; ++k) {
        bool duplicate = false;
        for (int64_t j = 0; j < k; ++j) duplicate = duplicate || row[j] == row[k];
        if (!duplicate) f[row[k]] += norm;
      }
    }
  }
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
void router_scores_forward(const MoeDims& dims, const T* gate, const T* x, T* logits, T* scores) {
  const int64_t N = dims.tokens(), d = dims.hidden, E = dims.n_experts;
  {
    TREX_PROFILE(profile::Op::kGemmRouter, profile::linear_flops(N, E, d));
    kernels::linear_forward(x, gate, logits, N, E, d, kernels::Precision::kF32);
  }
#pragma omp parallel for schedule(static) if (N * E > (1 << 14))
  for (int64_t i = 0; i < N * E; ++i)
    scores[i] = static_cast<T>(sqrt_softplus(static_cast<double>(logits[i])).value);
}

template <class T>
void router_scores_backward(const MoeDims& dims, const T* gate, const T* x, const T* dlogits, T* dx,
                            T* dgate) {
  const int64_t N = dims.tokens(), d = dims.hidden, E = dims.n_experts;
  TREX_PROFILE(profile::Op::kGemmRouter, profile::linear_backward_flops(N, E, d));
  kernels::linear_backward(x, gate, dlogits, dx, dgate, N, E, d, kernels::Precision::kF32,
                           /*accumulate_dx=*/true);
}

template <class T>
void select_experts(const MoeDims& dims, const MoeWeights<T>& weights, const T* scores,
                    const int64_t* token_ids, int32_t* expert_index) {
  const int64_t N = dims.tokens(), E = dims.n_experts, K = dims.top_k;
  if (dims.hash_routed) {
    if (!token_ids) throw moe_error("hash-routed layer needs token ids", "moe.token_ids");
    for (int64_t t = 0; t < N; ++t) {
      const int64_t id = token_ids[t];
      if (id < 0 || id >= dims.vocab)
        throw moe_error("token id " + std::to_string(id) + " outside the tid2eid table (vocab " +
                            std::to_string(dims.vocab) + ")",
                        "moe.token_ids");
      for (int64_t k = 0; k < K; ++k) {
        const int64_t e = weights.tid2eid[id * K + k];
        if (e < 0 || e >= E)
          throw moe_error("tid2eid[" + std::to_string(id) + "] names expert " + std::to_string(e) +
                              " outside [0, " + std::to_string(E) + ")",
                          "moe.tid2eid");
        expert_index[t * K + k] = static_cast<int32_t>(e);
      }
    }
    return;
  }
#pragma omp parallel if (N * E * K > (1 << 14))
  {
    std::vector<char> taken;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < N; ++t)
      select_top_k(scores + t * E, weights.gate_bias, E, K, expert_index + t * K, taken);
  }
}

void check_expert_index(const MoeDims& dims, const std::vector<int32_t>& expert_index) {
  const int64_t P = dims.tokens() * dims.top_k, E = dims.n_experts;
  if (static_cast<int64_t>(expert_index.size()) != P)
    throw moe_error("fixed_selection needs cache.expert_index of size tokens*top_k",
                    "moe.expert_index");
  for (int64_t p = 0; p < P; ++p)
    if (expert_index[p] < 0 || expert_index[p] >= E)
      throw moe_error("cached expert index out of range", "moe.expert_index");
}

template <class T>
void combine_weights_forward(const MoeDims& dims, const T* scores, const int32_t* expert_index,
                             T* combine) {
  const int64_t N = dims.tokens(), E = dims.n_experts, K = dims.top_k;
  const double gamma = dims.routed_scaling;
  for (int64_t t = 0; t < N; ++t) {
    const T* s = scores + t * E;
    const int32_t* idx = expert_index + t * K;
    double denom = 1.0;
    if (dims.norm_topk_prob) {
      denom = 0.0;
      for (int64_t k = 0; k < K; ++k) denom += static_cast<double>(s[idx[k]]);
    }
    for (int64_t k = 0; k < K; ++k)
      combine[t * K + k] =
          denom > 0.0 ? static_cast<T>(gamma * static_cast<double>(s[idx[k]]) / denom) : T(0);
  }
}

bool balance_loss_active(const MoeDims& dims) {
  return dims.balance_loss_weight > 0.0 && (!dims.hash_routed || dims.balance_loss_on_hash_layers);
}

template <class T>
double balance_loss_forward(const MoeDims& dims, const T* scores, const int32_t* expert_index) {
  const int64_t N = dims.tokens(), E = dims.n_experts;
  std::vector<double> freq;
  const std::vector<MoeSequence> sequences = balance_ranges(dims);
  balance_frequencies(dims, sequences, expert_index, freq);
  const int64_t B = static_cast<int64_t>(sequences.size());
  std::vector<double> per_seq(static_cast<size_t>(B), 0.0);
#pragma omp parallel for schedule(static) if (B > 1 && N * E > (1 << 12))
  for (int64_t b = 0; b < B; ++b) {
    const int64_t row = sequences[static_cast<size_t>(b)].row;
    const int64_t S = sequences[static_cast<size_t>(b)].len;
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
    per_seq[b] = dims.balance_loss_weight * loss;
  }
  double total = 0.0;
  for (int64_t b = 0; b < B; ++b) total += per_seq[b];
  return B > 0 ? total / static_cast<double>(B) : 0.0;
}

BalanceLossBackward balance_loss_backward_inputs(const MoeDims& dims, const int32_t* expert_index,
                                                 bool active, double d_loss) {
  BalanceLossBackward balance;
  balance.active = active;
  balance.d_loss = d_loss;
  if (!active) return balance;
  balance.sequences = balance_ranges(dims);
  balance.sequence_of.assign(static_cast<size_t>(dims.tokens()), -1);
  balance_frequencies(dims, balance.sequences, expert_index, balance.freq);
  for (size_t i = 0; i < balance.sequences.size(); ++i)
    std::fill_n(balance.sequence_of.begin() + balance.sequences[i].row, balance.sequences[i].len,
                static_cast<int64_t>(i));
  return balance;
}

template <class T>
void router_tokens_backward(const MoeDims& dims, const BalanceLossBackward& balance,
                            const T* logits, const T* scores, const int32_t* expert_index,
                            const T* combine, const T* d_combine, int64_t begin, int64_t end,
                            T* dlogits) {
  const int64_t E = dims.n_experts, K = dims.top_k;
  const double gamma = dims.routed_scaling;
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
      if (dims.norm_topk_prob) {
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
      const int64_t b = balance.active ? balance.sequence_of[t] : -1;
      if (b >= 0) {
        double total = 0.0;
        for (int64_t e = 0; e < E; ++e) total += static_cast<double>(s[e]);
        if (total > 0.0) {
          // dL/ds'_{e,t} = α f_{b,e} / (T_b·B) · dL_bal; s' = s/Σs.
          const double coef = dims.balance_loss_weight * balance.d_loss /
                              (static_cast<double>(balance.sequences[static_cast<size_t>(b)].len) *
                               static_cast<double>(balance.sequences.size()));
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
void update_router_bias(T* bias, const int64_t* load, int64_t n_experts, double speed) {
  if (n_experts <= 0) return;
  if (!bias || !load) throw moe_error("null bias or load", "moe.gate_bias");
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

#define TREX_MOE_ROUTER_INSTANTIATE(T)                                                            \
  template void router_scores_forward<T>(const MoeDims&, const T*, const T*, T*, T*);             \
  template void router_scores_backward<T>(const MoeDims&, const T*, const T*, const T*, T*, T*);  \
  template void select_experts<T>(const MoeDims&, const MoeWeights<T>&, const T*, const int64_t*, \
                                  int32_t*);                                                      \
  template void combine_weights_forward<T>(const MoeDims&, const T*, const int32_t*, T*);         \
  template double balance_loss_forward<T>(const MoeDims&, const T*, const int32_t*);              \
  template void router_tokens_backward<T>(const MoeDims&, const BalanceLossBackward&, const T*,   \
                                          const T*, const int32_t*, const T*, const T*, int64_t,  \
                                          int64_t, T*);                                           \
  template void update_router_bias<T>(T*, const int64_t*, int64_t, double);

TREX_MOE_ROUTER_INSTANTIATE(float)
TREX_MOE_ROUTER_INSTANTIATE(double)
#undef TREX_MOE_ROUTER_INSTANTIATE

}  // namespace trex::model
