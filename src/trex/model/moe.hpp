#pragma once
// DeepSeek-V4 mixture-of-experts FFN (spec §2.7, §3.1, §3.3, §3.6), the layer:
//
//   y = Σ_k w_k·Expert_{idx_k}(x) + Shared(x),
//
// wired as router -> token dispatcher -> experts -> combine, as in Megatron-Core:
//   moe_router.hpp        scores s = sqrt(softplus(x W_gᵀ)), top-k / hash selection,
//                         combine weights w, balance loss, their backward, bias update;
//   token_dispatcher.hpp  brings each (token, slot) pair's row to its expert and the
//                         output back (local_token_dispatcher.hpp runs all experts here;
//                         parallel/ep_token_dispatcher.hpp over EP ranks);
//   moe_experts.hpp       grouped SwiGLU experts over per-expert row blocks, shared expert.
// The routed outputs are added per token in slot order after the shared
// expert's, and every reduction has a fixed order, so results depend neither
// on the OpenMP thread count nor on the dispatcher's grouping of the rows.
#include <cstdint>
#include <memory>
#include <vector>

#include "trex/model/moe_experts.hpp"
#include "trex/model/moe_router.hpp"
#include "trex/model/moe_types.hpp"
#include "trex/model/token_dispatcher.hpp"

namespace trex::model {

struct ModelConfig;

// Dims of layer `layer` (MTP layers: index ≥ num_hidden_layers, never hash
// routed) for B sequences of S tokens. Checks the config keys the block relies
// on (scoring_func "sqrtsoftplus", n_shared_experts 0 or 1, ...) and throws
// trex::Error naming the key otherwise.
MoeDims moe_dims(const ModelConfig& config, int64_t layer, int64_t batch, int64_t seq,
                 double balance_loss_weight = 0.0);

template <class T>
struct MoeCache {
  // Selection (integer constants for backward; reused by fixed_selection).
  kernels::Array<int32_t> expert_index;  // [N, K]
  // [E] (token, slot) pairs routed to each expert in this call: host bookkeeping
  // (the trainer sums it over micro-batches for update_router_bias).
  std::vector<int64_t> expert_load;
  double balance_loss = 0.0;  // L_bal (0 when not computed)
  bool balance_loss_active = false;

  // Saved activations.
  kernels::Array<T> x;        // [N, d] block input
  kernels::Array<T> logits;   // [N, E] ℓ
  kernels::Array<T> scores;   // [N, E] s
  kernels::Array<T> combine;  // [N, K] w
  // The routed experts' activations per group of rows the dispatcher ran
  // (the local dispatcher: one group, every pair sorted by expert).
  std::vector<ExpertActivations<T>> routed;
  kernels::Array<T> shared_gate_pre;  // [N, I]
  kernels::Array<T> shared_up_pre;    // [N, I]
  // The dispatcher's own state for the backward (token_dispatcher.hpp).
  std::unique_ptr<DispatchState> dispatch;
};

// x [N, d] (the ffn_norm output), token_ids [N] (hash layers only; may be null
// otherwise), y [N, d] written. With fixed_selection the expert indices already
// in cache.expert_index are reused (finite-difference checks, anticipatory
// routing); they must have the shape [N, K] and valid values.
// dispatcher (nullable: a LocalTokenDispatcher) runs the routed experts; the
// call is collective where it is (expert parallel: over its EP group). The ops
// run on ctx's backend; the experts multiply in ctx.precision, the router in fp32.
template <class T>
void moe_forward(const MoeDims& dims, const MoeWeights<T>& weights, const T* x,
                 const int64_t* token_ids, MoeCache<T>& cache, T* y, bool fixed_selection = false,
                 TokenDispatcher<T>* dispatcher = nullptr, const kernels::OpContext& ctx = {});

// dy [N, d]; d_balance_loss = dLoss/dL_bal (normally 1; ignored when the
// forward did not compute the balance loss). dx [N, d] written (nullable).
// dispatcher: one of the same kind, group and map as the forward's (throws
// trex::Error otherwise). Only the experts the dispatcher runs here receive
// weight gradients.
template <class T>
void moe_backward(const MoeDims& dims, const MoeWeights<T>& weights, const MoeCache<T>& cache,
                  const T* dy, T d_balance_loss, MoeGrads<T>& grads, T* dx,
                  TokenDispatcher<T>* dispatcher = nullptr, const kernels::OpContext& ctx = {});

}  // namespace trex::model
