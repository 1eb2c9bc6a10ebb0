#include "trex/train/adamw.hpp"

#include <cmath>

#include "trex/core/error.hpp"

namespace trex::train {

void adamw_update(float* weights, const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n,
                  double lr, int64_t step, const AdamWOptions& options) {
  if (step < 1) throw Error("AdamW step must be >= 1");
  const double b1 = options.beta1;
  const double b2 = options.beta2;
  const double correction1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double correction2 = 1.0 - std::pow(b2, static_cast<double>(step));
  const double decay = 1.0 - lr * options.weight_decay;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const double g = grads[i];
    const double m = b1 * exp_avg[i] + (1.0 - b1) * g;
    const double v = b2 * exp_avg_sq[i] + (1.0 - b2) * g * g;
    exp_avg[i] = static_cast<float>(m);
    exp_avg_sq[i] = static_cast<float>(v);
    const double update = (m / correction1) / (std::sqrt(v / correction2) + options.eps);
    weights[i] = static_cast<float>(weights[i] * decay - lr * update);
  }
}

}  // namespace trex::train
