#include "trex/train/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "trex/core/error.hpp"
#include "trex/kernels/backend.hpp"

namespace trex::train {

double learning_rate(const LrSchedule& schedule, int64_t step) {
  if (step < 1) throw Error("learning-rate step must be >= 1, got " + std::to_string(step));
  if (!(schedule.peak_lr >= 0.0) || !(schedule.min_lr >= 0.0) || schedule.min_lr > schedule.peak_lr)
    throw Error("learning-rate schedule needs 0 <= min_lr <= peak_lr").field("min_lr");
  if (schedule.warmup_steps < 0) throw Error("warmup_steps must be >= 0").field("warmup_steps");
  if (schedule.total_steps < schedule.warmup_steps)
    throw Error("total_steps must be >= warmup_steps").field("total_steps");
  if (step <= schedule.warmup_steps)
    return schedule.peak_lr * static_cast<double>(step) /
           static_cast<double>(schedule.warmup_steps);
  const int64_t decay_steps = schedule.total_steps - schedule.warmup_steps;
  double progress = decay_steps == 0 ? 1.0
                                     : static_cast<double>(step - schedule.warmup_steps) /
                                           static_cast<double>(decay_steps);
  if (progress > 1.0) progress = 1.0;
  return schedule.min_lr +
         (schedule.peak_lr - schedule.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

namespace {

template <class Fn>
void for_each_trained(const model::ParamStore<float>& params, Fn&& fn) {
  int64_t offset = 0;
  for (const model::ParamSpec& spec : params.specs()) {
    const int64_t n = spec.numel();
    if (spec.group != model::OptimizerGroup::kNotTrained) fn(offset, n);
    offset += n;
  }
}

}  // namespace

double global_grad_norm(const model::ParamStore<float>& params) {
  // Fixed-size chunks summed in parallel, then the partials in chunk order: the
  // result does not depend on the thread count.
  constexpr int64_t kChunk = int64_t{1} << 16;
  std::vector<int64_t> bounds;  // [begin, end) of every chunk
  for_each_trained(params, [&](int64_t offset, int64_t n) {
    for (int64_t b = offset; b < offset + n; b += kChunk) {
      bounds.push_back(b);
      bounds.push_back(std::min(offset + n, b + kChunk));
    }
  });
  using kernels::Tensor;
  const double sum = kernels::default_backend().sum_squares(
      Tensor::of(params.grads().data(), {params.size()}),
      Tensor::of(bounds.data(), {static_cast<int64_t>(bounds.size()) / 2, 2}));
  return std::sqrt(sum);
}

double clip_grad_norm(model::ParamStore<float>& params, double max_norm) {
  const double norm = global_grad_norm(params);
  if (!std::isfinite(norm) || max_norm <= 0.0 || norm <= max_norm) return norm;
  const float scale = static_cast<float>(max_norm / norm);
  float* g = params.grads().data();
  for_each_trained(params, [&](int64_t offset, int64_t n) {
    kernels::default_backend().scale(kernels::Tensor::of(g + offset, {n}), scale);
  });
  return norm;
}

}  // namespace trex::train
