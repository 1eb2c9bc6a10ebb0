#include "trex/model/local_token_dispatcher.hpp"

#include <optional>
#include <vector>

#include "trex/core/profile.hpp"
#include "trex/kernels/array.hpp"
#include "trex/model/moe_types.hpp"

namespace trex::model {
namespace {

using kernels::Tensor;

// The pairs of one call, counting-sorted by expert (Backend::counting_sort).
struct LocalDispatchState final : DispatchState {
  kernels::Array<int64_t> offsets;      // [E + 1] start of each expert's block in sorted order
  kernels::Array<int64_t> sorted_pair;  // [P] sorted row -> pair (token·K + slot)
  kernels::Array<int64_t> pair_row;     // [P] pair -> sorted row
};

}  // namespace

template <class T>
void LocalTokenDispatcher<T>::forward(const RoutedTokens<T>& tokens,
                                      ExpertForwardCompute<T>& compute,
                                      std::unique_ptr<DispatchState>& state, T* y) {
  const int64_t N = tokens.tokens, d = tokens.hidden, E = tokens.n_experts, K = tokens.top_k;
  const int64_t P = tokens.pairs();
  std::optional<profile::Scope> section(std::in_place, profile::Op::kDispatch);
  LocalDispatchState& sort = dispatch_state<LocalDispatchState>(state);
  // Stable counting sort of the pairs by expert.
  const kernels::Backend& ops = tokens.ops();
  sort.offsets.resize(E + 1, ops);
  sort.sorted_pair.resize(P, ops);
  sort.pair_row.resize(P, ops);
  ops.counting_sort(Tensor::of(tokens.expert_index, {P}), sort.offsets.view({E + 1}),
                    sort.sorted_pair.view({P}), sort.pair_row.view({P}));

  // Gather rows and combine weights in sorted order.
  kernels::Array<T> xs(P * d, ops), scale(P, ops);
  ops.moe_permute(K, Tensor::of(tokens.x, {N, d}), sort.sorted_pair.view({P}),
                  Tensor::of(tokens.combine, {N, K}), xs.view({P, d}), scale.view({P}));
  // outs: the w-scaled output of pair p's expert at row sort.pair_row[p].
  kernels::Array<T> outs(P * d, ops);
  section.reset();
  compute.experts(0, {sort.offsets.view({E + 1}), P, xs.data(), scale.data()}, outs.data());
  compute.local();
  ops.moe_unpermute(outs.view({P, d}), sort.pair_row.view({N, K}), Tensor::of(y, {N, d}));
}

template <class T>
void LocalTokenDispatcher<T>::backward(const RoutedTokens<T>& tokens, const DispatchState& state,
                                       const T* dy, ExpertBackwardCompute<T>& compute, T* dx,
                                       T* d_combine) {
  const auto* sort = dynamic_cast<const LocalDispatchState*>(&state);
  if (!sort)
    throw moe_error("local backward of a forward that another token dispatcher ran",
                    "moe.dispatcher");
  const int64_t N = tokens.tokens, d = tokens.hidden, K = tokens.top_k, P = tokens.pairs();
  const int64_t E = tokens.n_experts;
  if (sort->pair_row.size() != P || sort->offsets.size() != E + 1)
    throw moe_error("cache does not match the dims (run moe_forward first)", "moe.cache");

  // Routed experts, grouped: gather x and dy rows in sorted order.
  std::optional<profile::Scope> section(std::in_place, profile::Op::kDispatch);
  const kernels::Backend& ops = tokens.ops();
  const Tensor sorted_pair = sort->sorted_pair.view({P});
  kernels::Array<T> xs(P * d, ops), dys(P * d, ops), scale(P, ops);
  ops.moe_permute(K, Tensor::of(tokens.x, {N, d}), sorted_pair, Tensor::of(tokens.combine, {N, K}),
                  xs.view({P, d}), scale.view({P}));
  ops.moe_permute(K, Tensor::of(dy, {N, d}), sorted_pair, Tensor(), dys.view({P, d}), Tensor());
  section.reset();
  // dxs [P, d] / dscale [P]: gradients w.r.t. each sorted row and its combine weight.
  kernels::Array<T> dxs(dx ? P * d : 0, ops), dscale(P, ops);
  compute.experts(0, {sort->offsets.view({E + 1}), P, xs.data(), scale.data()}, dys.data(),
                  dx ? dxs.data() : nullptr, dscale.data());
  compute.local();
  if (dx) ops.moe_unpermute(dxs.view({P, d}), sort->pair_row.view({N, K}), Tensor::of(dx, {N, d}));
  ops.gather_rows(dscale.view({P, 1}), sort->pair_row.view({P}), Tensor::of(d_combine, {P, 1}));
  compute.tokens_done(0, N);
}

template class LocalTokenDispatcher<float>;
template class LocalTokenDispatcher<double>;

}  // namespace trex::model
