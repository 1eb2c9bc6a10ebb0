#pragma once
// CPU kernels of the MoE ops (backend.hpp; the equations are in
// model/moe_router.hpp and model/moe_experts.hpp): router scores, expert
// selection, combine weights, balance loss and their backward, the bias
// update, clamped SwiGLU over rows, the grouped expert GEMMs, and the row
// movement of the token dispatchers (permute, unpermute, packing). Every
// per-token or per-row loop computes a row from that row alone, and every
// reduction runs in a fixed order, so results do not depend on the OpenMP
// thread count. Callers validate (model/moe*.cpp, Backend).
#include <cstdint>

#include "trex/kernels/op_params.hpp"
#include "trex/kernels/precision.hpp"

namespace trex::kernels {

// s = sqrt(softplus(ℓ)) and ds/dℓ = σ(ℓ)/(2s), evaluated in double without
// overflow or 0/0: for ℓ < 0, with z = e^ℓ, s = e^{ℓ/2}·sqrt(log1p(z)/z) and
// ds/dℓ = e^{ℓ/2} / (2(1+z)·sqrt(log1p(z)/z)) (→ e^{ℓ/2}/2 as ℓ → −∞).
struct SqrtSoftplus {
  double value;
  double derivative;
};
SqrtSoftplus sqrt_softplus(double logit);

// scores[i] = sqrt_softplus(logits[i]).value for i < n (in double, stored as T).
template <class T>
void router_scores(const T* logits, int64_t n, T* scores);

// expert_index [N, K] (written): per token the top K of scores + bias (bias
// nullable = zeros) in ranks_before order (kernels/top_k.hpp), by one thread.
template <class T>
void router_top_k(const T* scores, const T* bias, int64_t N, int64_t E, int64_t K,
                  int32_t* expert_index);

// expert_index [N, K] (written) = the tid2eid rows [·, K] of token_ids [N]
// (ids and entries already checked).
void router_hash(const int64_t* token_ids, const int64_t* tid2eid, int64_t N, int64_t K,
                 int32_t* expert_index);

// combine [N, K] (written) from the unbiased scores [N, E] of the selected experts.
template <class T>
void router_combine(const RouterCombineParams& params, const T* scores, const int32_t* expert_index,
                    int64_t N, int64_t E, int64_t K, T* combine);

// freq [B, E] (written): f_{b,e} = E/(K·T_b)·#{t in sequence b : e ∈ idx_t}
// over the B sequences [B, 2] (first row, length); a token naming an expert
// twice counts once.
void router_balance_frequencies(const int32_t* expert_index, int64_t K, int64_t E,
                                const int64_t* sequences, int64_t B, double* freq);

// L_bal = (1/B)·Σ_b α·Σ_e f_{b,e}·P_{b,e} (scores [N, E], freq [B, E]).
template <class T>
double router_balance_loss(double weight, const T* scores, int64_t N, int64_t E, const double* freq,
                           const int64_t* sequences, int64_t B);

// The balance loss's part of the router backward; sequences null: none.
struct RouterBalance {
  const int64_t* sequences = nullptr;    // [count, 2] first row, length
  int64_t count = 0;                     // B
  const double* freq = nullptr;          // [B, E]
  const int64_t* sequence_of = nullptr;  // [N] −1: in none
  double weight = 0.0;                   // α
  double d_loss = 0.0;                   // dLoss/dL_bal
};

// Tokens [begin, end): d_combine [N, K] -> ds through the normalisation
// (selected experts), plus the balance loss -> ds (all experts), then
// dℓ = ds·σ(ℓ)/(2s) into dlogits [N, E] (entries with ds = 0 are left untouched).
template <class T>
void router_backward(const RouterCombineParams& params, const RouterBalance& balance,
                     const T* logits, const T* scores, const int32_t* expert_index,
                     const T* combine, const T* d_combine, int64_t E, int64_t K, int64_t begin,
                     int64_t end, T* dlogits);

// b_e −= speed if load_e·E > Σ load, += speed if below, unchanged if equal.
template <class T>
void router_bias_update(T* bias, const int64_t* load, int64_t n_experts, double speed);

// h [rows, I] (written) = scale ⊙ SiLU(min(g, L))·clamp(v, −L, L) of gate_pre,
// up_pre [rows, I]; row_scale [rows] nullable (= 1); limit <= 0: no clamp.
template <class T>
void swiglu_forward(const T* gate_pre, const T* up_pre, const T* row_scale, int64_t rows, int64_t I,
                    double limit, T* h);

// dh [rows, I] (gradient of the scaled h) -> dg, dv [rows, I] (written),
// d_row_scale [rows] (written; nullable).
template <class T>
void swiglu_backward(const T* gate_pre, const T* up_pre, const T* row_scale, const T* dh,
                     int64_t rows, int64_t I, double limit, T* dg, T* dv, T* d_row_scale);

// One linear per group of rows: rows [offsets[g], offsets[g+1]) of x [·, K]
// times w[g] [N, K]ᵀ into the same rows of y [·, N] (written); groups without
// rows are skipped (their w may be null).
template <class T>
void grouped_rows_linear_forward(const int64_t* offsets, int64_t groups, const T* x,
                                 const T* const* w, int64_t N, int64_t K, T* y,
                                 Precision precision);

// Backward per group: dx rows = dy·w[g] (written, or += with accumulate_dx;
// dx nullable), dw[g] += dyᵀ·x (dw or its entries nullable).
template <class T>
void grouped_rows_linear_backward(const int64_t* offsets, int64_t groups, const T* x,
                                  const T* const* w, const T* dy, T* dx, T* const* dw, int64_t N,
                                  int64_t K, Precision precision, bool accumulate_dx);

// Row i of rows [P, width] (width = d, or d + 1 with the weight last) is
// token pair_order[i] / top_k's row of x [·, d]; with combine [·, top_k], its
// weight combine[pair_order[i]] goes to row_combine[i] (nullable) or, when
// width = d + 1, to the row's last column.
template <class T>
void moe_permute(const T* x, int64_t d, int64_t top_k, const int64_t* pair_order, int64_t P,
                 const T* combine, int64_t width, T* rows, T* row_combine);

// y[t] += rows[pair_row[t·K + k]] for k = 0..K−1 in slot order, t < M
// (rows [·, d], y [M, d]).
template <class T>
void moe_unpermute(const T* rows, int64_t d, const int64_t* pair_row, int64_t M, int64_t K, T* y);

// packed [M, width] (width = d, or d + 1): row i = rows[index[i]] [·, d],
// then weights[index[i]] when width = d + 1.
template <class T>
void pack_rows(const T* rows, const T* weights, int64_t d, const int64_t* index, int64_t M,
               int64_t width, T* packed);

// The inverse: rows[index[i]] = packed[i, :d] and, when width = d + 1,
// weights[index[i]] = packed[i, d] (index null: i).
template <class T>
void unpack_rows(const T* packed, int64_t width, const int64_t* index, int64_t M, int64_t d,
                 T* rows, T* weights);

}  // namespace trex::kernels
