// The GRPO objective against the PyTorch autograd oracle (tests/fixtures/grpo/objective.json,
// written by reference/make_grpo_fixtures.py), plus C++-only checks: central finite differences
// of the loss, hand-computed advantages and clip branches, errors and the empty batch.
#include "trex/rl/objective.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_paths.hpp"
#include "trex/core/atomic_file.hpp"
#include "trex/core/error.hpp"
#include "trex/core/rng.hpp"

namespace trex::rl {
namespace {

using json = nlohmann::json;
using Values = std::vector<double>;

// Values of order 1: absolute tolerance; larger values: relative.
constexpr double kTolerance = 1e-6;
void expect_near_scaled(double actual, double expected, const std::string& what) {
  EXPECT_NEAR(actual, expected, kTolerance * std::max(1.0, std::abs(expected))) << what;
}

json load_fixture() {
  return json::parse(read_file(test::source_dir() + "/tests/fixtures/grpo/objective.json"));
}

ObjectiveResult run_case(const json& c) {
  const Values lp = c["logprobs"], old_lp = c["old_logprobs"], ref = c["ref_logprobs"],
               adv = c["token_advantages"];
  const ObjectiveOptions options{c["clip_low"], c["clip_high"], c["kl_coef"]};
  return policy_objective(lp, old_lp, ref, adv, options);
}

TEST(GrpoObjective, FixtureCoversTheCases) {
  const json fixture = load_fixture();
  ASSERT_GE(fixture["cases"].size(), 8u);
  int64_t clipped = 0, uniform = 0, ties = 0, kl_cases = 0, dr_cases = 0;
  bool asymmetric = false;
  for (const json& c : fixture["cases"]) {
    clipped += static_cast<int64_t>(
        std::lround(c["clip_fraction"].get<double>() * c["tokens"].get<double>()));
    uniform += c["uniform_groups"].get<int64_t>();
    ties += static_cast<int64_t>(c["tie_tokens"].size());
    kl_cases += c["kl_coef"].get<double>() > 0 ? 1 : 0;
    dr_cases += c["scale_by_std"].get<bool>() ? 0 : 1;
    asymmetric |= c["clip_low"].get<double>() != c["clip_high"].get<double>();
  }
  EXPECT_GT(clipped, 20);
  EXPECT_GE(uniform, 3);
  EXPECT_GE(ties, 10);
  EXPECT_GE(kl_cases, 3);
  EXPECT_GE(dr_cases, 1);
  EXPECT_TRUE(asymmetric);
}

TEST(GrpoObjective, AdvantagesMatchTorchOracle) {
  const json fixture = load_fixture();  // kept alive: the loop walks into it
  ASSERT_GE(fixture["cases"].size(), 8u);
  for (const json& c : fixture["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const Values rewards = c["rewards"];
    const GroupAdvantages got =
        group_advantages(rewards, c["group_size"], {c["scale_by_std"], c["epsilon"]});
    const Values expected = c["advantages"];
    ASSERT_EQ(got.advantages.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      expect_near_scaled(got.advantages[i], expected[i], "advantage " + std::to_string(i));
    EXPECT_EQ(got.groups, c["groups"].get<int64_t>());
    EXPECT_EQ(got.uniform_groups, c["uniform_groups"].get<int64_t>());
    expect_near_scaled(got.mean_reward, c["mean_reward"], "mean_reward");
    expect_near_scaled(got.mean_group_std, c["mean_group_std"], "mean_group_std");

    // The oracle's per-token advantages are its per-sequence ones repeated over each sequence.
    const std::vector<int64_t> lengths = c["sequence_lengths"];
    const Values token_advantages = c["token_advantages"];
    size_t t = 0;
    for (size_t s = 0; s < lengths.size(); ++s)
      for (int64_t k = 0; k < lengths[s]; ++k, ++t)
        expect_near_scaled(got.advantages[s], token_advantages.at(t), "token " + std::to_string(t));
    EXPECT_EQ(t, token_advantages.size());
  }
}

TEST(GrpoObjective, LossGradientAndStatisticsMatchTorchOracle) {
  const json fixture = load_fixture();  // kept alive: the loop walks into it
  ASSERT_GE(fixture["cases"].size(), 8u);
  for (const json& c : fixture["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const ObjectiveResult got = run_case(c);
    const auto n = c["tokens"].get<int64_t>();
    ASSERT_EQ(got.tokens, n);
    expect_near_scaled(got.loss, c["loss"], "loss");
    expect_near_scaled(got.pg_loss, c["pg_loss"], "pg_loss");
    expect_near_scaled(got.kl, c["kl"], "kl");
    EXPECT_DOUBLE_EQ(got.clip_fraction, c["clip_fraction"].get<double>());
    expect_near_scaled(got.ratio_mean, c["ratio_mean"], "ratio_mean");
    expect_near_scaled(got.ratio_max, c["ratio_max"], "ratio_max");

    // Tokens exactly on a clip boundary (r == 1 ± clip, A ≠ 0): the pg term has no derivative
    // there. T-Rex takes the unclipped one, −A·r; autograd gave tie_pg_grad_factor of it (½ in
    // torch ≥ 2.14, see the generator), so the oracle's value is shifted by the rest.
    const Values lp = c["logprobs"], old_lp = c["old_logprobs"], adv = c["token_advantages"];
    const Values expected_grad = c["grad_logprobs"];
    Values expected = expected_grad;
    for (const json& index : c["tie_tokens"]) {
      const auto t = index.get<size_t>();
      const double ratio = std::exp(lp[t] - old_lp[t]);
      const double factor = c["tie_pg_grad_factor"];
      expected[t] += (1.0 - factor) * (-adv[t] * ratio) / static_cast<double>(n);
    }
    ASSERT_EQ(got.grad_logprobs.size(), expected.size());
    // Gradients are O(1/N): compare N·grad, which is of order 1.
    for (size_t t = 0; t < expected.size(); ++t)
      expect_near_scaled(got.grad_logprobs[t] * static_cast<double>(n),
                         expected[t] * static_cast<double>(n), "grad " + std::to_string(t));
  }
}

// Random tokens with both clip sides populated, KL on, clip-higher; central differences of the
// loss in double against grad_logprobs, on tokens whose ratio is not within a step of a boundary.
TEST(GrpoObjective, GradientMatchesFiniteDifferences) {
  Rng rng(7, {1});
  const size_t n = 64;
  Values lp(n), old_lp(n), ref(n), adv(n);
  for (size_t t = 0; t < n; ++t) {
    lp[t] = -rng.uniform(0.05, 3.0);
    old_lp[t] = lp[t] + 0.4 * rng.normal();
    ref[t] = lp[t] + 0.3 * rng.normal();
    adv[t] = rng.normal();
  }
  const ObjectiveOptions options{0.2, 0.28, 0.1};
  const ObjectiveResult result = policy_objective(lp, old_lp, ref, adv, options);
  ASSERT_GT(result.clip_fraction, 0.1);
  const double h = 1e-5;
  int checked = 0, clipped = 0;
  for (size_t t = 0; t < n; ++t) {
    const double ratio = std::exp(lp[t] - old_lp[t]);
    const double margin = std::min(std::abs(ratio - (1.0 - options.clip_low)),
                                   std::abs(ratio - (1.0 + options.clip_high)));
    if (margin < 1e-3) continue;  // a kink within reach of the step
    Values plus = lp, minus = lp;
    plus[t] += h;
    minus[t] -= h;
    const double numeric = (policy_objective(plus, old_lp, ref, adv, options).loss -
                            policy_objective(minus, old_lp, ref, adv, options).loss) /
                           (2 * h);
    EXPECT_NEAR(result.grad_logprobs[t], numeric, 1e-9) << "token " << t;
    ++checked;
    const bool is_clipped = (adv[t] > 0 && ratio > 1.0 + options.clip_high) ||
                            (adv[t] < 0 && ratio < 1.0 - options.clip_low);
    clipped += is_clipped ? 1 : 0;
  }
  EXPECT_GE(checked, 56);
  EXPECT_GE(clipped, 5);  // the zero-gradient branch is among the checked tokens
}

// One token per branch, by hand: N = 4, clip 0.2 / 0.28, no KL.
TEST(GrpoObjective, ClipBranchesByHand) {
  const Values lp = {std::log(1.5), std::log(1.5), std::log(0.5), std::log(0.5)};
  const Values old_lp = {0.0, 0.0, 0.0, 0.0};
  const Values adv = {2.0, -2.0, 2.0, -2.0};
  const ObjectiveResult r = policy_objective(lp, old_lp, {}, adv, {0.2, 0.28, 0.0});
  // r = 1.5, A > 0: clipped at 1.28, pg = −1.28·2, no gradient.
  // r = 1.5, A < 0: pg = 1.5·2 (the unclipped branch is the minimum), grad −A·r / N = 3 / 4.
  // r = 0.5, A > 0: pg = −0.5·2, grad −1 / 4.
  // r = 0.5, A < 0: clipped at 0.8, pg = 0.8·2, no gradient.
  EXPECT_NEAR(r.pg_loss, (-2.56 + 3.0 - 1.0 + 1.6) / 4, 1e-12);
  EXPECT_DOUBLE_EQ(r.loss, r.pg_loss);
  EXPECT_DOUBLE_EQ(r.clip_fraction, 0.5);
  EXPECT_DOUBLE_EQ(r.kl, 0.0);
  ASSERT_EQ(r.grad_logprobs.size(), 4u);
  EXPECT_EQ(r.grad_logprobs[0], 0.0);
  EXPECT_NEAR(r.grad_logprobs[1], 0.75, 1e-12);
  EXPECT_NEAR(r.grad_logprobs[2], -0.25, 1e-12);
  EXPECT_EQ(r.grad_logprobs[3], 0.0);
  EXPECT_NEAR(r.ratio_mean, 1.0, 1e-12);
  EXPECT_NEAR(r.ratio_max, 1.5, 1e-12);
}

// A reference given with kl_coef == 0 is reported, never in the loss or the gradient.
TEST(GrpoObjective, KlReportedWithoutCoefficient) {
  const Values lp = {-1.0, -0.5, -2.0}, old_lp = {-1.1, -0.4, -2.0}, ref = {-0.7, -0.5, -2.5};
  const Values adv = {1.0, -0.5, 0.25};
  const ObjectiveResult without = policy_objective(lp, old_lp, {}, adv, {});
  const ObjectiveResult reported = policy_objective(lp, old_lp, ref, adv, {});
  double kl = 0.0;
  for (size_t t = 0; t < lp.size(); ++t) {
    const double d = ref[t] - lp[t];
    kl += std::exp(d) - d - 1.0;
  }
  EXPECT_NEAR(reported.kl, kl / 3, 1e-15);
  EXPECT_GT(reported.kl, 0.0);
  EXPECT_EQ(without.kl, 0.0);
  EXPECT_EQ(reported.loss, without.loss);
  EXPECT_EQ(reported.grad_logprobs, without.grad_logprobs);
  // With a coefficient it enters both.
  const ObjectiveResult with = policy_objective(lp, old_lp, ref, adv, {0.2, 0.2, 0.5});
  EXPECT_NEAR(with.loss, without.loss + 0.5 * kl / 3, 1e-15);
  EXPECT_NEAR(with.grad_logprobs[0] - without.grad_logprobs[0],
              0.5 * (1.0 - std::exp(ref[0] - lp[0])) / 3, 1e-15);
}

TEST(GrpoObjective, UniformGroupsAreZeroAndCounted) {
  // (0.7 + 0.7 + 0.7) / 3 is not 0.7 in double: only setting the group to 0 makes it exactly 0.
  ASSERT_NE((0.7 + 0.7 + 0.7) / 3, 0.7);
  const Values rewards = {0.7, 0.7, 0.7, 1.0, 0.0, 0.5, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0};
  const GroupAdvantages got = group_advantages(rewards, 3, {});
  EXPECT_EQ(got.groups, 4);
  EXPECT_EQ(got.uniform_groups, 3);
  for (size_t i : {0, 1, 2, 6, 7, 8, 9, 10, 11}) EXPECT_EQ(got.advantages[i], 0.0) << i;
  const double std_mixed = std::sqrt(0.5 / 3);  // population std of {1, 0, 0.5}
  EXPECT_NEAR(got.advantages[3], 0.5 / (std_mixed + 1e-6), 1e-12);
  EXPECT_NEAR(got.advantages[4], -0.5 / (std_mixed + 1e-6), 1e-12);
  EXPECT_EQ(got.advantages[5], 0.0);  // exactly the mean
  EXPECT_NEAR(got.mean_group_std, std_mixed / 4, 1e-12);
  EXPECT_NEAR(got.mean_reward, 6.6 / 12, 1e-12);
  // With Dr. GRPO too.
  const GroupAdvantages dr = group_advantages(rewards, 3, {.scale_by_std = false});
  EXPECT_EQ(dr.uniform_groups, 3);
  EXPECT_EQ(dr.advantages[0], 0.0);
}

TEST(GrpoObjective, ScaleByStdUsesPopulationStdAndDrGrpoDoesNot) {
  const Values rewards = {1.0, 0.0, 0.0, 0.0, 2.0, 4.0};
  const GroupAdvantages dr = group_advantages(rewards, 2, {.scale_by_std = false});
  EXPECT_EQ(dr.advantages, (Values{0.5, -0.5, 0.0, 0.0, -1.0, 1.0}));
  EXPECT_EQ(dr.uniform_groups, 1);
  // Population std of {1, 0} is 0.5 (the sample std would be 0.707).
  const GroupAdvantages grpo = group_advantages(rewards, 2, {.scale_by_std = true, .epsilon = 0.0});
  EXPECT_EQ(grpo.advantages, (Values{1.0, -1.0, 0.0, 0.0, -1.0, 1.0}));
  EXPECT_DOUBLE_EQ(grpo.mean_group_std, (0.5 + 0.0 + 1.0) / 3);
  const GroupAdvantages eps = group_advantages(rewards, 2, {.scale_by_std = true, .epsilon = 0.5});
  EXPECT_DOUBLE_EQ(eps.advantages[0], 0.5 / 1.0);
  EXPECT_DOUBLE_EQ(eps.advantages[5], 1.0 / 1.5);
}

std::string field_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.field_name();
  }
  return "(no error)";
}

TEST(GrpoObjective, ErrorsNameTheirField) {
  const Values four = {0.0, 1.0, 0.5, 0.25};
  EXPECT_EQ(field_of([&] { group_advantages(four, 3, {}); }), "group_size");
  EXPECT_EQ(field_of([&] { group_advantages(four, 0, {}); }), "group_size");
  EXPECT_EQ(field_of([&] { group_advantages(four, -2, {}); }), "group_size");
  EXPECT_EQ(field_of([&] { group_advantages(Values{0.0, NAN}, 2, {}); }), "rewards");
  EXPECT_EQ(field_of([&] { group_advantages(Values{INFINITY, 0.0}, 2, {}); }), "rewards");
  EXPECT_EQ(field_of([&] { group_advantages(four, 2, {.epsilon = -1e-6}); }), "epsilon");
  EXPECT_EQ(field_of([&] { group_advantages(four, 2, {}); }), "(no error)");

  const Values lp = {-1.0, -2.0}, old_lp = {-1.1, -1.9}, ref = {-1.0, -1.5}, adv = {1.0, -1.0};
  const Values one = {0.0};
  const auto objective_field = [&](std::span<const double> l, std::span<const double> o,
                                   std::span<const double> r, std::span<const double> a,
                                   ObjectiveOptions options) {
    return field_of([&] { policy_objective(l, o, r, a, options); });
  };
  EXPECT_EQ(objective_field(lp, one, ref, adv, {}), "old_logprobs");
  EXPECT_EQ(objective_field(lp, old_lp, ref, one, {}), "token_advantages");
  EXPECT_EQ(objective_field(lp, old_lp, one, adv, {}), "ref_logprobs");
  EXPECT_EQ(objective_field(lp, old_lp, {}, adv, {0.2, 0.2, 0.1}), "ref_logprobs");
  EXPECT_EQ(objective_field(lp, old_lp, ref, adv, {1.0, 0.2, 0.0}), "clip_low");
  EXPECT_EQ(objective_field(lp, old_lp, ref, adv, {-0.1, 0.2, 0.0}), "clip_low");
  EXPECT_EQ(objective_field(lp, old_lp, ref, adv, {0.2, -0.1, 0.0}), "clip_high");
  EXPECT_EQ(objective_field(lp, old_lp, ref, adv, {0.2, NAN, 0.0}), "clip_high");
  EXPECT_EQ(objective_field(lp, old_lp, ref, adv, {0.2, 0.2, -0.01}), "kl_coef");
  EXPECT_EQ(objective_field(Values{-1.0, NAN}, old_lp, ref, adv, {}), "logprobs");
  EXPECT_EQ(objective_field(lp, Values{-INFINITY, 0.0}, ref, adv, {}), "old_logprobs");
  EXPECT_EQ(objective_field(lp, old_lp, Values{0.0, NAN}, adv, {}), "ref_logprobs");
  EXPECT_EQ(objective_field(lp, old_lp, ref, Values{NAN, 0.0}, {}), "token_advantages");
  // The edges of the valid ranges are accepted.
  EXPECT_EQ(objective_field(lp, old_lp, ref, adv, {0.0, 0.0, 0.0}), "(no error)");
  EXPECT_EQ(objective_field(lp, old_lp, {}, adv, {0.99, 3.0, 0.0}), "(no error)");
}

TEST(GrpoObjective, EmptyBatchIsAllZeros) {
  const ObjectiveResult r = policy_objective({}, {}, {}, {}, {0.2, 0.28, 0.1});
  EXPECT_EQ(r.tokens, 0);
  EXPECT_EQ(r.loss, 0.0);
  EXPECT_EQ(r.pg_loss, 0.0);
  EXPECT_EQ(r.kl, 0.0);
  EXPECT_EQ(r.clip_fraction, 0.0);
  EXPECT_EQ(r.ratio_mean, 0.0);
  EXPECT_EQ(r.ratio_max, 0.0);
  EXPECT_TRUE(r.grad_logprobs.empty());
  const GroupAdvantages a = group_advantages({}, 4, {});
  EXPECT_EQ(a.groups, 0);
  EXPECT_EQ(a.uniform_groups, 0);
  EXPECT_TRUE(a.advantages.empty());
  EXPECT_EQ(a.mean_reward, 0.0);
}

// A zero advantage gives no pg term and no gradient, even when the ratio overflows.
TEST(GrpoObjective, ZeroAdvantageHasNoGradient) {
  const Values lp = {-0.1, 0.0}, old_lp = {-3.0, -800.0}, adv = {0.0, 0.0};
  const ObjectiveResult r = policy_objective(lp, old_lp, {}, adv, {});
  EXPECT_EQ(r.loss, 0.0);
  EXPECT_EQ(r.grad_logprobs, (Values{0.0, 0.0}));
  EXPECT_EQ(r.clip_fraction, 0.0);
  EXPECT_TRUE(std::isinf(r.ratio_max));
}

}  // namespace
}  // namespace trex::rl
