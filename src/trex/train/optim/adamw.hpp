#pragma once
// AdamW (decoupled weight decay, bias-corrected moments) on a flat range.
#include <cstdint>

namespace trex::train {

// Spec §6 defaults.
struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-20;
  double weight_decay = 0.1;
};

// One update of n values, `step` = 1-based update count (for bias correction):
//   m ← β1 m + (1−β1) g;   v ← β2 v + (1−β2) g²
//   m̂ = m / (1−β1^step);  v̂ = v / (1−β2^step)
//   w ← w (1 − lr·λ) − lr · m̂ / (√v̂ + ε)
// Arithmetic in double per element, stored back as float.
void adamw_update(float* weights, const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n,
                  double lr, int64_t step, const AdamWOptions& options);

}  // namespace trex::train
