#pragma once
// Finite-difference gradient checking for the engine's blocks (double precision).
// Pattern: loss = Σ output ⊙ R for a fixed random R, so dL/doutput = R; run the
// block's backward with R and compare every parameter/input gradient entry with
// central differences of the forward (selections held fixed by the caller).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "trex/core/rng.hpp"
#include "trex/kernels/array.hpp"
#include "trex/kernels/cpu/cpu_backend.hpp"

namespace trex::testing {

// A cache array's values (the CPU backend's arrays are host memory).
template <class T>
std::vector<T> to_vector(const kernels::Array<T>& a) {
  return std::vector<T>(a.begin(), a.end());
}

// values into a, from the CPU backend: a fixed selection handed to another cache.
template <class T, class Values>
void copy_into(kernels::Array<T>& a, const Values& values) {
  a.resize(static_cast<int64_t>(values.size()), kernels::cpu_backend());
  std::copy(values.begin(), values.end(), a.begin());
}

inline std::vector<double> random_vector(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed, {0x9e37});
  std::vector<double> v(n);
  for (auto& x : v) x = scale * (2.0 * rng.uniform() - 1.0);
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

struct GradCheckResult {
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;  // |fd - an| / max(|fd|, |an|, floor)
  int64_t checked = 0;
};

// `values` is perturbed in place (restored afterwards); `loss()` recomputes the
// scalar loss from the current values; `analytic` is dL/dvalues. Checks at most
// `max_entries` entries spread evenly over the tensor.
inline GradCheckResult check_gradient(std::vector<double>& values,
                                      const std::vector<double>& analytic,
                                      const std::function<double()>& loss, double step = 1e-6,
                                      int64_t max_entries = 64, double floor = 1e-6) {
  GradCheckResult result;
  const int64_t n = static_cast<int64_t>(values.size());
  const int64_t stride = std::max<int64_t>(1, n / std::max<int64_t>(1, max_entries));
  for (int64_t i = 0; i < n; i += stride) {
    const double saved = values[i];
    values[i] = saved + step;
    const double up = loss();
    values[i] = saved - step;
    const double down = loss();
    values[i] = saved;
    const double fd = (up - down) / (2.0 * step);
    const double err = std::abs(fd - analytic[i]);
    result.max_abs_error = std::max(result.max_abs_error, err);
    result.max_rel_error = std::max(result.max_rel_error,
                                    err / std::max({std::abs(fd), std::abs(analytic[i]), floor}));
    ++result.checked;
  }
  return result;
}

}  // namespace trex::testing
