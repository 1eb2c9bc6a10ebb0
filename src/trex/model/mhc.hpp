#pragma once
// Manifold-Constrained Hyper-Connections (spec §2.2, backward §3.4) and the HC
// head that collapses the residual streams before the final norm.
//
// Shapes (row-major, token-major): tokens N, hidden d, streams n = hc_mult,
// mix = (2+n)·n coefficients per token.
//   X     [N, n, d]   residual streams (stream-major per token: x̄ = vec(X_t))
//   fn    [mix, n·d]  φ;   base [mix];   scale [3]   (one mHC site)
//   u, y  [N, d]      collapsed sublayer input / sublayer output
//
// Per token (everything in the scalar type T; the φx̄ GEMM always runs in fp32
// for float, whatever the model's compute precision (ctx.precision), because
// the reference keeps mHC in fp32):
//   ρ = 1/sqrt(mean(x̄²) + norm_eps),  μ = ρ·(φ x̄)
//   pre_j  = σ(α₀ μ_j + b_j) + hc_eps                         j < n
//   post_j = 2 σ(α₁ μ_{n+j} + b_{n+j})                         (no eps)
//   Λ_jk   = α₂ μ_{2n+n·j+k} + b_{2n+n·j+k};  comb = Sinkhorn(Λ)
//   u      = Σ_j pre_j X_j                    (NOT normed: the caller applies attn/ffn_norm)
//   X'_k   = post_k·y + Σ_j comb_jk X_j       (transpose trap: sum over comb's FIRST index)
//
// Block usage:
//   mhc_pre_forward(X) -> u;  y = F(norm(u));  mhc_post_forward(X, y) -> X'
// Backward, in reverse:
//   mhc_post_backward(dX')   -> dX (written, comb path), dy (written), coefficient grads
//   [sublayer backward: dy -> du]
//   mhc_pre_backward(du, coefficient grads) -> param grads (+=), dX (+=, pre path and
//                                                            the x̄ -> μ path)
//
// Every function checks its dims and pointers and runs as one op on ctx's
// backend (kernels/backend.hpp; the CPU kernels are kernels/cpu/mhc.cpp).
//
// Cache policy: the forward stores ρ, μ, pre, post and comb (a few dozen values
// per token); the Sinkhorn intermediates are recomputed from μ in backward
// (2·t_max−1 n×n matrices per token, cheap). X is not stored: the caller passes
// the same block input to the backward.
#include <cstdint>
#include <vector>

#include "trex/kernels/array.hpp"
#include "trex/kernels/backend.hpp"
#include "trex/model/config.hpp"

namespace trex::model {

// tokens, hidden, hc_mult, sinkhorn_iters, hc_eps, norm_eps (kernels/op_params.hpp).
using MhcDims = kernels::MhcDims;

// The dims of every mHC site / HC head of a model, for `tokens` tokens.
inline MhcDims mhc_dims(const ModelConfig& config, int64_t tokens) {
  return MhcDims{tokens,        config.hidden_size, config.hc_mult, config.hc_sinkhorn_iters,
                 config.hc_eps, config.rms_norm_eps};
}

// Throws trex::Error naming the offending field when dims are unusable.
using kernels::validate;

template <class T>
struct MhcWeights {
  const T* fn = nullptr;     // [mix, n·d]
  const T* base = nullptr;   // [mix]
  const T* scale = nullptr;  // [3]
};

// Null pointer = frozen tensor (not computed). Accumulated (+=).
template <class T>
struct MhcGrads {
  T* fn = nullptr;
  T* base = nullptr;
  T* scale = nullptr;
};

template <class T>
struct MhcCache {
  kernels::Array<T> inv_rms;  // [N]      ρ
  kernels::Array<T> mix;      // [N, mix] μ = ρ·φx̄ (before scale/base)
  kernels::Array<T> pre;      // [N, n]
  kernels::Array<T> post;     // [N, n]
  kernels::Array<T> comb;     // [N, n, n] comb[j][k]
};

// Gradients w.r.t. the per-token mixing coefficients, produced by
// mhc_post_backward and consumed by mhc_pre_backward (both written, not +=).
template <class T>
struct MhcCoefGrads {
  kernels::Array<T> post;  // [N, n]    dL/dpost_k = dX'_k · y
  kernels::Array<T> comb;  // [N, n, n] dL/dcomb_jk = dX'_k · X_j
};

// u [N, d] written; cache filled.
template <class T>
void mhc_pre_forward(const MhcDims& dims, const MhcWeights<T>& weights, const T* X, T* u,
                     MhcCache<T>& cache, const kernels::OpContext& ctx = {});

// Xout [N, n, d] written; must not alias X.
template <class T>
void mhc_post_forward(const MhcDims& dims, const MhcCache<T>& cache, const T* X, const T* y,
                      T* Xout, const kernels::OpContext& ctx = {});

// dXout [N, n, d]. dX [N, n, d] written (= combᵀ path: dX_j = Σ_k comb_jk dX'_k),
// dy [N, d] written, coef filled. dX and dy may be null (not needed); dX must not
// alias dXout.
template <class T>
void mhc_post_backward(const MhcDims& dims, const MhcCache<T>& cache, const T* X, const T* y,
                       const T* dXout, T* dX, T* dy, MhcCoefGrads<T>& coef,
                       const kernels::OpContext& ctx = {});

// du [N, d] (gradient of the collapsed input u, i.e. after the caller's norm
// backward); coef from mhc_post_backward. Parameter grads accumulate; dX
// accumulates (+=) the pre path and the x̄ -> ρ, φx̄ path.
template <class T>
void mhc_pre_backward(const MhcDims& dims, const MhcWeights<T>& weights, const MhcCache<T>& cache,
                      const T* X, const T* du, const MhcCoefGrads<T>& coef, MhcGrads<T>& grads,
                      T* dX, const kernels::OpContext& ctx = {});

// ---- Sinkhorn-Knopp on one n×n logit matrix (exposed for tests) -------------
// P = softmax_row(Λ) + eps; column-normalise; then (iters−1) × (row, column)
// normalisation, each as P / (sum + eps). comb [n, n] written.
template <class T>
void sinkhorn_forward(const T* logits, int64_t n, int64_t iters, double eps, T* comb);

// dlogits [n, n] written, from dcomb; the intermediates are recomputed from logits.
template <class T>
void sinkhorn_backward(const T* logits, int64_t n, int64_t iters, double eps, const T* dcomb,
                       T* dlogits);

// ---- HC head (spec §2.2 end) -------------------------------------------------
//   fn [n, n·d], base [n], scale [1]
//   μ = ρ·(φ x̄),  pre_j = σ(α μ_j + b_j) + hc_eps,  h = Σ_j pre_j X_j   (h [N, d])
template <class T>
struct HcHeadWeights {
  const T* fn = nullptr;
  const T* base = nullptr;
  const T* scale = nullptr;
};

template <class T>
struct HcHeadGrads {
  T* fn = nullptr;
  T* base = nullptr;
  T* scale = nullptr;
};

template <class T>
struct HcHeadCache {
  kernels::Array<T> inv_rms;  // [N]
  kernels::Array<T> mix;      // [N, n] μ
  kernels::Array<T> pre;      // [N, n]
};

template <class T>
void hc_head_forward(const MhcDims& dims, const HcHeadWeights<T>& weights, const T* X, T* h,
                     HcHeadCache<T>& cache, const kernels::OpContext& ctx = {});

// dh [N, d]; dX [N, n, d] written (may be null); param grads accumulate.
template <class T>
void hc_head_backward(const MhcDims& dims, const HcHeadWeights<T>& weights,
                      const HcHeadCache<T>& cache, const T* X, const T* dh, HcHeadGrads<T>& grads,
                      T* dX, const kernels::OpContext& ctx = {});

}  // namespace trex::model
