#pragma once
// CPU kernels of the mHC ops (backend.hpp; the equations are in
// model/mhc.hpp). Everything is in the scalar type T; the φx̄ GEMMs are always
// fp32. Per-token loops run over OpenMP; every reduction over tokens (base and
// scale gradients) runs in token order, so results do not depend on the thread
// count. Callers validate dims and pointers (model/mhc.cpp, Backend).
#include <cstdint>

#include "trex/kernels/op_params.hpp"

namespace trex::kernels {

// The parameters of one site (or their gradients: null = not computed, +=).
template <class T>
struct MhcSite {
  T* fn = nullptr;     // [rows, n·d] (rows = mix, or n for the HC head)
  T* base = nullptr;   // [rows]
  T* scale = nullptr;  // [3] (HC head: [1])
};

// What the forward keeps for the backward (the HC head uses inv_rms, mix, pre).
template <class T>
struct MhcState {
  T* inv_rms = nullptr;  // [N]
  T* mix = nullptr;      // [N, rows] μ
  T* pre = nullptr;      // [N, n]
  T* post = nullptr;     // [N, n]
  T* comb = nullptr;     // [N, n, n]
};

// X [N, n, d] -> u [N, d] and the state (written).
template <class T>
void mhc_pre_forward(const MhcDims& dims, const MhcSite<const T>& weights, const T* X, T* u,
                     const MhcState<T>& state);
// Xout [N, n, d] = post ⊗ y + combᵀ X (written).
template <class T>
void mhc_post_forward(const MhcDims& dims, const T* post, const T* comb, const T* X, const T* y,
                      T* Xout);
// dXout -> dpost [N, n], dcomb [N, n, n], dy? [N, d], dX? [N, n, d] (all written).
template <class T>
void mhc_post_backward(const MhcDims& dims, const T* post, const T* comb, const T* X, const T* y,
                       const T* dXout, T* dX, T* dy, T* dpost, T* dcomb);
// du [N, d], dpost, dcomb -> grads (+=), dX? (+=).
template <class T>
void mhc_pre_backward(const MhcDims& dims, const MhcSite<const T>& weights,
                      const MhcState<const T>& state, const T* X, const T* du, const T* dpost,
                      const T* dcomb, const MhcSite<T>& grads, T* dX);

// HC head: X [N, n, d] -> h [N, d], state.{inv_rms, mix, pre} (written).
template <class T>
void hc_head_forward(const MhcDims& dims, const MhcSite<const T>& weights, const T* X, T* h,
                     const MhcState<T>& state);
// dh [N, d] -> grads (+=), dX? [N, n, d] (written).
template <class T>
void hc_head_backward(const MhcDims& dims, const MhcSite<const T>& weights,
                      const MhcState<const T>& state, const T* X, const T* dh,
                      const MhcSite<T>& grads, T* dX);

// Sinkhorn-Knopp on one n×n logit matrix: comb [n, n] (written).
template <class T>
void sinkhorn_forward(const T* logits, int64_t n, int64_t iters, double eps, T* comb);
// dcomb -> dlogits [n, n] (written); intermediates recomputed from logits.
template <class T>
void sinkhorn_backward(const T* logits, int64_t n, int64_t iters, double eps, const T* dcomb,
                       T* dlogits);

}  // namespace trex::kernels
