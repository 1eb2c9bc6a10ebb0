#include "trex/train/step.hpp"

#include <chrono>

#include "trex/core/error.hpp"
#include "trex/core/profile.hpp"
#include "trex/train/optim/grad_clip.hpp"

namespace trex::train {

void StepTotals::add(const model::LossBreakdown& r) {
  finite = finite && std::isfinite(r.total);
  lm_sum += r.lm * static_cast<double>(r.lm_tokens);
  mtp_sum += r.mtp * static_cast<double>(r.mtp_tokens);
  balance_sum += r.balance;
  lm_tokens += r.lm_tokens;
  mtp_tokens += r.mtp_tokens;
  if (expert_load.empty()) {
    expert_load = r.expert_load;
  } else {
    for (size_t l = 0; l < expert_load.size(); ++l)
      for (size_t e = 0; e < expert_load[l].size(); ++e) expert_load[l][e] += r.expert_load[l][e];
  }
}

double StepTotals::lm_loss() const {
  return lm_tokens > 0 ? lm_sum / static_cast<double>(lm_tokens) : 0.0;
}
double StepTotals::mtp_loss() const {
  return mtp_tokens > 0 ? mtp_sum / static_cast<double>(mtp_tokens) : 0.0;
}
double StepTotals::balance_loss() const {
  return balance_sum / static_cast<double>(micro_batches);
}

StepSettings StepSettings::of(const RunConfig& config, double lr) {
  StepSettings s;
  s.loss.mtp_weight = config.mtp_weight;
  s.loss.balance_loss_weight = config.balance_weight;
  // The policy-gradient step trains the sampler's policy, softmax(logits / temperature).
  if (config.mode == DataMode::kGrpo) s.loss.logit_temperature = config.grpo.temperature;
  s.lr = lr;
  s.clip = config.clip;
  s.router_bias_speed = config.router_bias_speed;
  return s;
}

StepOutcome run_step(model::Model<float>& model, Optimizer& optimizer, GradientStrategy& gradients,
                     const std::vector<model::Batch>& micro_batches, const StepSettings& settings) {
  model::ParamStore<float>& params = model.params();
  StepOutcome out;
  out.totals = gradients.forward_backward(micro_batches, settings.loss);
  if (settings.on_gradients) settings.on_gradients();

  if (!out.totals.finite) {
    out.skip_reason = "non-finite loss";
  } else if (out.totals.lm_tokens == 0) {
    out.skip_reason = "no trained tokens in the step";
  } else {
    {
      TREX_PROFILE(profile::Op::kClipGrads, profile::Phase::kOptimizer);
      out.grad_norm = gradients.clip_gradients(settings.clip);
    }
    if (!std::isfinite(out.grad_norm)) {
      out.skip_reason = "non-finite gradient norm";
      const std::string tensor = first_non_finite_gradient(params);
      if (!tensor.empty()) out.skip_detail = " (first non-finite gradient in '" + tensor + "')";
    }
  }
  if (out.updated()) {
    optimizer.step(params, settings.lr);
    gradients.after_update();
    TREX_PROFILE(profile::Op::kRouterBias, profile::Phase::kOptimizer);
    model::LossBreakdown loads;
    loads.expert_load = out.totals.expert_load;
    model.update_router_biases(loads, settings.router_bias_speed);
  }
  gradients.release_gradients();
  TREX_PROFILE(profile::Op::kZeroGrads, profile::Phase::kOptimizer);
  params.zero_grads();
  return out;
}

StepTotals SingleProcessGradients::forward_backward(const std::vector<model::Batch>& micro_batches,
                                                    const model::LossOptions& loss) {
  if (micro_batches.size() != 1)
    throw Error("internal: one process takes one micro-batch per step, not " +
                std::to_string(micro_batches.size()));
  {
    TREX_PROFILE(profile::Op::kZeroGrads, profile::Phase::kOptimizer);
    model_.params().zero_grads();
  }
  const auto start = std::chrono::steady_clock::now();
  last_ = model_.forward_backward(micro_batches.front(), loss);
  forward_backward_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  StepTotals totals;
  totals.micro_batches = 1;
  totals.add(last_);
  return totals;
}

double SingleProcessGradients::clip_gradients(double max_norm) {
  return clip_grad_norm(model_.params(), max_norm);
}

std::string first_non_finite_gradient(const model::ParamStore<float>& params) {
  const auto& g = params.grads();
  for (const model::ParamSpec& spec : params.specs()) {
    const int64_t begin = params.offset(spec.name);
    for (int64_t i = begin; i < begin + spec.numel(); ++i)
      if (!std::isfinite(g[static_cast<size_t>(i)])) return spec.name;
  }
  return "";
}

}  // namespace trex::train
