#include "trex/kernels/cpu/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "trex/core/profile.hpp"
#include "trex/kernels/cpu/elementwise.hpp"
#include "trex/kernels/cpu/gemm.hpp"

namespace trex::kernels {
namespace {
constexpr double kMainCoefficients[3] = {3.4445, -4.7750, 2.0315};
constexpr double kTailCoefficients[3] = {2.0, -1.5, 0.5};
}  // namespace

void adamw_update(float* weights, const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n,
                  const AdamWCoefficients& c) {
  // Fixed blocks: the update is elementwise, so the split does not change results.
  constexpr int64_t kBlock = int64_t{1} << 14;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock;
    const int64_t count = std::min(kBlock, n - begin);
    adamw_update_range(weights + begin, grads + begin, exp_avg + begin, exp_avg_sq + begin, count,
                       c);
  }
}

template <class T>
void newton_schulz(const T* X, T* out, int64_t rows, int64_t cols, const NewtonSchulzParams& p) {
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
  for (int it = 0; it < p.iterations; ++it) {
    const double* coeff =
        it < p.iterations - p.tail_iterations ? kMainCoefficients : kTailCoefficients;
    const T a = static_cast<T>(coeff[0]);
    const T b = static_cast<T>(coeff[1]);
    const T c = static_cast<T>(coeff[2]);
    // gram = M Mᵀ; poly = b·gram + c·gram²; next = a·M + poly·M.
    const Precision pr = p.precision;
    gemm<T>(pr, false, true, n, n, m, T(1), M.data(), m, M.data(), m, T(0), gram.data(), n);
    poly = gram;
    gemm<T>(pr, false, false, n, n, n, c, gram.data(), n, gram.data(), n, b, poly.data(), n);
    next = M;
    gemm<T>(pr, false, false, n, m, n, T(1), poly.data(), n, M.data(), m, a, next.data(), m);
    M.swap(next);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = transpose ? M[c * m + r] : M[r * m + c];
}

namespace {

// M ← μ M + G; the matrix to orthogonalise: μ M + G (Nesterov) or M.
void muon_momentum(const float* grads, float* momentum, float* out, int64_t numel,
                   const MuonStep& step) {
  const float mu = static_cast<float>(step.momentum);
  for (int64_t i = 0; i < numel; ++i) {
    momentum[i] = mu * momentum[i] + grads[i];
    out[i] = step.nesterov ? mu * momentum[i] + grads[i] : momentum[i];
  }
}

void muon_apply(float* weights, const float* orthogonal, int64_t numel, const MuonStep& step) {
  for (int64_t i = 0; i < numel; ++i)
    weights[i] = static_cast<float>(weights[i] * step.decay - step.scale * orthogonal[i]);
}

// Per iteration on the short side n and long side m: M Mᵀ and poly·M (2n²m each), gram² (2n³).
double newton_schulz_flops(int64_t rows, int64_t cols, const NewtonSchulzParams& p) {
  const double n = static_cast<double>(std::min(rows, cols)),
               m = static_cast<double>(std::max(rows, cols));
  return p.iterations * (4.0 * n * n * m + 2.0 * n * n * n);
}

}  // namespace

void muon_update(float* weights, const float* grads, float* momentum, float* workspace,
                 int64_t rows, int64_t cols, const MuonStep& step) {
  const MuonMatrixData matrix{weights, grads, momentum};
  muon_update_batch(&matrix, 1, workspace, rows, cols, step);
}

void muon_update_batch(const MuonMatrixData* matrices, int64_t count, float* workspace,
                       int64_t rows, int64_t cols, const MuonStep& step) {
  const int64_t numel = rows * cols;
  for (int64_t i = 0; i < count; ++i)
    muon_momentum(matrices[i].grads, matrices[i].momentum, workspace + i * numel, numel, step);
  {
    TREX_PROFILE(profile::Op::kMuonNewtonSchulz,
                 static_cast<double>(count) * newton_schulz_flops(rows, cols, step.newton_schulz));
    run_gemm_tasks(count, [&](int64_t i) {
      float* x = workspace + i * numel;
      newton_schulz<float>(x, x, rows, cols, step.newton_schulz);
    });
  }
  for (int64_t i = 0; i < count; ++i)
    muon_apply(matrices[i].weights, workspace + i * numel, numel, step);
}

double sum_squares_ranges(const float* x, const int64_t* bounds, int64_t count) {
  std::vector<double> partial(static_cast<size_t>(count), 0.0);
#pragma omp parallel for schedule(static) if (count > 4)
  for (int64_t c = 0; c < count; ++c) {
    partial[c] = sum_squares(x + bounds[2 * c], bounds[2 * c + 1] - bounds[2 * c]);
  }
  double sum = 0.0;
  for (double v : partial) sum += v;
  return sum;
}

template void newton_schulz<float>(const float*, float*, int64_t, int64_t,
                                   const NewtonSchulzParams&);
template void newton_schulz<double>(const double*, double*, int64_t, int64_t,
                                    const NewtonSchulzParams&);

}  // namespace trex::kernels
