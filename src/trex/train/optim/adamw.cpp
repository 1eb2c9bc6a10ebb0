#include "trex/train/optim/adamw.hpp"

#include <algorithm>
#include <cmath>

#include "trex/core/error.hpp"
#include "trex/kernels/cpu/elementwise.hpp"

namespace trex::train {

void adamw_update(float* weights, const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n,
                  double lr, int64_t step, const AdamWOptions& options) {
  if (step < 1) throw Error("AdamW step must be >= 1");
  const double b1 = options.beta1;
  const double b2 = options.beta2;
  const double correction1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double correction2 = 1.0 - std::pow(b2, static_cast<double>(step));
  const double decay = 1.0 - lr * options.weight_decay;
  const kernels::AdamWCoefficients coefficients{b1,    b2, correction1, correction2,
                                                decay, lr, options.eps};
  // Fixed blocks: the update is elementwise, so the split does not change results.
  constexpr int64_t kBlock = int64_t{1} << 14;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock;
    const int64_t count = std::min(kBlock, n - begin);
    kernels::adamw_update_range(weights + begin, grads + begin, exp_avg + begin, exp_avg_sq + begin,
                                count, coefficients);
  }
}

}  // namespace trex::train
