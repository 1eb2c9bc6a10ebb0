// Group E families (production_inventory, investment_allocation): each
// checker accepts GLPK's optimum with the solver's objective and rejects a
// solution corrupted in a way that matters for that family.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

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

// Generates instances of `family` (every side condition on) until `accept`
// likes the instance, and solves it with GLPK.
Solved solve_first(const std::string& family, int nl_template,
                   const std::function<bool(const Instance&)>& accept) {
  for (uint64_t attempt = 0; attempt < 100; ++attempt) {
    Rng rng(77, {hash_string(family), static_cast<uint64_t>(nl_template), attempt});
    GenOptions options;
    options.difficulty = Difficulty::medium;
    options.side_constraint_rate = 1.0;
    options.nl_template = nl_template;
    Solved s;
    s.instance = find_family(family).generate(rng, options);
    if (!accept(*s.instance)) continue;
    LinearModel model = LinearModel::from_mathprog(s.instance->gmpl());
    SolveResult r = model.solve_glpk();
    EXPECT_EQ(r.status, SolveStatus::optimal) << s.instance->gmpl();
    s.objective = r.objective;
    s.values = Solution::from_columns(r.objective, model.column_names(), r.x).values();
    return s;
  }
  ADD_FAILURE() << family << ": no suitable instance";
  return {};
}

CheckResult check(const Solved& s, const Values& values) {
  return s.instance->check(Solution(s.objective, values));
}

void expect_accepted(const Solved& s) {
  ASSERT_TRUE(s.instance);
  CheckResult r = check(s, s.values);
  ASSERT_TRUE(r.feasible) << (r.violations.empty() ? "" : r.violations.front());
  EXPECT_NEAR(r.objective, s.objective, 1e-6 * std::max(1.0, std::fabs(s.objective)));
}

void expect_violation(const CheckResult& r, const std::string& reason) {
  EXPECT_FALSE(r.feasible);
  const bool found = std::any_of(r.violations.begin(), r.violations.end(),
                                 [&](const std::string& v) { return v.find(reason) != v.npos; });
  EXPECT_TRUE(found) << "no violation mentions '" << reason << "'"
                     << (r.violations.empty() ? "" : "; first: " + r.violations.front());
}

// "x[urea,3]" -> {"urea", "3"}.
std::pair<std::string, std::string> product_period(const std::string& column) {
  const size_t open = column.find('['), comma = column.find(','), close = column.find(']');
  return {column.substr(open + 1, comma - open - 1), column.substr(comma + 1, close - comma - 1)};
}

bool is(const std::string& column, const std::string& var) {
  return column.compare(0, var.size() + 1, var + "[") == 0;
}

TEST(FamiliesGroupE, ProductionInventoryCheckerCatchesUnmetDemand) {
  for (int t = 0; t < find_family("production_inventory").nl_templates(); ++t) {
    SCOPED_TRACE("template " + std::to_string(t));
    Solved s = solve_first("production_inventory", t, [](const Instance&) { return true; });
    expect_accepted(s);
    // Dropping the largest production quantity while keeping the stock levels
    // leaves that period's orders unserved: its stock balance breaks.
    Values broken = s.values;
    std::string largest;
    for (const auto& [name, v] : broken)
      if (is(name, "x") && (largest.empty() || v > broken[largest])) largest = name;
    ASSERT_FALSE(largest.empty());
    broken[largest] = 0;
    expect_violation(check(s, broken), "stock balance");
  }
}

TEST(FamiliesGroupE, ProductionInventoryCheckerCatchesOverloadedFirstPeriod) {
  for (int t = 0; t < find_family("production_inventory").nl_templates(); ++t) {
    SCOPED_TRACE("template " + std::to_string(t));
    Solved s = solve_first("production_inventory", t, [](const Instance&) { return true; });
    expect_accepted(s);
    // Making everything in period 1 and carrying it in stock keeps every
    // balance, but period 1 cannot make the whole horizon's demand.
    Values early;
    std::unordered_map<std::string, double> total;
    std::vector<std::string> periods;
    for (const auto& [name, v] : s.values)
      if (is(name, "x")) {
        total[product_period(name).first] += v;
        periods.push_back(product_period(name).second);
      }
    for (const auto& [name, v] : s.values)
      if (is(name, "o")) early[name] = v;  // overtime as it was
    std::sort(periods.begin(), periods.end(), [](const std::string& a, const std::string& b) {
      return std::stoi(a) < std::stoi(b);
    });
    periods.erase(std::unique(periods.begin(), periods.end()), periods.end());
    // Stock = what the optimum held plus what was made early: I'[p,t] = I[p,t]
    // + sum_{s>t} x[p,s].
    for (const auto& [product, sum] : total) {
      double made_so_far = 0;
      for (const std::string& period : periods) {
        const std::string at = product + "," + period;
        const double x = s.values.count("x[" + at + "]") ? s.values.at("x[" + at + "]") : 0;
        const double inv = s.values.count("I[" + at + "]") ? s.values.at("I[" + at + "]") : 0;
        made_so_far += x;
        early["x[" + at + "]"] = period == "1" ? sum : 0;
        early["I[" + at + "]"] = inv + (sum - made_so_far);
      }
    }
    expect_violation(check(s, early), "capacity in period 1");
  }
}

TEST(FamiliesGroupE, ProductionInventoryCheckerRejectsFractionalBicycles) {
  // Template 2 (bicycles) makes whole units only.
  Solved s = solve_first("production_inventory", 2, [](const Instance&) { return true; });
  expect_accepted(s);
  Values broken = s.values;
  for (auto& [name, v] : broken)
    if (is(name, "x") && v >= 1) {
      v -= 0.5;
      break;
    }
  expect_violation(check(s, broken), "is not integral");
}

TEST(FamiliesGroupE, InvestmentCheckerRejectsEverythingInTheBestOption) {
  for (int t = 0; t < find_family("investment_allocation").nl_templates(); ++t) {
    SCOPED_TRACE("template " + std::to_string(t));
    Solved s = solve_first("investment_allocation", t, [](const Instance&) { return true; });
    expect_accepted(s);
    // The best-paying option always has a cap or a maximum share: the whole
    // invested total in it breaks that limit.
    double total = 0;
    for (const auto& [name, v] : s.values)
      if (is(name, "x")) total += v;
    Values all_in;
    double best_rate = -1;
    std::string best;
    // Each option's return rate: the checker's objective for one dollar in it.
    for (const auto& [name, v] : s.values) {
      if (!is(name, "x")) continue;
      Values one = {{name, 1.0}};
      const double rate = s.instance->check(Solution(0, one)).objective;
      if (rate > best_rate) best_rate = rate, best = name;
    }
    ASSERT_FALSE(best.empty());
    all_in[best] = total;
    // "x[crypto_fund]": the broken cap or share names the option.
    expect_violation(check(s, all_in), best.substr(2, best.size() - 3));
  }
}

TEST(FamiliesGroupE, InvestmentCheckerCatchesTheRiskTarget) {
  // An instance with an average-risk limit: the money all in the riskiest
  // option breaks it (the generator keeps the target below the top rating).
  Solved s = solve_first("investment_allocation", 0, [](const Instance& inst) {
    const auto v = inst.variants();
    return std::find(v.begin(), v.end(), "risk_target") != v.end();
  });
  expect_accepted(s);
  double total = 0;
  for (const auto& [name, v] : s.values)
    if (is(name, "x")) total += v;
  bool found = false;
  for (const auto& [name, v] : s.values) {
    if (!is(name, "x")) continue;
    const CheckResult r = check(s, {{name, total}});
    for (const std::string& why : r.violations)
      found = found || why.find("average risk rating") != std::string::npos;
  }
  EXPECT_TRUE(found) << "no single-option portfolio breaks the risk limit\n" << s.instance->gmpl();
}

}  // namespace
}  // namespace trex::orlib
