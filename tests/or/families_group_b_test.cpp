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

TEST(GroupBShortestPath, RemovingALegOfTheRouteBreaksFlowBalance) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    for (Difficulty d : {Difficulty::easy, Difficulty::hard}) {
      Solved solved = solve("shortest_path", seed, d, 0.5);
      expect_accepted(solved);
      auto values = solved.values;
      const std::string leg = first_positive(values, "x[");
      ASSERT_FALSE(leg.empty());
      values[leg] = 0;
      CheckResult r = solved.instance->check(Solution(solved.objective, values));
      EXPECT_FALSE(r.feasible);
    }
  }
}

TEST(GroupBMaxFlow, ClaimingMoreFlowThanRoutedIsRejected) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Solved solved = solve("max_flow", seed, Difficulty::medium, 0.5);
    expect_accepted(solved);
    ASSERT_GT(solved.objective, 0);
    // A larger flow value without the arc flows to carry it.
    auto values = solved.values;
    values["flow"] += 5;
    expect_rejected(solved, values);
    EXPECT_FALSE(solved.instance->check(Solution(solved.objective, values)).feasible);
    // Dropping the flow on one arc breaks conservation.
    values = solved.values;
    const std::string arc = first_positive(values, "x[");
    ASSERT_FALSE(arc.empty());
    values[arc] = 0;
    EXPECT_FALSE(solved.instance->check(Solution(solved.objective, values)).feasible);
  }
}

TEST(GroupBFixedChargeNetwork, UsingALinkThatIsNotOpenedIsRejected) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Solved solved = solve("fixed_charge_network", seed, Difficulty::easy, 0.5);
    expect_accepted(solved);
    auto values = solved.values;
    const std::string opened = first_positive(values, "y[");
    ASSERT_FALSE(opened.empty());
    values[opened] = 0;  // close the link but keep routing over it
    CheckResult r = solved.instance->check(Solution(solved.objective, values));
    EXPECT_FALSE(r.feasible);
    // A fractional opening is not allowed either.
    values[opened] = 0.5;
    EXPECT_FALSE(solved.instance->check(Solution(solved.objective, values)).feasible);
  }
}

TEST(GroupBSetCover, DroppingAChosenSiteUncoversAnElement) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    // Without side constraints every site in a minimum-cost cover is needed.
    Solved solved = solve("set_cover", seed, Difficulty::medium, 0.0);
    expect_accepted(solved);
    auto values = solved.values;
    const std::string site = first_positive(values, "x[");
    ASSERT_FALSE(site.empty());
    values[site] = 0;
    CheckResult r = solved.instance->check(Solution(solved.objective, values));
    EXPECT_FALSE(r.feasible);
    EXPECT_LT(r.objective, solved.objective);
  }
}

TEST(GroupBUnitCommitment, OutputFromAnOffUnitAndMissingStartupsAreRejected) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Solved solved = solve("unit_commitment", seed, Difficulty::medium, 0.5);
    expect_accepted(solved);
    // Switch a producing unit off without removing its output.
    auto values = solved.values;
    const std::string output = first_positive(values, "p[");
    ASSERT_FALSE(output.empty());
    values["u" + output.substr(1)] = 0;
    EXPECT_FALSE(solved.instance->check(Solution(solved.objective, values)).feasible);
    // Extra output breaks the demand balance.
    values = solved.values;
    values[output] += 1;
    EXPECT_FALSE(solved.instance->check(Solution(solved.objective, values)).feasible);
    // Hiding a startup breaks the startup logic (and lowers the cost).
    values = solved.values;
    const std::string start = first_positive(values, "s[");
    if (!start.empty()) {
      values[start] = 0;
      EXPECT_FALSE(solved.instance->check(Solution(solved.objective, values)).feasible);
    }
  }
}

}  // namespace
}  // namespace trex::orlib
