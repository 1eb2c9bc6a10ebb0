// Group B families (network flows, covering, unit commitment): each checker
// accepts the solver's optimum and rejects a corrupted, family-meaningful
// variant of it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <unordered_map>

#include "trex/core/rng.hpp"
#include "trex/or/families/family.hpp"
#include "trex/or/solver/linear_model.hpp"

namespace trex::orlib {
namespace {

struct Solved {
  std::unique_ptr<Instance> instance;
  double objective = 0;
  std::unordered_map<std::string, double> values;
};

Solved solve(std::string_view family, uint64_t seed, Difficulty difficulty,
             double side_constraint_rate = 0.0) {
  Rng rng(seed, {hash_string(family)});
  GenOptions options;
  options.difficulty = difficulty;
  options.side_constraint_rate = side_constraint_rate;
  Solved out;
  out.instance = find_family(family).generate(rng, options);
  LinearModel model = LinearModel::from_mathprog(out.instance->gmpl());
  SolveResult r = model.solve_glpk();
  EXPECT_EQ(r.status, SolveStatus::optimal) << out.instance->gmpl();
  out.objective = r.objective;
  Solution s = Solution::from_columns(r.objective, model.column_names(), r.x);
  out.values = s.values();
  return out;
}

// The optimum passes the checker with the solver's objective.
void expect_accepted(const Solved& solved) {
  CheckResult r = solved.instance->check(Solution(solved.objective, solved.values));
  ASSERT_TRUE(r.feasible) << (r.violations.empty() ? "" : r.violations.front());
  EXPECT_NEAR(r.objective, solved.objective, 1e-6 * std::max(1.0, std::fabs(solved.objective)));
}

// The corrupted solution fails the checker or changes the recomputed objective.
void expect_rejected(const Solved& solved, const std::unordered_map<std::string, double>& values) {
  CheckResult r = solved.instance->check(Solution(solved.objective, values));
  const bool objective_differs =
      std::fabs(r.objective - solved.objective) > 1e-6 * std::max(1.0, std::fabs(solved.objective));
  EXPECT_TRUE(!r.feasible || objective_differs);
}

std::string first_positive(const std::unordered_map<std::string, double>& values,
                           const std::string& prefix) {
  std::string best;
  for (const auto& [name, v] : values)
    if (name.starts_with(prefix) && v > 1e-6 && (best.empty() || name < best)) best = name;
  return best;
}

TEST(GroupBMinCostFlow, RemovingPartOfAShipmentBreaksABalance) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Solved solved = solve("min_cost_flow", seed, Difficulty::medium, 0.5);
    expect_accepted(solved);
    auto values = solved.values;
    const std::string arc = first_positive(values, "x[");
    ASSERT_FALSE(arc.empty());
    values[arc] -= std::min(1.0, values[arc]);
    CheckResult r = solved.instance->check(Solution(solved.objective, values));
    EXPECT_FALSE(r.feasible);
  }
}

}  // namespace
}  // namespace trex::orlib
