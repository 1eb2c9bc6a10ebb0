#include "trex/model/moe_experts.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>

#include "trex/core/profile.hpp"
#include "trex/kernels/cpu/elementwise.hpp"
#include "trex/kernels/cpu/gemm.hpp"

namespace trex::model {
namespace {

template <class T>
T sigmoid(T v) {
  if (v >= T(0)) return T(1) / (T(1) + std::exp(-v));
  const T e = std::exp(v);
  return e / (T(1) + e);
}

bool clamp_enabled(double limit) {
  return limit > 0.0;
}

// Expert SwiGLU over n contiguous rows. row_scale (nullable) multiplies h
// before W2, so out = row_scale ⊙ Expert(X).
template <class T>
void expert_forward(const T* X, int64_t n, int64_t d, int64_t I, const T* W1, const T* W2,
                    const T* W3, const T* row_scale, double limit, kernels::Precision precision,
                    T* gate_pre, T* up_pre, T* h, T* out) {
  if (n == 0) return;
  kernels::linear_forward(X, W1, gate_pre, n, I, d, precision);
  kernels::linear_forward(X, W3, up_pre, n, I, d, precision);
  const bool clamp = clamp_enabled(limit);
  const T L = static_cast<T>(limit);
  {
    TREX_PROFILE(profile::Op::kSwiglu);
#pragma omp parallel for schedule(static) if (n * I > (1 << 14))
    for (int64_t r = 0; r < n; ++r) {
      const T scale = row_scale ? row_scale[r] : T(1);
      if constexpr (std::is_same_v<T, float>) {
        kernels::swiglu_forward_row(gate_pre + r * I, up_pre + r * I, I, scale, clamp ? L : -1.0f,
                                    h + r * I);
        continue;
      }
      for (int64_t i = 0; i < I; ++i) {
        T g = gate_pre[r * I + i];
        T v = up_pre[r * I + i];
        if (clamp) {
          g = std::min(g, L);
          v = std::clamp(v, -L, L);
        }
        h[r * I + i] = scale * (g * sigmoid(g) * v);
      }
    }
  }
  kernels::linear_forward(h, W2, out, n, d, I, precision);
}

// Backward of expert_forward. dX written (nullable), weight grads accumulated
// (nullable), d_row_scale written (nullable). h, dh, dg, dv: [n, I] workspaces.
template <class T>
void expert_backward(const T* X, int64_t n, int64_t d, int64_t I, const T* W1, const T* W2,
                     const T* W3, const T* row_scale, double limit, kernels::Precision precision,
                     const T* gate_pre, const T* up_pre, const T* dout, T* h, T* dh, T* dg, T* dv,
                     T* dX, T* dW1, T* dW2, T* dW3, T* d_row_scale) {
  if (n == 0) return;
  const bool clamp = clamp_enabled(limit);
  const T L = static_cast<T>(limit);
  std::optional<profile::Scope> swiglu(std::in_place, profile::Op::kSwiglu);
#pragma omp parallel for schedule(static) if (n * I > (1 << 14))
  for (int64_t r = 0; r < n; ++r) {
    const T scale = row_scale ? row_scale[r] : T(1);
    if constexpr (std::is_same_v<T, float>) {
      kernels::swiglu_forward_row(gate_pre + r * I, up_pre + r * I, I, scale, clamp ? L : -1.0f,
                                  h + r * I);
      continue;
    }
    for (int64_t i = 0; i < I; ++i) {
      T g = gate_pre[r * I + i];
      T v = up_pre[r * I + i];
      if (clamp) {
        g = std::min(g, L);
        v = std::clamp(v, -L, L);
      }
      h[r * I + i] = scale * (g * sigmoid(g) * v);
    }
  }
  swiglu.reset();
  // dh = dout · W2 (gradient w.r.t. the scaled h); dW2 += doutᵀ · h.
  kernels::linear_backward(h, W2, dout, dh, dW2, n, d, I, precision);
  swiglu.emplace(profile::Op::kSwiglu);
#pragma omp parallel for schedule(static) if (n * I > (1 << 14))
  for (int64_t r = 0; r < n; ++r) {
    const T scale = row_scale ? row_scale[r] : T(1);
    if constexpr (std::is_same_v<T, float>) {
      const float dscale =
          kernels::swiglu_backward_row(gate_pre + r * I, up_pre + r * I, dh + r * I, I, scale,
                                       clamp ? L : -1.0f, dg + r * I, dv + r * I);
      if (d_row_scale) d_row_scale[r] = dscale;
      continue;
    }
    T dscale = T(0);
    for (int64_t i = 0; i < I; ++i) {
      const T g_raw = gate_pre[r * I + i];
      const T v_raw = up_pre[r * I + i];
      const bool g_pass = !clamp || g_raw <= L;
      const bool v_pass = !clamp || (v_raw >= -L && v_raw <= L);
      const T g = g_pass ? g_raw : L;
      const T v = clamp ? std::clamp(v_raw, -L, L) : v_raw;
      const T sg = sigmoid(g);
      const T act = g * sg;
      const T grad_h_scaled = dh[r * I + i];
      dscale += grad_h_scaled * act * v;
      const T grad_h = grad_h_scaled * scale;
      dg[r * I + i] = g_pass ? grad_h * v * sg * (T(1) + g * (T(1) - sg)) : T(0);
      dv[r * I + i] = v_pass ? grad_h * act : T(0);
    }
    if (d_row_scale) d_row_scale[r] = dscale;
  }
  swiglu.reset();
  kernels::linear_backward(X, W1, dg, dX, dW1, n, I, d, precision);
  kernels::linear_backward(X, W3, dv, dX, dW3, n, I, d, precision,
                           /*accumulate_dx=*/dX != nullptr);
}

template <class T>
T* expert_grad(const std::vector<T*>& grads, int64_t e) {
  return grads.empty() ? nullptr : grads[static_cast<size_t>(e)];
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
                             const GroupedRows<T>& rows, ExpertActivations<T>& saved, T* out) {
  const int64_t E = dims.n_experts, d = dims.hidden, I = dims.inter, n_rows = rows.rows();
  TREX_PROFILE(profile::Op::kGemmExpert, 3 * profile::linear_flops(n_rows, I, d));
  saved.gate_pre.assign(static_cast<size_t>(n_rows * I), T(0));
  saved.up_pre.assign(static_cast<size_t>(n_rows * I), T(0));
  std::vector<T> h(static_cast<size_t>(n_rows * I));
  for (int64_t e = 0; e < E; ++e) {
    const int64_t begin = rows.offsets[e], n = rows.offsets[e + 1] - begin;
    expert_forward(rows.x + begin * d, n, d, I, weights.w1[e], weights.w2[e], weights.w3[e],
                   rows.scale + begin, dims.swiglu_limit, dims.precision,
                   saved.gate_pre.data() + begin * I, saved.up_pre.data() + begin * I,
                   h.data() + begin * I, out + begin * d);
  }
}

template <class T>
void grouped_experts_backward(const MoeDims& dims, const MoeWeights<T>& weights,
                              const MoeGrads<T>& grads, const GroupedRows<T>& rows,
                              const ExpertActivations<T>& saved, const T* dout, T* dx, T* dscale) {
  const int64_t E = dims.n_experts, d = dims.hidden, I = dims.inter, n_rows = rows.rows();
  TREX_PROFILE(profile::Op::kGemmExpert, 3 * profile::linear_backward_flops(n_rows, I, d));
  std::vector<T> h(static_cast<size_t>(n_rows * I)), dh(static_cast<size_t>(n_rows * I)),
      dg(static_cast<size_t>(n_rows * I)), dv(static_cast<size_t>(n_rows * I));
  for (int64_t e = 0; e < E; ++e) {
    const int64_t begin = rows.offsets[e], n = rows.offsets[e + 1] - begin;
    if (n == 0) continue;
    expert_backward(rows.x + begin * d, n, d, I, weights.w1[e], weights.w2[e], weights.w3[e],
                    rows.scale + begin, dims.swiglu_limit, dims.precision,
                    saved.gate_pre.data() + begin * I, saved.up_pre.data() + begin * I,
                    dout + begin * d, h.data() + begin * I, dh.data() + begin * I,
                    dg.data() + begin * I, dv.data() + begin * I, dx ? dx + begin * d : nullptr,
                    expert_grad(grads.w1, e), expert_grad(grads.w2, e), expert_grad(grads.w3, e),
                    dscale + begin);
  }
}

template <class T>
void shared_expert_forward(const MoeDims& dims, const MoeWeights<T>& weights, const T* x,
                           std::vector<T>& gate_pre, std::vector<T>& up_pre, T* y) {
  const int64_t N = dims.tokens(), d = dims.hidden, I = dims.inter;
  if (!has_shared_expert(weights)) {
    gate_pre.clear();
    up_pre.clear();
    std::fill_n(y, N * d, T(0));
    return;
  }
  TREX_PROFILE(profile::Op::kGemmShared, 3 * profile::linear_flops(N, I, d));
  gate_pre.assign(static_cast<size_t>(N * I), T(0));
  up_pre.assign(static_cast<size_t>(N * I), T(0));
  std::vector<T> hs(static_cast<size_t>(N * I));
  expert_forward(x, N, d, I, weights.shared_w1, weights.shared_w2, weights.shared_w3,
                 static_cast<const T*>(nullptr), dims.swiglu_limit, dims.precision, gate_pre.data(),
                 up_pre.data(), hs.data(), y);
}

template <class T>
void shared_expert_backward(const MoeDims& dims, const MoeWeights<T>& weights,
                            const MoeGrads<T>& grads, const T* x, const std::vector<T>& gate_pre,
                            const std::vector<T>& up_pre, const T* dy, T* dx) {
  const int64_t N = dims.tokens(), d = dims.hidden, I = dims.inter;
  if (!has_shared_expert(weights)) {
    if (dx) std::fill_n(dx, N * d, T(0));
    return;
  }
  TREX_PROFILE(profile::Op::kGemmShared, 3 * profile::linear_backward_flops(N, I, d));
  std::vector<T> hs(static_cast<size_t>(N * I)), dhs(static_cast<size_t>(N * I)),
      dgs(static_cast<size_t>(N * I)), dvs(static_cast<size_t>(N * I));
  expert_backward(x, N, d, I, weights.shared_w1, weights.shared_w2, weights.shared_w3,
                  static_cast<const T*>(nullptr), dims.swiglu_limit, dims.precision,
                  gate_pre.data(), up_pre.data(), dy, hs.data(), dhs.data(), dgs.data(), dvs.data(),
                  dx, grads.shared_w1, grads.shared_w2, grads.shared_w3, static_cast<T*>(nullptr));
}

#define TREX_MOE_EXPERTS_INSTANTIATE(T)                                                        \
  template bool has_shared_expert<T>(const MoeWeights<T>&);                                    \
  template void grouped_experts_forward<T>(const MoeDims&, const MoeWeights<T>&,               \
                                           const GroupedRows<T>&, ExpertActivations<T>&, T*);  \
  template void grouped_experts_backward<T>(const MoeDims&, const MoeWeights<T>&,              \
                                            const MoeGrads<T>&, const GroupedRows<T>&,         \
                                            const ExpertActivations<T>&, const T*, T*, T*);    \
  template void shared_expert_forward<T>(const MoeDims&, const MoeWeights<T>&, const T*,       \
                                         std::vector<T>&, std::vector<T>&, T*);                \
  template void shared_expert_backward<T>(const MoeDims&, const MoeWeights<T>&,                \
                                          const MoeGrads<T>&, const T*, const std::vector<T>&, \
                                          const std::vector<T>&, const T*, T*);

TREX_MOE_EXPERTS_INSTANTIATE(float)
TREX_MOE_EXPERTS_INSTANTIATE(double)
#undef TREX_MOE_EXPERTS_INSTANTIATE

}  // namespace trex::model
