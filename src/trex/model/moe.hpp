#pragma once
// DeepSeek-V4 mixture-of-experts FFN (spec §2.7, §3.1, §3.3, §3.6).
//
//   ℓ = x·W_gᵀ (router, always fp32 GEMM even under bf16 GEMM precision),
//   s = sqrt(softplus(ℓ)) (stable for any ℓ, see sqrt_softplus),
//   score layers: idx = TopK_K(s + b)  (b = aux-loss-free bias, selection only;
//                 ties broken towards the lower expert index, slots ordered by
//                 descending biased score),
//   hash layers:  idx = tid2eid[token_id, 0..K−1] (duplicates allowed),
//   w_k = γ·s_{idx_k} / Σ_j s_{idx_j}   (norm_topk_prob; else w_k = γ·s_{idx_k}),
//   Expert(x) = (SiLU(min(x W1ᵀ, L)) ⊙ clamp(x W3ᵀ, −L, L)) W2ᵀ   (L ≤ 0: no clamp),
//   y = Σ_k w_k·Expert_{idx_k}(x) + Shared(x).
//
// Experts run grouped: the (token, slot) pairs are counting-sorted by expert
// (stable), each expert's rows are gathered into one contiguous block and its
// W1/W3/W2 run as GEMMs over that block (kernels::linear_forward/backward);
// outputs are combined per token in slot order. Every reduction has a fixed
// order, so results do not depend on the OpenMP thread count.
//
// Precision: expert GEMMs multiply in MoeDims::precision (bf16 operands when
// kBF16); the router GEMMs (forward and backward) always run in fp32 (spec:
// router in FP32). The scalar router maths (sqrt-softplus, normalisation, balance loss) is
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
#include <cstdint>
#include <vector>

#include "trex/kernels/precision.hpp"
#include "trex/model/moe_parallel.hpp"

namespace trex::model {

struct ModelConfig;

// Token rows [row, row + len) of the flattened batch.
struct MoeSequence {
  int64_t row = 0;
  int64_t len = 0;
};

struct MoeDims {
  int64_t batch = 1;            // B sequences ...
  int64_t seq = 0;              // ... of S tokens each; token (b, t) is row b·S + t
  int64_t hidden = 0;           // d
  int64_t n_experts = 0;        // E routed experts
  int64_t top_k = 0;            // K experts per token
  int64_t inter = 0;            // I, routed and shared expert width
  double routed_scaling = 1.0;  // γ
  double swiglu_limit = 0.0;    // L; <= 0 disables the clamp
  bool hash_routed = false;     // selection from tid2eid instead of TopK(s + b)
  bool norm_topk_prob = true;
  double balance_loss_weight = 0.0;  // α; 0 disables the balance loss
  bool balance_loss_on_hash_layers = false;
  int64_t vocab = 0;  // rows of tid2eid (hash layers; token ids are checked against it)
  // Sequences of the balance loss when they are not the B rows (packed documents):
  // disjoint, in [0, B·S). Empty: the B rows of S tokens.
  std::vector<MoeSequence> balance_sequences;
  kernels::Precision precision = kernels::Precision::kF32;  // of the expert GEMMs

  int64_t tokens() const { return batch * seq; }
};

// Dims of layer `layer` (MTP layers: index ≥ num_hidden_layers, never hash
// routed) for B sequences of S tokens. Checks the config keys the block relies
// on (scoring_func "sqrtsoftplus", n_shared_experts 0 or 1, ...) and throws
// trex::Error naming the key otherwise.
MoeDims moe_dims(const ModelConfig& config, int64_t layer, int64_t batch, int64_t seq,
                 double balance_loss_weight = 0.0);

template <class T>
struct MoeWeights {
  const T* gate = nullptr;           // [E, d] router weight
  const T* gate_bias = nullptr;      // [E] selection bias (score layers; may be null = zeros)
  const int64_t* tid2eid = nullptr;  // [vocab, K] (hash layers)
  std::vector<const T*> w1, w2, w3;  // per routed expert: w1, w3 [I, d], w2 [d, I]
  const T* shared_w1 = nullptr;      // shared expert [I, d] / [d, I] / [I, d];
  const T* shared_w2 = nullptr;      // all three null = no shared expert
  const T* shared_w3 = nullptr;
};

// Parameter gradients, accumulated (+=). Any pointer may be null (frozen), and
// the expert vectors may be empty. No gradient exists for gate_bias or tid2eid.
template <class T>
struct MoeGrads {
  T* gate = nullptr;
  std::vector<T*> w1, w2, w3;
  T* shared_w1 = nullptr;
  T* shared_w2 = nullptr;
  T* shared_w3 = nullptr;
};

template <class T>
struct MoeCache {
  // Selection (integer constants for backward; reused by fixed_selection).
  std::vector<int32_t> expert_index;  // [N, K]
  std::vector<int64_t> expert_load;   // [E] (token, slot) pairs routed to each expert in this
                                      // call (input of update_router_bias; sum over micro-batches)
  double balance_loss = 0.0;          // L_bal (0 when not computed)
  bool balance_loss_active = false;

  // Saved activations.
  std::vector<T> x;                  // [N, d] block input
  std::vector<T> logits;             // [N, E] ℓ
  std::vector<T> scores;             // [N, E] s
  std::vector<T> combine;            // [N, K] w
  std::vector<int64_t> offsets;      // [E + 1] start of each expert's block in sorted order
  std::vector<int64_t> sorted_pair;  // [N·K] sorted row -> pair (token·K + slot)
  std::vector<int64_t> pair_row;     // [N·K] pair -> sorted row
  std::vector<T> gate_pre;           // [N·K, I] x W1ᵀ before the clamp, sorted rows
  std::vector<T> up_pre;             // [N·K, I] x W3ᵀ before the clamp, sorted rows
  std::vector<T> shared_gate_pre;    // [N, I]
  std::vector<T> shared_up_pre;      // [N, I]

  // Expert-parallel calls: sorted_pair / pair_row then describe the send order
  // (DispatchPlan), offsets, gate_pre and up_pre stay empty, and the rows this
  // rank computed for its experts are kept per chunk (ReceivePlan layout).
  struct EpChunk {
    ReceivePlan recv;
    std::vector<T> xs;                // [rows, d] grouped input rows
    std::vector<T> scale;             // [rows] their combine weights
    std::vector<T> gate_pre, up_pre;  // [rows, I]
  };
  bool expert_parallel = false;
  std::vector<int64_t> ep_rows;       // [chunks][ranks] pairs sent per chunk and rank
  std::vector<int64_t> ep_chunk_row;  // [chunks + 1] first send row of each chunk
  std::vector<int64_t> ep_bounds;     // [chunks + 1] first token of each chunk
  std::vector<EpChunk> ep_chunks;
};

// x [N, d] (the ffn_norm output), token_ids [N] (hash layers only; may be null
// otherwise), y [N, d] written. With fixed_selection the expert indices already
// in cache.expert_index are reused (finite-difference checks, anticipatory
// routing); they must have the shape [N, K] and valid values.
// parallel (nullable): run the routed experts expert-parallel over
// parallel->comm (moe_parallel.hpp); collective over that group.
template <class T>
void moe_forward(const MoeDims& dims, const MoeWeights<T>& weights, const T* x,
                 const int64_t* token_ids, MoeCache<T>& cache, T* y, bool fixed_selection = false,
                 const MoeParallel* parallel = nullptr);

// dy [N, d]; d_balance_loss = dLoss/dL_bal (normally 1; ignored when the
// forward did not compute the balance loss). dx [N, d] written (nullable).
// parallel: as in the forward (the same group and map; required exactly when
// the forward ran expert-parallel). Only the experts this rank owns receive
// weight gradients.
template <class T>
void moe_backward(const MoeDims& dims, const MoeWeights<T>& weights, const MoeCache<T>& cache,
                  const T* dy, T d_balance_loss, MoeGrads<T>& grads, T* dx,
                  const MoeParallel* parallel = nullptr);

// Aux-loss-free bias update (DeepSeek-V3 rule, spec §3.3): with mean load
// m = Σ load / E, b_e −= speed if load_e > m, b_e += speed if load_e < m,
// unchanged if equal (compared exactly in integers).
template <class T>
void update_router_bias(T* bias, const int64_t* load, int64_t n_experts, double speed);

// s = sqrt(softplus(ℓ)) and ds/dℓ = σ(ℓ)/(2s), evaluated in double without
// overflow or 0/0: for ℓ < 0, with z = e^ℓ, s = e^{ℓ/2}·sqrt(log1p(z)/z) and
// ds/dℓ = e^{ℓ/2} / (2(1+z)·sqrt(log1p(z)/z)) (→ e^{ℓ/2}/2 as ℓ → −∞).
struct SqrtSoftplus {
  double value;
  double derivative;
};
SqrtSoftplus sqrt_softplus(double logit);

}  // namespace trex::model
