#include "trex/train/optim/adamw.hpp"

#include <cmath>

#include "trex/core/error.hpp"
#include "trex/kernels/backend.hpp"

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
  using kernels::Tensor;
  kernels::default_backend().adamw_update(Tensor::of(weights, {n}), Tensor::of(grads, {n}),
                                          Tensor::of(exp_avg, {n}), Tensor::of(exp_avg_sq, {n}),
                                          coefficients);
}

}  // namespace trex::train
