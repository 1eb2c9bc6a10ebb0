// Group A families (product mix, diet/blending, transportation, assignment,
// portfolio): for every phrasing template, the checker accepts GLPK's optimum
// with the solver's objective and rejects a corrupted, family-meaningful
// variant of it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>

#include "trex/core/rng.hpp"
#include "trex/or/families/family.hpp"
#include "trex/or/solver/linear_model.hpp"

namespace trex::orlib {
namespace {

using Values = std::unordered_map<std::string, double>;

struct Solved {
  std::unique_ptr<Instance> instance;
  double objective = 0;
  Values values;
};

// Generates an instance of `family` with phrasing template `nl_template` (every
// side condition switched on) and solves it with GLPK.
Solved solve(std::string_view family, int nl_template, uint64_t seed = 11) {
  Rng rng(seed, {hash_string(family), static_cast<uint64_t>(nl_template)});
  GenOptions options;
  options.difficulty = Difficulty::medium;
  options.side_constraint_rate = 1.0;
  options.nl_template = nl_template;
  Solved out;
  out.instance = find_family(family).generate(rng, options);
  LinearModel model = LinearModel::from_mathprog(out.instance->gmpl());
  SolveResult r = model.solve_glpk();
  EXPECT_EQ(r.status, SolveStatus::optimal) << out.instance->gmpl();
  out.objective = r.objective;
  out.values = Solution::from_columns(r.objective, model.column_names(), r.x).values();
  return out;
}

int templates(std::string_view family) {
  return find_family(family).nl_templates();
}

CheckResult check(const Solved& solved, const Values& values) {
  return solved.instance->check(Solution(solved.objective, values));
}

void expect_accepted(const Solved& solved) {
  CheckResult r = check(solved, solved.values);
  ASSERT_TRUE(r.feasible) << (r.violations.empty() ? "" : r.violations.front());
  EXPECT_NEAR(r.objective, solved.objective, 1e-6 * std::max(1.0, std::fabs(solved.objective)));
}

void expect_infeasible(const Solved& solved, const Values& corrupted) {
  CheckResult r = check(solved, corrupted);
  EXPECT_FALSE(r.feasible) << solved.instance->gmpl();
}

bool has_prefix(const std::string& name, const std::string& prefix) {
  return name.compare(0, prefix.size(), prefix) == 0;
}

// The column with the largest value among those named prefix[...].
std::string largest(const Values& values, const std::string& prefix) {
  std::string best;
  double best_value = -1e300;
  for (const auto& [name, v] : values)
    if (has_prefix(name, prefix) && (v > best_value || (v == best_value && name < best))) {
      best = name;
      best_value = v;
    }
  return best;
}

TEST(FamiliesGroupA, ProductMixCheckerRejectsOverproduction) {
  for (int t = 0; t < templates("product_mix"); ++t) {
    SCOPED_TRACE("template " + std::to_string(t));
    Solved solved = solve("product_mix", t);
    expect_accepted(solved);
    // Tripling the plan breaks whichever capacity, market limit or joint cap was binding:
    // a profitable optimum always presses against one of them.
    Values corrupted = solved.values;
    for (auto& [name, v] : corrupted)
      if (has_prefix(name, "x[")) v = 3 * v + 1;
    expect_infeasible(solved, corrupted);
  }
}

TEST(FamiliesGroupA, ProductMixCheckerRejectsFractionalWholeUnits) {
  // Template 0 (furniture) sells whole units only.
  Solved solved = solve("product_mix", 0);
  expect_accepted(solved);
  Values corrupted = solved.values;
  const std::string name = largest(corrupted, "x[");
  ASSERT_FALSE(name.empty());
  corrupted[name] -= 0.5;
  expect_infeasible(solved, corrupted);
}

TEST(FamiliesGroupA, DietCheckerRejectsDroppedFood) {
  for (int t = 0; t < templates("diet"); ++t) {
    SCOPED_TRACE("template " + std::to_string(t));
    Solved solved = solve("diet", t);
    expect_accepted(solved);
    // Every item in a min-cost optimum is needed (all costs are positive), so leaving out the
    // largest one breaks a nutrient / quality bound, the batch size or a minimum use.
    Values corrupted = solved.values;
    const std::string name = largest(corrupted, "x[");
    ASSERT_FALSE(name.empty());
    corrupted[name] = 0;
    expect_infeasible(solved, corrupted);
  }
}

TEST(FamiliesGroupA, DietCheckerRejectsOffSpecBlend) {
  // Blends (templates 2-5): replacing the recipe by the same total of its largest input keeps the
  // batch size but cannot meet every quality bound (the generator rules out single-input blends).
  for (int t = 2; t < templates("diet"); ++t) {
    SCOPED_TRACE("template " + std::to_string(t));
    Solved solved = solve("diet", t);
    Values corrupted;
    double total = 0;
    for (const auto& [name, v] : solved.values)
      if (has_prefix(name, "x[")) total += v;
    corrupted[largest(solved.values, "x[")] = total;
    CheckResult r = check(solved, corrupted);
    const bool objective_differs =
        std::fabs(r.objective - solved.objective) > 1e-6 * std::max(1.0, solved.objective);
    EXPECT_TRUE(!r.feasible || objective_differs);
  }
}

TEST(FamiliesGroupA, TransportationCheckerRejectsMissingShipment) {
  for (int t = 0; t < templates("transportation"); ++t) {
    SCOPED_TRACE("template " + std::to_string(t));
    Solved solved = solve("transportation", t);
    expect_accepted(solved);
    // Cancelling the largest shipment leaves its customer short of its requirement.
    Values corrupted = solved.values;
    const std::string name = largest(corrupted, "x[");
    ASSERT_FALSE(name.empty());
    corrupted[name] = 0;
    CheckResult r = check(solved, corrupted);
    EXPECT_FALSE(r.feasible);
    bool demand_violation = false;
    for (const auto& v : r.violations)
      demand_violation = demand_violation || has_prefix(v, "demand");
    EXPECT_TRUE(demand_violation);
  }
}

TEST(FamiliesGroupA, TransportationCheckerRejectsOversupply) {
  Solved solved = solve("transportation", 0);
  // Doubling every shipment exceeds the suppliers' capacities.
  Values corrupted = solved.values;
  for (auto& [name, v] : corrupted) v *= 2;
  expect_infeasible(solved, corrupted);
}

TEST(FamiliesGroupA, AssignmentCheckerRejectsDoubleAndMissingAssignment) {
  for (int t = 0; t < templates("assignment"); ++t) {
    SCOPED_TRACE("template " + std::to_string(t));
    Solved solved = solve("assignment", t);
    expect_accepted(solved);
    // Leaving one task unassigned.
    Values dropped = solved.values;
    const std::string name = largest(dropped, "x[");
    ASSERT_FALSE(name.empty());
    dropped[name] = 0;
    expect_infeasible(solved, dropped);
    // Giving every task to every agent: tasks done several times (and capacities exceeded).
    Values doubled = solved.values;
    for (auto& [col, v] : doubled)
      if (has_prefix(col, "x[")) v = 1;
    expect_infeasible(solved, doubled);
  }
}

TEST(FamiliesGroupA, AssignmentCheckerRejectsFractionalAssignment) {
  Solved solved = solve("assignment", 3);  // generalised assignment
  Values corrupted = solved.values;
  const std::string name = largest(corrupted, "x[");
  corrupted[name] = 0.5;
  expect_infeasible(solved, corrupted);
}

TEST(FamiliesGroupA, PortfolioCheckerRejectsBrokenBudgetAndRisk) {
  for (int t = 0; t < templates("portfolio"); ++t) {
    SCOPED_TRACE("template " + std::to_string(t));
    Solved solved = solve("portfolio", t);
    expect_accepted(solved);
    const std::string holding = has_prefix(largest(solved.values, "w["), "w[") ? "w[" : "x[";
    // Investing only 90% of the budget.
    Values underinvested = solved.values;
    for (auto& [name, v] : underinvested)
      if (has_prefix(name, holding)) v *= 0.9;
    expect_infeasible(solved, underinvested);
    // Putting everything into the largest holding breaks the per-asset cap.
    Values concentrated;
    double total = 0;
    for (const auto& [name, v] : solved.values)
      if (has_prefix(name, holding)) total += v;
    concentrated[largest(solved.values, holding)] = total;
    expect_infeasible(solved, concentrated);
  }
}

TEST(FamiliesGroupA, PortfolioCheckerRejectsUnderstatedRisk) {
  // The auxiliary risk variables must cover the losses they stand for: zeroing them claims a
  // riskless portfolio.
  for (int t = 0; t < templates("portfolio"); ++t) {
    SCOPED_TRACE("template " + std::to_string(t));
    Solved solved = solve("portfolio", t);
    Values corrupted = solved.values;
    bool touched = false;
    for (auto& [name, v] : corrupted)
      if (has_prefix(name, "y[") || has_prefix(name, "excess[") || name == "z" || name == "zeta") {
        v = -1e4;
        touched = true;
      }
    ASSERT_TRUE(touched);
    expect_infeasible(solved, corrupted);
  }
}

}  // namespace
}  // namespace trex::orlib
