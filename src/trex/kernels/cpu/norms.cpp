#include "trex/kernels/cpu/norms.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "trex/core/profile.hpp"
#include "trex/kernels/cpu/elementwise.hpp"

namespace trex::kernels {
namespace {
constexpr int64_t kRowChunk = 64;  // fixed reduction blocks => thread-count independent sums
}

template <class T>
void rmsnorm_forward(const T* x, const T* weight, T* y, T* inv_rms, int64_t rows, int64_t dim,
                     double eps) {
  TREX_PROFILE(profile::Op::kNorm);
#pragma omp parallel for schedule(static) if (rows * dim > (1 << 14))
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    double sum = 0.0;
    if constexpr (std::is_same_v<T, float>) {
      sum = sum_squares(xr, dim);  // vectorised, fixed lanes (elementwise.hpp)
    } else {
      for (int64_t i = 0; i < dim; ++i)
        sum += static_cast<double>(xr[i]) * static_cast<double>(xr[i]);
    }
    const T inv = static_cast<T>(1.0 / std::sqrt(sum / static_cast<double>(dim) + eps));
    if (inv_rms) inv_rms[r] = inv;
    T* yr = y + r * dim;
    if (weight) {
      for (int64_t i = 0; i < dim; ++i) yr[i] = weight[i] * (xr[i] * inv);
    } else {
      for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv;
    }
  }
}

template <class T>
void rmsnorm_backward(const T* x, const T* weight, const T* inv_rms, const T* dy, T* dx, T* dweight,
                      int64_t rows, int64_t dim) {
  TREX_PROFILE(profile::Op::kNorm);
  const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  std::vector<T> partial(dweight ? static_cast<size_t>(chunks * dim) : 0, T(0));
#pragma omp parallel for schedule(static) if (rows * dim > (1 << 14))
  for (int64_t c = 0; c < chunks; ++c) {
    T* pw = dweight ? partial.data() + c * dim : nullptr;
    const int64_t end = std::min(rows, (c + 1) * kRowChunk);
    for (int64_t r = c * kRowChunk; r < end; ++r) {
      const T* xr = x + r * dim;
      const T* gr = dy + r * dim;
      const T inv = inv_rms[r];
      double dot = 0.0;  // Σ (w·dy)·x
      if constexpr (std::is_same_v<T, float>) {
        // Vectorised, fixed lanes (elementwise.hpp); the dweight rows apart.
        dot = weight ? weighted_dot_double(weight, gr, xr, dim) : dot_double(gr, xr, dim);
        if (pw)
          for (int64_t i = 0; i < dim; ++i) pw[i] += gr[i] * xr[i] * inv;
      } else {
        for (int64_t i = 0; i < dim; ++i) {
          const T g = weight ? weight[i] * gr[i] : gr[i];
          dot += static_cast<double>(g) * static_cast<double>(xr[i]);
          if (pw) pw[i] += gr[i] * xr[i] * inv;
        }
      }
      const T coef = static_cast<T>(dot / static_cast<double>(dim)) * inv * inv * inv;
      T* dr = dx + r * dim;
      for (int64_t i = 0; i < dim; ++i) {
        const T g = weight ? weight[i] * gr[i] : gr[i];
        dr[i] = g * inv - coef * xr[i];
      }
    }
  }
  if (dweight)
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t i = 0; i < dim; ++i) dweight[i] += partial[c * dim + i];
}

template void rmsnorm_forward<float>(const float*, const float*, float*, float*, int64_t, int64_t,
                                     double);
template void rmsnorm_forward<double>(const double*, const double*, double*, double*, int64_t,
                                      int64_t, double);
template void rmsnorm_backward<float>(const float*, const float*, const float*, const float*,
                                      float*, float*, int64_t, int64_t);
template void rmsnorm_backward<double>(const double*, const double*, const double*, const double*,
                                       double*, double*, int64_t, int64_t);

}  // namespace trex::kernels
