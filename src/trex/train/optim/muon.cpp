#include "trex/train/optim/muon.hpp"

#include <algorithm>
#include <cmath>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"
#include "trex/kernels/cpu/gemm.hpp"

namespace trex::train {

namespace {
constexpr double kMainCoefficients[3] = {3.4445, -4.7750, 2.0315};
constexpr double kTailCoefficients[3] = {2.0, -1.5, 0.5};
}  // namespace

template <class T>
void hybrid_newton_schulz(const T* X, T* out, int64_t rows, int64_t cols,
                          const MuonOptions& options) {
  if (rows <= 0 || cols <= 0) throw Error("Newton-Schulz needs a non-empty matrix");
  if (options.ns_iterations < 0 || options.ns_tail_iterations < 0 ||
      options.ns_tail_iterations > options.ns_iterations)
    throw Error("Newton-Schulz needs 0 <= ns_tail_iterations <= ns_iterations");
  const int64_t numel = rows * cols;
  double norm2 = 0.0;
  for (int64_t i = 0; i < numel; ++i)
    norm2 += static_cast<double>(X[i]) * static_cast<double>(X[i]);
  if (norm2 == 0.0) {
    std::fill(out, out + numel, T(0));
    return;
  }
  // Work on M [n, m] with n <= m (transpose when the matrix is tall).
  const bool transpose = rows > cols;
  const int64_t n = transpose ? cols : rows;
  const int64_t m = transpose ? rows : cols;
  const T inv_norm = static_cast<T>(1.0 / std::sqrt(norm2));
  std::vector<T> M(static_cast<size_t>(numel));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const T v = X[r * cols + c] * inv_norm;
      if (transpose)
        M[c * m + r] = v;
      else
        M[r * m + c] = v;
    }
  std::vector<T> gram(static_cast<size_t>(n * n));
  std::vector<T> poly(static_cast<size_t>(n * n));
  std::vector<T> next(static_cast<size_t>(numel));
  for (int it = 0; it < options.ns_iterations; ++it) {
    const double* coeff = it < options.ns_iterations - options.ns_tail_iterations
                              ? kMainCoefficients
                              : kTailCoefficients;
    const T a = static_cast<T>(coeff[0]);
    const T b = static_cast<T>(coeff[1]);
    const T c = static_cast<T>(coeff[2]);
    // gram = M Mᵀ; poly = b·gram + c·gram²; next = a·M + poly·M.
    kernels::gemm<T>(false, true, n, n, m, T(1), M.data(), m, M.data(), m, T(0), gram.data(), n);
    poly = gram;
    kernels::gemm<T>(false, false, n, n, n, c, gram.data(), n, gram.data(), n, b, poly.data(), n);
    next = M;
    kernels::gemm<T>(false, false, n, m, n, T(1), poly.data(), n, M.data(), m, a, next.data(), m);
    M.swap(next);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = transpose ? M[c * m + r] : M[r * m + c];
}

void muon_update(float* weights, const float* grads, float* momentum, int64_t rows, int64_t cols,
                 double lr, const MuonOptions& options, std::vector<float>& workspace) {
  const int64_t numel = rows * cols;
  workspace.resize(static_cast<size_t>(numel));
  const float mu = static_cast<float>(options.momentum);
  for (int64_t i = 0; i < numel; ++i) {
    momentum[i] = mu * momentum[i] + grads[i];
    workspace[i] = options.nesterov ? mu * momentum[i] + grads[i] : momentum[i];
  }
  {
    // Per iteration on the short side n and long side m: M Mᵀ and poly·M (2n²m each), gram² (2n³).
    const double n = static_cast<double>(std::min(rows, cols)),
                 m = static_cast<double>(std::max(rows, cols));
    TREX_PROFILE(profile::Op::kMuonNewtonSchulz,
                 options.ns_iterations * (4.0 * n * n * m + 2.0 * n * n * n));
    hybrid_newton_schulz<float>(workspace.data(), workspace.data(), rows, cols, options);
  }
  const double scale =
      std::sqrt(static_cast<double>(std::max(rows, cols))) * options.rms_scale * lr;
  const double decay = 1.0 - lr * options.weight_decay;
  for (int64_t i = 0; i < numel; ++i)
    weights[i] = static_cast<float>(weights[i] * decay - scale * workspace[i]);
}

template void hybrid_newton_schulz<float>(const float*, float*, int64_t, int64_t,
                                          const MuonOptions&);
template void hybrid_newton_schulz<double>(const double*, double*, int64_t, int64_t,
                                           const MuonOptions&);

}  // namespace trex::train
