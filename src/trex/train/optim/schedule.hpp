#pragma once
// Learning-rate schedule (spec §6): linear warm-up to a peak, then cosine decay
// to a floor. See docs/training.md.
#include <cstdint>

namespace trex::train {

struct LrSchedule {
  double peak_lr = 2.7e-4;
  double min_lr = 2.7e-5;       // the floor reached at total_steps and kept after it
  int64_t warmup_steps = 2000;  // 0 = start at the peak
  int64_t total_steps = 100000;
};

// The learning rate of update number `step` (1-based: the first update is step 1).
//   step <= warmup:  peak · step / warmup
//   afterwards:      min + (peak − min) · ½ (1 + cos(π · p)),  p = (step − warmup) / (total −
//   warmup)
//                    clamped to [0, 1], so steps past total_steps stay at min_lr.
// Throws trex::Error on step < 1, negative rates, min > peak or total < warmup.
double learning_rate(const LrSchedule& schedule, int64_t step);

}  // namespace trex::train
