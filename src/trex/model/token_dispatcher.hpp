#pragma once
// The token dispatcher of a MoE block, as Megatron-Core's token_dispatcher: the
// part of the layer that brings every routed (token, slot) pair's row to its
// expert and the expert's output back to the token. The layer routes
// (moe_router.hpp) and owns the experts (moe_experts.hpp); the dispatcher
// decides where and when the routed experts run. LocalTokenDispatcher
// (local_token_dispatcher.hpp) runs them all here; the expert-parallel one
// (parallel/ep_token_dispatcher.hpp) sends the rows to the EP ranks that own the
// experts and overlaps the transfers with compute.
//
// The dispatcher drives the schedule and calls back into the layer
// (ExpertForwardCompute / ExpertBackwardCompute): routed experts over rows
// grouped by expert, the work that needs no routed row (the shared expert),
// and, in the backward, the router of tokens whose gradients are complete. So
// an implementation may run the experts in several groups of rows, start
// transfers before computing, and run the local work while rows are in flight.
//
// Every implementation adds the routed outputs of a token in slot order to
// what the local work wrote (y_t = Shared(x_t) + w_0·E_0(x_t) + w_1·E_1(x_t)
// + ..., left to right), so the per-token arithmetic does not depend on the
// dispatcher. Nothing here names a transport or a device.
#include <cstdint>
#include <memory>

#include "trex/kernels/backend.hpp"
#include "trex/model/moe_experts.hpp"

namespace trex::model {

// The routed pairs of one MoE call: pair p = t·K + k sends token t's row to
// expert expert_index[p] with combine weight combine[p].
template <class T>
struct RoutedTokens {
  int64_t tokens = 0;                     // N
  int64_t hidden = 0;                     // d
  int64_t n_experts = 0;                  // E
  int64_t top_k = 0;                      // K
  const T* x = nullptr;                   // [N, d]
  const int32_t* expert_index = nullptr;  // [N, K], values in [0, E)
  const T* combine = nullptr;             // [N, K]
  // The layer's backend: the dispatcher moves the rows with its ops
  // (moe_permute, moe_unpermute, pack_rows, unpack_rows).
  const kernels::Backend* backend = nullptr;  // null: kernels::default_backend()
  int64_t pairs() const { return tokens * top_k; }
  const kernels::Backend& ops() const { return backend ? *backend : kernels::default_backend(); }
};

// What the layer computes for a dispatcher's forward.
template <class T>
class ExpertForwardCompute {
 public:
  virtual ~ExpertForwardCompute() = default;
  // out [rows, d] (written) = scale ⊙ Expert_e(x) over rows grouped by expert.
  // group numbers the calls of one forward (0, 1, ...); the backward passes
  // the same group with the same rows.
  virtual void experts(int64_t group, const GroupedRows<T>& rows, T* out) = 0;
  // Writes y [N, d] with everything that needs no routed row; called once,
  // before any routed output is added to y.
  virtual void local() = 0;
};

// What the layer computes for a dispatcher's backward.
template <class T>
class ExpertBackwardCompute {
 public:
  virtual ~ExpertBackwardCompute() = default;
  // dout [rows, d] of forward group `group` (the same rows) -> dx [rows, d]
  // (written; nullable: not needed), dscale [rows] = dLoss/d(row scale) (written).
  virtual void experts(int64_t group, const GroupedRows<T>& rows, const T* dout, T* dx,
                       T* dscale) = 0;
  // Writes dx [N, d] (when not null) with the local work's input gradient;
  // called once, before any routed input gradient is added to dx.
  virtual void local() = 0;
  // Tokens [begin, end) have all their routed input gradients in dx and their
  // d_combine; called for ascending ranges that cover every token once.
  virtual void tokens_done(int64_t begin, int64_t end) = 0;
};

// What a dispatcher's backward needs from its forward. Each implementation
// keeps its own kind; the layer only holds it (MoeCache::dispatch).
class DispatchState {
 public:
  virtual ~DispatchState() = default;
};

// Collective where the implementation is: every rank of its group runs the
// same calls in the same order.
template <class T>
class TokenDispatcher {
 public:
  virtual ~TokenDispatcher() = default;
  // Whether expert e's weights are used here (the local dispatcher: every expert).
  virtual bool runs_expert(int64_t expert) const = 0;
  // Runs the routed experts of every pair and adds their outputs into y [N, d]
  // per token in slot order, after compute.local() wrote y. state becomes this
  // call's (its buffers are reused when it already is this dispatcher's kind).
  virtual void forward(const RoutedTokens<T>& tokens, ExpertForwardCompute<T>& compute,
                       std::unique_ptr<DispatchState>& state, T* y) = 0;
  // Backward of the forward that left `state` (the same tokens): dy [N, d];
  // adds the routed input gradients into dx [N, d] (nullable) per token in
  // slot order after compute.local() wrote it, writes d_combine [N, K] =
  // dLoss/d(combine weight), and calls compute.tokens_done as tokens complete.
  // Throws trex::Error when the state is not its own kind's or does not match.
  virtual void backward(const RoutedTokens<T>& tokens, const DispatchState& state, const T* dy,
                        ExpertBackwardCompute<T>& compute, T* dx, T* d_combine) = 0;
};

// The dispatchers of a model's MoE blocks (main layers, then MTP).
template <class T>
class TokenDispatchers {
 public:
  virtual ~TokenDispatchers() = default;
  // The dispatcher of MoE block `block`, whose layer has n_experts routed experts.
  virtual std::unique_ptr<TokenDispatcher<T>> for_block(int64_t block, int64_t n_experts) = 0;
};

// For implementations: the state of kind S in `slot`, made there unless it
// already holds one.
template <class S>
S& dispatch_state(std::unique_ptr<DispatchState>& slot) {
  if (auto* existing = dynamic_cast<S*>(slot.get())) return *existing;
  auto made = std::make_unique<S>();
  S& state = *made;
  slot = std::move(made);
  return state;
}

}  // namespace trex::model
