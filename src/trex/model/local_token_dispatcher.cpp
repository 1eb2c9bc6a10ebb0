#include "trex/model/local_token_dispatcher.hpp"

#include <optional>
#include <vector>

#include "trex/core/profile.hpp"
#include "trex/kernels/array.hpp"
#include "trex/model/moe_types.hpp"

namespace trex::model {
namespace {

using kernels::Tensor;

// The pairs of one call, counting-sorted by expert (on the host: the plan of
// which row goes where, like the expert-parallel dispatcher's send plans).
struct LocalDispatchState final : DispatchState {
  std::vector<int64_t> offsets;      // [E + 1] start of each expert's block in sorted order
  std::vector<int64_t> sorted_pair;  // [P] sorted row -> pair (token·K + slot)
  std::vector<int64_t> pair_row;     // [P] pair -> sorted row
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
  sort.offsets.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t p = 0; p < P; ++p) ++sort.offsets[tokens.expert_index[p] + 1];
  for (int64_t e = 0; e < E; ++e) sort.offsets[e + 1] += sort.offsets[e];
  sort.sorted_pair.assign(static_cast<size_t>(P), 0);
  sort.pair_row.assign(static_cast<size_t>(P), 0);
  {
    std::vector<int64_t> cursor(sort.offsets.begin(), sort.offsets.end() - 1);
    for (int64_t p = 0; p < P; ++p) {
      const int64_t row = cursor[tokens.expert_index[p]]++;
      sort.sorted_pair[row] = p;
      sort.pair_row[p] = row;
    }
  }

  // Gather rows and combine weights in sorted order.
  const kernels::Backend& ops = tokens.ops();
  kernels::Array<T> xs(P * d, ops), scale(P, ops);
  ops.moe_permute(K, Tensor::of(tokens.x, {N, d}), Tensor::of(sort.sorted_pair.data(), {P}),
                  Tensor::of(tokens.combine, {N, K}), xs.view({P, d}), scale.view({P}));
  // outs: the w-scaled output of pair p's expert at row sort.pair_row[p].
  kernels::Array<T> outs(P * d, ops);
  section.reset();
  compute.experts(0, {sort.offsets, xs.data(), scale.data()}, outs.data());
  compute.local();
  ops.moe_unpermute(outs.view({P, d}), Tensor::of(sort.pair_row.data(), {N, K}),
                    Tensor::of(y, {N, d}));
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
  if (static_cast<int64_t>(sort->pair_row.size()) != P)
    throw moe_error("cache does not match the dims (run moe_forward first)", "moe.cache");

  // Routed experts, grouped: gather x and dy rows in sorted order.
  std::optional<profile::Scope> section(std::in_place, profile::Op::kDispatch);
  const kernels::Backend& ops = tokens.ops();
  const Tensor sorted_pair = Tensor::of(sort->sorted_pair.data(), {P});
  kernels::Array<T> xs(P * d, ops), dys(P * d, ops), scale(P, ops);
  ops.moe_permute(K, Tensor::of(tokens.x, {N, d}), sorted_pair, Tensor::of(tokens.combine, {N, K}),
                  xs.view({P, d}), scale.view({P}));
  ops.moe_permute(K, Tensor::of(dy, {N, d}), sorted_pair, Tensor(), dys.view({P, d}), Tensor());
  section.reset();
  // dxs [P, d] / dscale [P]: gradients w.r.t. each sorted row and its combine weight.
  kernels::Array<T> dxs(dx ? P * d : 0, ops), dscale(P, ops);
  compute.experts(0, {sort->offsets, xs.data(), scale.data()}, dys.data(),
                  dx ? dxs.data() : nullptr, dscale.data());
  compute.local();
  if (dx)
    ops.moe_unpermute(dxs.view({P, d}), Tensor::of(sort->pair_row.data(), {N, K}),
                      Tensor::of(dx, {N, d}));
  ops.gather_rows(dscale.view({P, 1}), Tensor::of(sort->pair_row.data(), {P}),
                  Tensor::of(d_combine, {P, 1}));
  compute.tokens_done(0, N);
}

template class LocalTokenDispatcher<float>;
template class LocalTokenDispatcher<double>;

}  // namespace trex::model
