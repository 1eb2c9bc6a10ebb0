#include "trex/model/moe_experts.hpp"

#include <algorithm>

#include "trex/core/profile.hpp"

namespace trex::model {
namespace {

using kernels::Tensor;

// Every expert's weight [rows, cols]; undefined for the experts not stored here.
template <class T>
std::vector<Tensor> expert_weights(const std::vector<const T*>& w, int64_t rows, int64_t cols) {
  std::vector<Tensor> tensors;
  for (const T* e : w) tensors.push_back(Tensor::optional(e, {rows, cols}));
  return tensors;
}

// Every expert's weight gradient (none when the vector is empty: frozen).
template <class T>
std::vector<Tensor> expert_grads(const std::vector<T*>& g, int64_t rows, int64_t cols) {
  std::vector<Tensor> tensors;
  for (T* e : g) tensors.push_back(Tensor::optional(e, {rows, cols}));
  return tensors;
}

}  // namespace

template <class T>
bool has_shared_expert(const MoeWeights<T>& weights) {
  const int present = (weights.shared_w1 != nullptr) + (weights.shared_w2 != nullptr) +
                      (weights.shared_w3 != nullptr);
  if (present != 0 && present != 3)
    throw moe_error("shared expert needs all of w1, w2, w3 or none", "moe.shared_w1");
  return present == 3;
}

template <class T>
void grouped_experts_forward(const MoeDims& dims, const MoeWeights<T>& weights,
                             const GroupedRows<T>& rows, ExpertActivations<T>& saved, T* out,
                             const kernels::OpContext& ctx) {
  const int64_t d = dims.hidden, I = dims.inter, n_rows = rows.rows();
  TREX_PROFILE(profile::Op::kGemmExpert, 3 * profile::linear_flops(n_rows, I, d));
  const kernels::Backend& ops = ctx.ops();
  saved.gate_pre.assign(n_rows * I, T(0), ops);
  saved.up_pre.assign(n_rows * I, T(0), ops);
  kernels::Array<T> h(n_rows * I, ops);
  const Tensor& offsets = rows.offsets;
  const Tensor x = Tensor::of(rows.x, {n_rows, d});
  const Tensor gate_pre = saved.gate_pre.view({n_rows, I});
  const Tensor up_pre = saved.up_pre.view({n_rows, I});
  ops.grouped_linear_forward(offsets, x, expert_weights(weights.w1, I, d), gate_pre, ctx.precision);
  ops.grouped_linear_forward(offsets, x, expert_weights(weights.w3, I, d), up_pre, ctx.precision);
  ops.swiglu_forward(gate_pre, up_pre, Tensor::of(rows.scale, {n_rows}), dims.swiglu_limit,
                     h.view({n_rows, I}));
  ops.grouped_linear_forward(offsets, h.view({n_rows, I}), expert_weights(weights.w2, d, I),
                             Tensor::of(out, {n_rows, d}), ctx.precision);
}

template <class T>
void grouped_experts_backward(const MoeDims& dims, const MoeWeights<T>& weights,
                              const MoeGrads<T>& grads, const GroupedRows<T>& rows,
                              const ExpertActivations<T>& saved, const T* dout, T* dx, T* dscale,
                              const kernels::OpContext& ctx) {
  const int64_t d = dims.hidden, I = dims.inter, n_rows = rows.rows();
  TREX_PROFILE(profile::Op::kGemmExpert, 3 * profile::linear_backward_flops(n_rows, I, d));
  const kernels::Backend& ops = ctx.ops();
  kernels::Array<T> h(n_rows * I, ops), dh(n_rows * I, ops), dg(n_rows * I, ops),
      dv(n_rows * I, ops);
  const Tensor& offsets = rows.offsets;
  const Tensor x = Tensor::of(rows.x, {n_rows, d});
  const Tensor scale = Tensor::of(rows.scale, {n_rows});
  const Tensor gate_pre = saved.gate_pre.view({n_rows, I});
  const Tensor up_pre = saved.up_pre.view({n_rows, I});
  const Tensor dx_rows = Tensor::optional(dx, {n_rows, d});
  // h is recomputed; dh = dout · W2 (gradient w.r.t. the scaled h), dW2 += doutᵀ · h.
  ops.swiglu_forward(gate_pre, up_pre, scale, dims.swiglu_limit, h.view({n_rows, I}));
  ops.grouped_linear_backward(offsets, h.view({n_rows, I}), expert_weights(weights.w2, d, I),
                              Tensor::of(dout, {n_rows, d}), dh.view({n_rows, I}),
                              expert_grads(grads.w2, d, I), {ctx.precision});
  ops.swiglu_backward(gate_pre, up_pre, scale, dh.view({n_rows, I}), dims.swiglu_limit,
                      dg.view({n_rows, I}), dv.view({n_rows, I}), Tensor::of(dscale, {n_rows}));
  ops.grouped_linear_backward(offsets, x, expert_weights(weights.w1, I, d), dg.view({n_rows, I}),
                              dx_rows, expert_grads(grads.w1, I, d), {ctx.precision});
  ops.grouped_linear_backward(offsets, x, expert_weights(weights.w3, I, d), dv.view({n_rows, I}),
                              dx_rows, expert_grads(grads.w3, I, d),
                              {ctx.precision, /*accumulate=*/true});
}

template <class T>
void shared_expert_forward(const MoeDims& dims, const MoeWeights<T>& weights, const T* x,
                           kernels::Array<T>& gate_pre, kernels::Array<T>& up_pre, T* y,
                           const kernels::OpContext& ctx) {
  const int64_t N = dims.tokens(), d = dims.hidden, I = dims.inter;
  const kernels::Backend& ops = ctx.ops();
  if (!has_shared_expert(weights)) {
    gate_pre.resize(0, ops);
    up_pre.resize(0, ops);
    ops.fill(Tensor::of(y, {N, d}), 0.0);
    return;
  }
  TREX_PROFILE(profile::Op::kGemmShared, 3 * profile::linear_flops(N, I, d));
  gate_pre.assign(N * I, T(0), ops);
  up_pre.assign(N * I, T(0), ops);
  kernels::Array<T> hs(N * I, ops);
  const kernels::LinearOptions linear{ctx.precision};
  const Tensor xs = Tensor::of(x, {N, d});
  const Tensor gate = gate_pre.view({N, I});
  const Tensor up = up_pre.view({N, I});
  ops.linear_forward(xs, Tensor::of(weights.shared_w1, {I, d}), gate, linear);
  ops.linear_forward(xs, Tensor::of(weights.shared_w3, {I, d}), up, linear);
  ops.swiglu_forward(gate, up, Tensor(), dims.swiglu_limit, hs.view({N, I}));
  ops.linear_forward(hs.view({N, I}), Tensor::of(weights.shared_w2, {d, I}), Tensor::of(y, {N, d}),
                     linear);
}

template <class T>
void shared_expert_backward(const MoeDims& dims, const MoeWeights<T>& weights,
                            const MoeGrads<T>& grads, const T* x, const kernels::Array<T>& gate_pre,
                            const kernels::Array<T>& up_pre, const T* dy, T* dx,
                            const kernels::OpContext& ctx) {
  const int64_t N = dims.tokens(), d = dims.hidden, I = dims.inter;
  const kernels::Backend& ops = ctx.ops();
  if (!has_shared_expert(weights)) {
    if (dx) ops.fill(Tensor::of(dx, {N, d}), 0.0);
    return;
  }
  TREX_PROFILE(profile::Op::kGemmShared, 3 * profile::linear_backward_flops(N, I, d));
  kernels::Array<T> hs(N * I, ops), dhs(N * I, ops), dgs(N * I, ops), dvs(N * I, ops);
  const Tensor xs = Tensor::of(x, {N, d});
  const Tensor gate = gate_pre.view({N, I});
  const Tensor up = up_pre.view({N, I});
  const Tensor dxs = Tensor::optional(dx, {N, d});
  ops.swiglu_forward(gate, up, Tensor(), dims.swiglu_limit, hs.view({N, I}));
  ops.linear_backward(hs.view({N, I}), Tensor::of(weights.shared_w2, {d, I}),
                      Tensor::of(dy, {N, d}), dhs.view({N, I}),
                      Tensor::optional(grads.shared_w2, {d, I}), {ctx.precision});
  ops.swiglu_backward(gate, up, Tensor(), dhs.view({N, I}), dims.swiglu_limit, dgs.view({N, I}),
                      dvs.view({N, I}), Tensor());
  ops.linear_backward(xs, Tensor::of(weights.shared_w1, {I, d}), dgs.view({N, I}), dxs,
                      Tensor::optional(grads.shared_w1, {I, d}), {ctx.precision});
  ops.linear_backward(xs, Tensor::of(weights.shared_w3, {I, d}), dvs.view({N, I}), dxs,
                      Tensor::optional(grads.shared_w3, {I, d}),
                      {ctx.precision, /*accumulate=*/dx != nullptr});
}

#define TREX_MOE_EXPERTS_INSTANTIATE(T)                                                           \
  template bool has_shared_expert<T>(const MoeWeights<T>&);                                       \
  template void grouped_experts_forward<T>(const MoeDims&, const MoeWeights<T>&,                  \
                                           const GroupedRows<T>&, ExpertActivations<T>&, T*,      \
                                           const kernels::OpContext&);                            \
  template void grouped_experts_backward<T>(                                                      \
      const MoeDims&, const MoeWeights<T>&, const MoeGrads<T>&, const GroupedRows<T>&,            \
      const ExpertActivations<T>&, const T*, T*, T*, const kernels::OpContext&);                  \
  template void shared_expert_forward<T>(const MoeDims&, const MoeWeights<T>&, const T*,          \
                                         kernels::Array<T>&, kernels::Array<T>&, T*,              \
                                         const kernels::OpContext&);                              \
  template void shared_expert_backward<T>(const MoeDims&, const MoeWeights<T>&,                   \
                                          const MoeGrads<T>&, const T*, const kernels::Array<T>&, \
                                          const kernels::Array<T>&, const T*, T*,                 \
                                          const kernels::OpContext&);

TREX_MOE_EXPERTS_INSTANTIATE(float)
TREX_MOE_EXPERTS_INSTANTIATE(double)
#undef TREX_MOE_EXPERTS_INSTANTIATE

}  // namespace trex::model
