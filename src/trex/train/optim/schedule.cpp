#include "trex/train/optim/schedule.hpp"

#include <cmath>
#include <numbers>

#include "trex/core/error.hpp"

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

}  // namespace trex::train
