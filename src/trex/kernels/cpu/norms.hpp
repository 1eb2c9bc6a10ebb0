#pragma once
// RMSNorm over the last dimension (spec §2.0): y = w ⊙ x / sqrt(mean(x²) + eps).
// A null weight means the unweighted variant (per-head q normalisation, the
// mHC input normalisation). Statistics are computed in the scalar type T.
#include <cstdint>

namespace trex::kernels {

// inv_rms[rows] receives 1/sqrt(mean(x²)+eps) per row (needed by backward);
// it may be null when no backward follows. y may alias x.
template <class T>
void rmsnorm_forward(const T* x, const T* weight, T* y, T* inv_rms, int64_t rows, int64_t dim,
                     double eps);

// dx is written (may alias dy); dweight (nullable) is accumulated (+=) with a
// summation order that does not depend on the thread count.
template <class T>
void rmsnorm_backward(const T* x, const T* weight, const T* inv_rms, const T* dy, T* dx, T* dweight,
                      int64_t rows, int64_t dim);

}  // namespace trex::kernels
