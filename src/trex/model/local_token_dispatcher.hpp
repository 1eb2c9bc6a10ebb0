#pragma once
// The token dispatcher that runs every routed expert in this process
// (token_dispatcher.hpp): the (token, slot) pairs are counting-sorted by
// expert (stable), each expert's rows gathered into one contiguous block with
// their combine weights (the backend's moe_permute), the experts run as one
// group over all blocks, and the outputs are added per token in slot order
// (moe_unpermute). Its state keeps the sorted order; the backward gathers x and
// dy again in that order. Every loop has a fixed order, so results do not
// depend on the OpenMP thread count.
#include "trex/model/token_dispatcher.hpp"

namespace trex::model {

template <class T>
class LocalTokenDispatcher final : public TokenDispatcher<T> {
 public:
  bool runs_expert(int64_t) const override { return true; }
  void forward(const RoutedTokens<T>& tokens, ExpertForwardCompute<T>& compute,
               std::unique_ptr<DispatchState>& state, T* y) override;
  void backward(const RoutedTokens<T>& tokens, const DispatchState& state, const T* dy,
                ExpertBackwardCompute<T>& compute, T* dx, T* d_combine) override;
};

}  // namespace trex::model
