#pragma once
// The router of a DeepSeek-V4 MoE block (spec §2.7, §3.3): scores, expert
// selection, combine weights, the sequence-wise balance loss, their backward,
// and the aux-loss-free bias update.
//
//   ℓ = x·W_gᵀ (always an fp32 GEMM, even under bf16 GEMM precision),
//   s = sqrt(softplus(ℓ)) (stable for any ℓ, see kernels::sqrt_softplus),
//   score layers: idx = TopK_K(s + b)  (b = aux-loss-free bias, selection only;
//                 ties broken towards the lower expert index, slots ordered by
//                 descending biased score),
//   hash layers:  idx = tid2eid[token_id, 0..K−1] (duplicates allowed),
//   w_k = γ·s_{idx_k} / Σ_j s_{idx_j}   (norm_topk_prob; else w_k = γ·s_{idx_k}).
//
// Precision: the router GEMMs (forward and backward) always run in fp32 (spec:
// router in FP32), whatever the OpContext's precision says for the experts.
// The scalar router maths (sqrt-softplus, normalisation, balance loss) is
// evaluated in double and stored as T.
//
// Sequence-wise balance loss (spec §3.3), per sequence b of T = seq tokens:
//   s'_{e,t} = s_{e,t}/Σ_e' s_{e',t},  P_e = (1/T)Σ_t s'_{e,t},
//   f_e = E/(K·T)·Σ_t 1[e ∈ idx_t]  (constant; a hash row naming an expert twice counts once),
//   L_b = α Σ_e f_e P_e;   batch reduction: L_bal = (1/B) Σ_b L_b (mean over sequences).
// A packed batch may list its balance sequences instead (MoeDims::balance_sequences:
// one per document, of its own length T; rows in none of them take no part).
// Computed when balance_loss_weight > 0 on score-routed layers, and on hash
// layers only when balance_loss_on_hash_layers is set. Its gradient reaches the
// router weight and x through s (all experts, not only the selected ones).
//
// Every per-token loop is independent of the OpenMP thread count.
#include <cstdint>
#include <vector>

#include "trex/kernels/array.hpp"
#include "trex/kernels/backend.hpp"
#include "trex/model/moe_types.hpp"

namespace trex::model {

// The router's ops run on ctx's backend (backend.hpp: router_scores,
// router_select, router_combine, router_balance_*, router_backward,
// router_bias_update); this file is their orchestration: shapes, checks of
// token ids and selections, the balance sequences.

// x [N, d] -> logits ℓ [N, E], scores s [N, E] (both written).
template <class T>
void router_scores_forward(const MoeDims& dims, const T* gate, const T* x, T* logits, T* scores,
                           const kernels::OpContext& ctx = {});
// dlogits [N, E] -> dx [N, d], dgate [E, d] (both accumulated; nullable).
template <class T>
void router_scores_backward(const MoeDims& dims, const T* gate, const T* x, const T* dlogits, T* dx,
                            T* dgate, const kernels::OpContext& ctx = {});

// expert_index [N, K] (written): TopK(s + b) on score layers, the tid2eid rows
// of token_ids [N] on hash layers (token ids and table entries are checked).
template <class T>
void select_experts(const MoeDims& dims, const MoeWeights<T>& weights, const T* scores,
                    const int64_t* token_ids, int32_t* expert_index,
                    const kernels::OpContext& ctx = {});
// Throws trex::Error (field "moe.expert_index") unless expert_index, a selection
// given from outside, has the shape [N, K] and values in [0, E).
void check_expert_index(const MoeDims& dims, const kernels::Array<int32_t>& expert_index,
                        const kernels::Backend& ops);

// combine [N, K] (written) from the unbiased scores of the selected experts.
template <class T>
void combine_weights_forward(const MoeDims& dims, const T* scores, const int32_t* expert_index,
                             T* combine, const kernels::OpContext& ctx = {});

// Whether the block computes the balance loss (see above).
bool balance_loss_active(const MoeDims& dims);
// L_bal of the selection (mean over the balance sequences).
template <class T>
double balance_loss_forward(const MoeDims& dims, const T* scores, const int32_t* expert_index,
                            const kernels::OpContext& ctx = {});

// What the balance loss contributes to the router backward, computed once per
// backward: frequencies f [sequences, E] and each token's sequence.
struct BalanceLossBackward {
  bool active = false;                  // computed in the forward and d_loss ≠ 0
  double d_loss = 0.0;                  // dLoss/dL_bal
  kernels::Array<int64_t> sequences;    // [sequences, 2] first row, length
  kernels::Array<double> freq;          // [sequences, E]
  kernels::Array<int64_t> sequence_of;  // [N] −1: in none
};
BalanceLossBackward balance_loss_backward_inputs(const MoeDims& dims, const int32_t* expert_index,
                                                 bool active, double d_loss,
                                                 const kernels::OpContext& ctx = {});

// Tokens [begin, end): d_combine [N, K] (dLoss/dw of each pair) -> ds through
// the normalisation (selected experts), plus the balance loss -> ds (all
// experts), then dℓ = ds·σ(ℓ)/(2s) into dlogits [N, E] (entries with ds = 0
// are left untouched).
template <class T>
void router_tokens_backward(const MoeDims& dims, const BalanceLossBackward& balance,
                            const T* logits, const T* scores, const int32_t* expert_index,
                            const T* combine, const T* d_combine, int64_t begin, int64_t end,
                            T* dlogits, const kernels::OpContext& ctx = {});

// Aux-loss-free bias update (DeepSeek-V3 rule, spec §3.3): with mean load
// m = Σ load / E, b_e −= speed if load_e > m, b_e += speed if load_e < m,
// unchanged if equal (compared exactly in integers).
template <class T>
void update_router_bias(T* bias, const int64_t* load, int64_t n_experts, double speed,
                        const kernels::OpContext& ctx = {});

}  // namespace trex::model
