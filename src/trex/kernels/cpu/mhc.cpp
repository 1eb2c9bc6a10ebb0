#include "trex/kernels/cpu/mhc.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"
#include "trex/kernels/cpu/elementwise.hpp"
#include "trex/kernels/cpu/gemm.hpp"

namespace trex::kernels {
namespace {

template <class T>
T sigmoid(T z) {
  return T(1) / (T(1) + std::exp(-z));
}

template <class T>
double dot(const T* a, const T* b, int64_t n) {
  // fp32: vectorised, double over fixed lanes (kernels/cpu/elementwise).
  if constexpr (std::is_same_v<T, float>) return dot_double(a, b, n);
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

// y += a·x; fp32 through the cloned AVX-512/AVX2 kernel (same rounding: no
// fused multiply-add on either path).
template <class T>
void add_scaled(T* y, const T* x, T a, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    axpy(y, x, a, n);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
  }
}

// Scratch for one Sinkhorn run with recorded intermediates. Normalisation step
// s (0 .. 2·iters−2) is a column normalisation when s is even, a row
// normalisation when s is odd; states[s] is its output, sums[s] its n sums
// (before + eps).
template <class T>
struct SinkhornWork {
  std::vector<T> softmax, states, sums, grad, grad_in;
  void resize(int64_t n, int64_t iters) {
    const int64_t steps = 2 * iters - 1;
    softmax.resize(static_cast<size_t>(n * n));
    states.resize(static_cast<size_t>(steps * n * n));
    sums.resize(static_cast<size_t>(steps * n));
    grad.resize(static_cast<size_t>(n * n));
    grad_in.resize(static_cast<size_t>(n * n));
  }
};

// Runs Sinkhorn, recording every intermediate in work; writes comb when non-null.
template <class T>
void sinkhorn_record(const T* logits, int64_t n, int64_t iters, T eps, SinkhornWork<T>& work,
                     T* comb) {
  T* p0 = work.softmax.data();
  for (int64_t j = 0; j < n; ++j) {
    const T* row = logits + j * n;
    T mx = row[0];
    for (int64_t k = 1; k < n; ++k) mx = std::max(mx, row[k]);
    T sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      p0[j * n + k] = std::exp(row[k] - mx);
      sum += p0[j * n + k];
    }
    for (int64_t k = 0; k < n; ++k) p0[j * n + k] /= sum;
  }
  const int64_t steps = 2 * iters - 1;
  const T* in = p0;
  for (int64_t s = 0; s < steps; ++s) {
    T* out = work.states.data() + s * n * n;
    T* sums = work.sums.data() + s * n;
    const T add = (s == 0) ? eps : T(0);  // P = softmax + eps feeds the first step
    const bool column = (s % 2 == 0);
    for (int64_t a = 0; a < n; ++a) {
      T sum = 0;
      for (int64_t b = 0; b < n; ++b) sum += column ? in[b * n + a] + add : in[a * n + b] + add;
      sums[a] = sum;
      const T denom = sum + eps;
      for (int64_t b = 0; b < n; ++b) {
        const int64_t idx = column ? b * n + a : a * n + b;
        out[idx] = (in[idx] + add) / denom;
      }
    }
    in = out;
  }
  if (comb) std::copy(in, in + n * n, comb);
}

// dlogits from dcomb using the intermediates recorded by sinkhorn_record.
template <class T>
void sinkhorn_backward_recorded(int64_t n, int64_t iters, T eps, SinkhornWork<T>& work,
                                const T* dcomb, T* dlogits) {
  const int64_t steps = 2 * iters - 1;
  T* dy = work.grad.data();
  T* dx = work.grad_in.data();
  std::copy(dcomb, dcomb + n * n, dy);
  for (int64_t s = steps - 1; s >= 0; --s) {
    const T* y = work.states.data() + s * n * n;
    const T* sums = work.sums.data() + s * n;
    const bool column = (s % 2 == 0);
    // Y = X / (sum + eps) along the axis: dX = (dY − Σ_axis dY⊙Y) / (sum + eps).
    for (int64_t a = 0; a < n; ++a) {
      T inner = 0;
      for (int64_t b = 0; b < n; ++b) {
        const int64_t idx = column ? b * n + a : a * n + b;
        inner += dy[idx] * y[idx];
      }
      const T denom = sums[a] + eps;
      for (int64_t b = 0; b < n; ++b) {
        const int64_t idx = column ? b * n + a : a * n + b;
        dx[idx] = (dy[idx] - inner) / denom;
      }
    }
    std::swap(dy, dx);
  }
  // dy now holds dL/d(softmax + eps) = dL/dsoftmax; row-softmax backward.
  const T* p0 = work.softmax.data();
  for (int64_t j = 0; j < n; ++j) {
    T inner = 0;
    for (int64_t k = 0; k < n; ++k) inner += dy[j * n + k] * p0[j * n + k];
    for (int64_t k = 0; k < n; ++k) dlogits[j * n + k] = p0[j * n + k] * (dy[j * n + k] - inner);
  }
}

// μ = ρ·(φ x̄) for every token: mix [N, rows] and inv_rms [N] written.
template <class T>
void compute_mix(const MhcDims& dims, const T* fn, int64_t rows, const T* X, T* inv_rms, T* mix) {
  const int64_t N = dims.tokens, width = dims.streams_width();
  if (N == 0) return;
  {
    // mHC stays fp32 even when the model's GEMMs run in bf16 (spec §2.0).
    TREX_PROFILE(profile::Op::kGemmMhc, profile::linear_flops(N, rows, width));
    linear_forward(X, fn, mix, N, rows, width, Precision::kF32);
  }
#pragma omp parallel for schedule(static) if (N * width > (1 << 14))
  for (int64_t t = 0; t < N; ++t) {
    const T* x = X + t * width;
    const double mean_sq = dot(x, x, width) / static_cast<double>(width);
    const T rho = static_cast<T>(1.0 / std::sqrt(mean_sq + dims.norm_eps));
    inv_rms[t] = rho;
    for (int64_t i = 0; i < rows; ++i) mix[t * rows + i] *= rho;
  }
}

// Backward of compute_mix. dmix [N, rows] = dL/dμ (overwritten with dL/d(φx̄)).
// grad_fn (+=) and dX (+=) may be null.
template <class T>
void compute_mix_backward(const MhcDims& dims, const T* fn, int64_t rows, const T* X,
                          const T* inv_rms, const T* mix, T* dmix, T* grad_fn, T* dX) {
  const int64_t N = dims.tokens, width = dims.streams_width();
  if (N == 0 || (grad_fn == nullptr && dX == nullptr)) return;
  std::vector<T> rms_coef(static_cast<size_t>(N));
#pragma omp parallel for schedule(static) if (N * rows > (1 << 12))
  for (int64_t t = 0; t < N; ++t) {
    const T rho = inv_rms[t];
    // dρ = dμ · (φx̄) = dμ · μ / ρ;  dx̄ += dρ · (−ρ³ x̄ / (n·d)).
    const double drho = dot(dmix + t * rows, mix + t * rows, rows) / static_cast<double>(rho);
    rms_coef[t] = static_cast<T>(-drho * static_cast<double>(rho) * static_cast<double>(rho) *
                                 static_cast<double>(rho) / static_cast<double>(width));
    for (int64_t i = 0; i < rows; ++i) dmix[t * rows + i] *= rho;
  }
  {
    TREX_PROFILE(profile::Op::kGemmMhc,
                 (dX && grad_fn ? 2 : 1) * profile::linear_flops(N, rows, width));
    linear_backward(X, fn, dmix, dX, grad_fn, N, rows, width, Precision::kF32,
                    /*accumulate_dx=*/true);
  }
  if (dX) {
#pragma omp parallel for schedule(static) if (N * width > (1 << 14))
    for (int64_t t = 0; t < N; ++t) {
      const T c = rms_coef[t];
      const T* x = X + t * width;
      T* g = dX + t * width;
      for (int64_t i = 0; i < width; ++i) g[i] += c * x[i];
    }
  }
}

// Sums per-token gate gradients into base (+=) and scale (+=) in token order,
// so the result does not depend on the thread count. dz [N, rows] = dL/d(α μ + b);
// group_of(i) is the scale index of coefficient i.
template <class T, class GroupOf>
void reduce_gate_grads(int64_t N, int64_t rows, const T* dz, const T* mix, int64_t groups,
                       GroupOf group_of, T* grad_base, T* grad_scale) {
  if (grad_base) {
    std::vector<double> acc(static_cast<size_t>(rows), 0.0);
    for (int64_t t = 0; t < N; ++t)
      for (int64_t i = 0; i < rows; ++i) acc[i] += static_cast<double>(dz[t * rows + i]);
    for (int64_t i = 0; i < rows; ++i) grad_base[i] += static_cast<T>(acc[i]);
  }
  if (grad_scale) {
    std::vector<double> acc(static_cast<size_t>(groups), 0.0);
    for (int64_t t = 0; t < N; ++t)
      for (int64_t i = 0; i < rows; ++i)
        acc[group_of(i)] +=
            static_cast<double>(dz[t * rows + i]) * static_cast<double>(mix[t * rows + i]);
    for (int64_t g = 0; g < groups; ++g) grad_scale[g] += static_cast<T>(acc[g]);
  }
}

// u_t = Σ_j pre_j X_j
template <class T>
void collapse(const MhcDims& dims, const T* pre, const T* X, T* u) {
  const int64_t N = dims.tokens, n = dims.hc_mult, d = dims.hidden;
#pragma omp parallel for schedule(static) if (N * n * d > (1 << 14))
  for (int64_t t = 0; t < N; ++t) {
    T* ut = u + t * d;
    const T* p = pre + t * n;
    for (int64_t i = 0; i < d; ++i) ut[i] = T(0);
    for (int64_t j = 0; j < n; ++j) {
      const T* x = X + (t * n + j) * d;
      for (int64_t i = 0; i < d; ++i) ut[i] += p[j] * x[i];
    }
  }
}

// dpre [N, n] written; dX (+=, nullable) gets pre_j du.
template <class T>
void collapse_backward(const MhcDims& dims, const T* pre, const T* X, const T* du, T* dpre, T* dX) {
  const int64_t N = dims.tokens, n = dims.hc_mult, d = dims.hidden;
#pragma omp parallel for schedule(static) if (N * n * d > (1 << 14))
  for (int64_t t = 0; t < N; ++t) {
    const T* g = du + t * d;
    for (int64_t j = 0; j < n; ++j) {
      const T* x = X + (t * n + j) * d;
      dpre[t * n + j] = static_cast<T>(dot(g, x, d));
      if (dX) {
        T* dx = dX + (t * n + j) * d;
        const T p = pre[t * n + j];
        for (int64_t i = 0; i < d; ++i) dx[i] += p * g[i];
      }
    }
  }
}

}  // namespace

void validate(const MhcDims& dims) {
  if (dims.tokens < 0) throw Error("mhc: tokens must be >= 0").field("tokens");
  if (dims.hidden <= 0) throw Error("mhc: hidden must be > 0").field("hidden_size");
  if (dims.hc_mult <= 0) throw Error("mhc: hc_mult must be > 0").field("hc_mult");
  if (dims.sinkhorn_iters < 1)
    throw Error("mhc: sinkhorn iterations must be >= 1").field("hc_sinkhorn_iters");
  if (!(dims.hc_eps >= 0.0)) throw Error("mhc: hc_eps must be >= 0").field("hc_eps");
  if (!(dims.norm_eps > 0.0)) throw Error("mhc: norm_eps must be > 0").field("rms_norm_eps");
}

template <class T>
void sinkhorn_forward(const T* logits, int64_t n, int64_t iters, double eps, T* comb) {
  SinkhornWork<T> work;
  work.resize(n, iters);
  sinkhorn_record(logits, n, iters, static_cast<T>(eps), work, comb);
}

template <class T>
void sinkhorn_backward(const T* logits, int64_t n, int64_t iters, double eps, const T* dcomb,
                       T* dlogits) {
  SinkhornWork<T> work;
  work.resize(n, iters);
  sinkhorn_record(logits, n, iters, static_cast<T>(eps), work, static_cast<T*>(nullptr));
  sinkhorn_backward_recorded(n, iters, static_cast<T>(eps), work, dcomb, dlogits);
}

template <class T>
void mhc_pre_forward(const MhcDims& dims, const MhcSite<const T>& weights, const T* X, T* u,
                     const MhcState<T>& state) {
  const int64_t N = dims.tokens, n = dims.hc_mult, mixc = dims.mix();
  if (N == 0) return;
  compute_mix(dims, weights.fn, mixc, X, state.inv_rms, state.mix);
  const T a0 = weights.scale[0], a1 = weights.scale[1], a2 = weights.scale[2];
  const T* b = weights.base;
  const T eps = static_cast<T>(dims.hc_eps);
  std::optional<profile::Scope> sinkhorn(std::in_place, profile::Op::kSinkhorn);
#pragma omp parallel if (N >= 32)
  {
    SinkhornWork<T> work;
    work.resize(n, dims.sinkhorn_iters);
    std::vector<T> logits(static_cast<size_t>(n * n));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < N; ++t) {
      const T* mu = state.mix + t * mixc;
      for (int64_t j = 0; j < n; ++j) {
        state.pre[t * n + j] = sigmoid(a0 * mu[j] + b[j]) + eps;
        state.post[t * n + j] = T(2) * sigmoid(a1 * mu[n + j] + b[n + j]);
      }
      for (int64_t i = 0; i < n * n; ++i) logits[i] = a2 * mu[2 * n + i] + b[2 * n + i];
      sinkhorn_record(logits.data(), n, dims.sinkhorn_iters, eps, work, state.comb + t * n * n);
    }
  }
  sinkhorn.reset();
  collapse(dims, state.pre, X, u);
}

template <class T>
void mhc_post_forward(const MhcDims& dims, const T* post_coef, const T* comb_coef, const T* X,
                      const T* y, T* Xout) {
  const int64_t N = dims.tokens, n = dims.hc_mult, d = dims.hidden;
#pragma omp parallel for schedule(static) if (N * n * n * d > (1 << 14))
  for (int64_t t = 0; t < N; ++t) {
    const T* post = post_coef + t * n;
    const T* comb = comb_coef + t * n * n;
    const T* yt = y + t * d;
    for (int64_t k = 0; k < n; ++k) {
      T* out = Xout + (t * n + k) * d;
      for (int64_t i = 0; i < d; ++i) out[i] = post[k] * yt[i];
      for (int64_t j = 0; j < n; ++j)  // X'_k sums over comb's first index
        add_scaled(out, X + (t * n + j) * d, comb[j * n + k], d);
    }
  }
}

template <class T>
void mhc_post_backward(const MhcDims& dims, const T* post_coef, const T* comb_coef, const T* X,
                       const T* y, const T* dXout, T* dX, T* dy, T* dpost, T* dcomb) {
  const int64_t N = dims.tokens, n = dims.hc_mult, d = dims.hidden;
#pragma omp parallel for schedule(static) if (N * n * n * d > (1 << 14))
  for (int64_t t = 0; t < N; ++t) {
    const T* post = post_coef + t * n;
    const T* comb = comb_coef + t * n * n;
    const T* yt = y + t * d;
    const T* g = dXout + t * n * d;
    for (int64_t k = 0; k < n; ++k) {
      dpost[t * n + k] = static_cast<T>(dot(g + k * d, yt, d));
      for (int64_t j = 0; j < n; ++j)
        dcomb[(t * n + j) * n + k] = static_cast<T>(dot(g + k * d, X + (t * n + j) * d, d));
    }
    if (dy) {
      T* dyt = dy + t * d;
      for (int64_t i = 0; i < d; ++i) dyt[i] = T(0);
      for (int64_t k = 0; k < n; ++k) add_scaled(dyt, g + k * d, post[k], d);
    }
    if (dX) {
      for (int64_t j = 0; j < n; ++j) {
        T* dx = dX + (t * n + j) * d;
        for (int64_t i = 0; i < d; ++i) dx[i] = T(0);
        for (int64_t k = 0; k < n; ++k) add_scaled(dx, g + k * d, comb[j * n + k], d);
      }
    }
  }
}

template <class T>
void mhc_pre_backward(const MhcDims& dims, const MhcSite<const T>& weights,
                      const MhcState<const T>& state, const T* X, const T* du, const T* dpost,
                      const T* dcomb, const MhcSite<T>& grads, T* dX) {
  const int64_t N = dims.tokens, n = dims.hc_mult, mixc = dims.mix();
  if (N == 0) return;
  std::vector<T> dpre(static_cast<size_t>(N * n));
  collapse_backward(dims, state.pre, X, du, dpre.data(), dX);

  const T a0 = weights.scale[0], a1 = weights.scale[1], a2 = weights.scale[2];
  const T* b = weights.base;
  const T eps = static_cast<T>(dims.hc_eps);
  std::vector<T> dz(static_cast<size_t>(N * mixc));    // dL/d(α μ + b)
  std::vector<T> dmix(static_cast<size_t>(N * mixc));  // dL/dμ
  std::optional<profile::Scope> sinkhorn(std::in_place, profile::Op::kSinkhorn);
#pragma omp parallel if (N >= 32)
  {
    SinkhornWork<T> work;
    work.resize(n, dims.sinkhorn_iters);
    std::vector<T> logits(static_cast<size_t>(n * n));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < N; ++t) {
      const T* mu = state.mix + t * mixc;
      T* z = dz.data() + t * mixc;
      T* dm = dmix.data() + t * mixc;
      for (int64_t j = 0; j < n; ++j) {
        const T gp = sigmoid(a0 * mu[j] + b[j]);
        z[j] = dpre[t * n + j] * gp * (T(1) - gp);
        dm[j] = a0 * z[j];
        const T gq = sigmoid(a1 * mu[n + j] + b[n + j]);
        z[n + j] = dpost[t * n + j] * T(2) * gq * (T(1) - gq);
        dm[n + j] = a1 * z[n + j];
      }
      for (int64_t i = 0; i < n * n; ++i) logits[i] = a2 * mu[2 * n + i] + b[2 * n + i];
      sinkhorn_record(logits.data(), n, dims.sinkhorn_iters, eps, work, static_cast<T*>(nullptr));
      sinkhorn_backward_recorded(n, dims.sinkhorn_iters, eps, work, dcomb + t * n * n, z + 2 * n);
      for (int64_t i = 0; i < n * n; ++i) dm[2 * n + i] = a2 * z[2 * n + i];
    }
  }
  sinkhorn.reset();
  reduce_gate_grads(
      N, mixc, dz.data(), state.mix, 3,
      [n](int64_t i) -> int64_t { return i < n ? 0 : (i < 2 * n ? 1 : 2); }, grads.base,
      grads.scale);
  compute_mix_backward(dims, weights.fn, mixc, X, state.inv_rms, state.mix, dmix.data(), grads.fn,
                       dX);
}

template <class T>
void hc_head_forward(const MhcDims& dims, const MhcSite<const T>& weights, const T* X, T* h,
                     const MhcState<T>& state) {
  const int64_t N = dims.tokens, n = dims.hc_mult;
  if (N == 0) return;
  compute_mix(dims, weights.fn, n, X, state.inv_rms, state.mix);
  const T alpha = weights.scale[0];
  const T eps = static_cast<T>(dims.hc_eps);
  for (int64_t t = 0; t < N; ++t)
    for (int64_t j = 0; j < n; ++j)
      state.pre[t * n + j] = sigmoid(alpha * state.mix[t * n + j] + weights.base[j]) + eps;
  collapse(dims, state.pre, X, h);
}

template <class T>
void hc_head_backward(const MhcDims& dims, const MhcSite<const T>& weights,
                      const MhcState<const T>& state, const T* X, const T* dh,
                      const MhcSite<T>& grads, T* dX) {
  const int64_t N = dims.tokens, n = dims.hc_mult, width = dims.streams_width();
  if (N == 0) return;
  if (dX) std::fill(dX, dX + N * width, T(0));
  std::vector<T> dpre(static_cast<size_t>(N * n));
  collapse_backward(dims, state.pre, X, dh, dpre.data(), dX);
  const T alpha = weights.scale[0];
  std::vector<T> dz(static_cast<size_t>(N * n)), dmix(static_cast<size_t>(N * n));
  for (int64_t i = 0; i < N * n; ++i) {
    const T g = sigmoid(alpha * state.mix[i] + weights.base[i % n]);
    dz[i] = dpre[i] * g * (T(1) - g);
    dmix[i] = alpha * dz[i];
  }
  reduce_gate_grads(
      N, n, dz.data(), state.mix, 1, [](int64_t) -> int64_t { return 0; }, grads.base, grads.scale);
  compute_mix_backward(dims, weights.fn, n, X, state.inv_rms, state.mix, dmix.data(), grads.fn, dX);
}

#define TREX_MHC_INSTANTIATE(T)                                                                  \
  template void sinkhorn_forward<T>(const T*, int64_t, int64_t, double, T*);                     \
  template void sinkhorn_backward<T>(const T*, int64_t, int64_t, double, const T*, T*);          \
  template void mhc_pre_forward<T>(const MhcDims&, const MhcSite<const T>&, const T*, T*,        \
                                   const MhcState<T>&);                                          \
  template void mhc_post_forward<T>(const MhcDims&, const T*, const T*, const T*, const T*, T*); \
  template void mhc_post_backward<T>(const MhcDims&, const T*, const T*, const T*, const T*,     \
                                     const T*, T*, T*, T*, T*);                                  \
  template void mhc_pre_backward<T>(const MhcDims&, const MhcSite<const T>&,                     \
                                    const MhcState<const T>&, const T*, const T*, const T*,      \
                                    const T*, const MhcSite<T>&, T*);                            \
  template void hc_head_forward<T>(const MhcDims&, const MhcSite<const T>&, const T*, T*,        \
                                   const MhcState<T>&);                                          \
  template void hc_head_backward<T>(const MhcDims&, const MhcSite<const T>&,                     \
                                    const MhcState<const T>&, const T*, const T*,                \
                                    const MhcSite<T>&, T*);

TREX_MHC_INSTANTIATE(float)
TREX_MHC_INSTANTIATE(double)
#undef TREX_MHC_INSTANTIATE

}  // namespace trex::kernels
