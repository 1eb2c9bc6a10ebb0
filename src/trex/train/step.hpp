#pragma once
// One training step, the same code for the trainer (any DP × EP × PP grid) and
// `trex bench step` (one process), in the order of torchtitan's train_step:
//   forward + backward of the step's micro-batches, gradients reduced over the
//   ranks (GradientStrategy::forward_backward) → the guard: a non-finite loss,
//   no trained token → clipping to the global norm → the guard: a non-finite
//   norm → the optimizer's update → the router-bias rule → gradients zeroed.
// A guarded step makes no update; the caller counts and reports it.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "trex/model/model.hpp"
#include "trex/train/optim/optimizer.hpp"
#include "trex/train/run_config.hpp"

namespace trex::train {

// What a step's micro-batches contributed: this rank's, or once reduced the
// step's over every rank.
struct StepTotals {
  double lm_sum = 0, mtp_sum = 0, balance_sum = 0;  // token-weighted sums, Σ balance
  int64_t lm_tokens = 0, mtp_tokens = 0;
  int64_t micro_batches = 0;                      // of the whole step (every rank's)
  bool finite = true;                             // every micro-batch's loss was finite
  std::vector<std::vector<int64_t>> expert_load;  // summed over the micro-batches

  void add(const model::LossBreakdown& micro_batch);
  double lm_loss() const;       // token-weighted mean
  double mtp_loss() const;      // token-weighted mean
  double balance_loss() const;  // mean over the micro-batches
  double loss(double mtp_weight) const {
    return lm_loss() + mtp_weight * mtp_loss() + balance_loss();
  }
};

// How a step's gradients are made: what differs between one process and the
// trainer's grid (train/parallel_gradients.hpp).
class GradientStrategy {
 public:
  virtual ~GradientStrategy() = default;
  // Forward and backward of the step's micro-batches, each on zeroed
  // gradients. Afterwards the model's gradient buffer holds the step's
  // gradient (the parts of it this rank updates) and the totals are the step's.
  virtual StepTotals forward_backward(const std::vector<model::Batch>& micro_batches,
                                      const model::LossOptions& loss) = 0;
  // The global gradient norm; when finite and above max_norm > 0 the gradients
  // are scaled down to it.
  virtual double clip_gradients(double max_norm) = 0;
  // After the optimizer's update (ZeRO: every rank gets the whole model back).
  virtual void after_update() {}
  // Before the gradients are zeroed for the next step (ZeRO-2 gives pages back).
  virtual void release_gradients() {}
};

struct StepSettings {
  model::LossOptions loss;
  double lr = 0.0;
  double clip = 0.0;  // <= 0: no clipping (the norm is still measured)
  double router_bias_speed = 0.0;
  // Runs once the gradients are reduced, before the guard (the trainer's
  // gradient hook and fault injection).
  std::function<void()> on_gradients;

  // The losses, clipping and router-bias speed of `config`, at rate `lr`.
  static StepSettings of(const RunConfig& config, double lr);
};

struct StepOutcome {
  StepTotals totals;
  double grad_norm = NAN;   // before clipping; NaN when the guard stopped the step first
  std::string skip_reason;  // empty: the update was applied
  std::string skip_detail;  // for the log line (the first non-finite gradient's tensor)
  bool updated() const { return skip_reason.empty(); }
};

StepOutcome run_step(model::Model<float>& model, Optimizer& optimizer, GradientStrategy& gradients,
                     const std::vector<model::Batch>& micro_batches, const StepSettings& settings);

// One process, one micro-batch per step (`trex bench step`): the engine's
// gradient of the micro-batch, clipped over the whole store.
class SingleProcessGradients final : public GradientStrategy {
 public:
  explicit SingleProcessGradients(model::Model<float>& model) : model_(model) {}
  StepTotals forward_backward(const std::vector<model::Batch>& micro_batches,
                              const model::LossOptions& loss) override;
  double clip_gradients(double max_norm) override;
  // Of the last step: the engine's losses and the seconds of forward_backward alone.
  const model::LossBreakdown& last() const { return last_; }
  double forward_backward_seconds() const { return forward_backward_seconds_; }

 private:
  model::Model<float>& model_;
  model::LossBreakdown last_;
  double forward_backward_seconds_ = 0.0;
};

// The first tensor with a non-finite gradient, or "" (for the skip message).
std::string first_non_finite_gradient(const model::ParamStore<float>& params);

}  // namespace trex::train
