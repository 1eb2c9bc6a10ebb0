#include "trex/rl/objective.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "trex/core/error.hpp"

namespace trex::rl {

namespace {

void require_finite(std::span<const double> values, const char* field) {
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]))
      throw Error("non-finite value at index " + std::to_string(i)).field(field);
}

void require_size(std::span<const double> values, size_t expected, const char* field) {
  if (values.size() != expected)
    throw Error("has " + std::to_string(values.size()) + " values, logprobs has " +
                std::to_string(expected))
        .field(field);
}

}  // namespace

GroupAdvantages group_advantages(std::span<const double> rewards, int64_t group_size,
                                 const AdvantageOptions& options) {
  if (group_size < 1)
    throw Error("must be >= 1, got " + std::to_string(group_size)).field("group_size");
  const auto size = static_cast<int64_t>(rewards.size());
  if (size % group_size != 0)
    throw Error(std::to_string(size) + " rewards are not a multiple of group_size " +
                std::to_string(group_size))
        .field("group_size");
  require_finite(rewards, "rewards");
  if (!std::isfinite(options.epsilon) || options.epsilon < 0.0)
    throw Error("must be finite and >= 0").field("epsilon");

  GroupAdvantages out;
  out.advantages.assign(rewards.size(), 0.0);
  out.groups = size / group_size;
  if (size == 0) return out;
  const auto g_count = static_cast<double>(group_size);
  double reward_sum = 0.0;
  double std_sum = 0.0;
  for (int64_t g = 0; g < out.groups; ++g) {
    const std::span<const double> group = rewards.subspan(g * group_size, group_size);
    double sum = 0.0;
    for (double r : group) sum += r;
    reward_sum += sum;
    if (std::all_of(group.begin(), group.end(), [&](double r) { return r == group[0]; })) {
      ++out.uniform_groups;  // advantages stay exactly 0; std_g is 0
      continue;
    }
    const double mean = sum / g_count;
    double squares = 0.0;
    for (double r : group) squares += (r - mean) * (r - mean);
    const double stddev = std::sqrt(squares / g_count);
    std_sum += stddev;
    const double scale = options.scale_by_std ? 1.0 / (stddev + options.epsilon) : 1.0;
    double* a = out.advantages.data() + g * group_size;
    for (int64_t i = 0; i < group_size; ++i) a[i] = (group[i] - mean) * scale;
  }
  out.mean_reward = reward_sum / static_cast<double>(size);
  out.mean_group_std = std_sum / static_cast<double>(out.groups);
  return out;
}

ObjectiveResult policy_objective(std::span<const double> logprobs,
                                 std::span<const double> old_logprobs,
                                 std::span<const double> ref_logprobs,
                                 std::span<const double> token_advantages,
                                 const ObjectiveOptions& options) {
  if (!std::isfinite(options.clip_low) || options.clip_low < 0.0 || options.clip_low >= 1.0)
    throw Error("must be in [0, 1)").field("clip_low");
  if (!std::isfinite(options.clip_high) || options.clip_high < 0.0)
    throw Error("must be finite and >= 0").field("clip_high");
  if (!std::isfinite(options.kl_coef) || options.kl_coef < 0.0)
    throw Error("must be finite and >= 0").field("kl_coef");
  const size_t n = logprobs.size();
  require_size(old_logprobs, n, "old_logprobs");
  require_size(token_advantages, n, "token_advantages");
  const bool has_ref = !ref_logprobs.empty();
  if (options.kl_coef > 0.0 && !has_ref && n > 0)
    throw Error("is empty but kl_coef > 0 needs the reference's log-probabilities")
        .field("ref_logprobs");
  if (has_ref) require_size(ref_logprobs, n, "ref_logprobs");
  require_finite(logprobs, "logprobs");
  require_finite(old_logprobs, "old_logprobs");
  require_finite(ref_logprobs, "ref_logprobs");
  require_finite(token_advantages, "token_advantages");

  ObjectiveResult out;
  out.tokens = static_cast<int64_t>(n);
  if (n == 0) return out;
  out.grad_logprobs.resize(n);
  const double inv_n = 1.0 / static_cast<double>(n);
  const double lower = 1.0 - options.clip_low;
  const double upper = 1.0 + options.clip_high;
  const bool kl_in_loss = options.kl_coef > 0.0;
  double loss_sum = 0.0, pg_sum = 0.0, kl_sum = 0.0, ratio_sum = 0.0;
  int64_t clipped_count = 0;
  for (size_t t = 0; t < n; ++t) {
    const double a = token_advantages[t];
    const double ratio = std::exp(logprobs[t] - old_logprobs[t]);
    ratio_sum += ratio;
    out.ratio_max = t == 0 ? ratio : std::max(out.ratio_max, ratio);

    // A == 0 is set apart so that an overflowed ratio (inf · 0) cannot make a NaN.
    double pg = 0.0, dpg = 0.0;
    if (a != 0.0) {
      const bool clipped = (a > 0.0 && ratio > upper) || (a < 0.0 && ratio < lower);
      pg = -std::min(ratio * a, std::clamp(ratio, lower, upper) * a);
      if (clipped)
        ++clipped_count;
      else
        dpg = -a * ratio;
    }
    double kl = 0.0, dkl = 0.0;
    if (has_ref) {
      const double delta = ref_logprobs[t] - logprobs[t];
      kl = std::expm1(delta) - delta;  // exp(δ) − δ − 1 without the cancellation near δ = 0
      dkl = -std::expm1(delta);        // d/dlp of kl: 1 − exp(δ)
    }
    pg_sum += pg;
    kl_sum += kl;
    // kl_coef == 0 with a reference: the KL is only reported (no 0 · inf in the loss).
    if (kl_in_loss) {
      loss_sum += pg + options.kl_coef * kl;
      out.grad_logprobs[t] = (dpg + options.kl_coef * dkl) * inv_n;
    } else {
      loss_sum += pg;
      out.grad_logprobs[t] = dpg * inv_n;
    }
  }
  out.loss = loss_sum * inv_n;
  out.pg_loss = pg_sum * inv_n;
  out.kl = kl_sum * inv_n;
  out.clip_fraction = static_cast<double>(clipped_count) * inv_n;
  out.ratio_mean = ratio_sum * inv_n;
  return out;
}

}  // namespace trex::rl
