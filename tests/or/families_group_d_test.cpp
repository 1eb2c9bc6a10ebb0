// Group D families (lot_sizing, shift_scheduling, job_shop, tsp, cvrp): each
// checker accepts GLPK's optimal solution with the solver's objective, and
// rejects a solution corrupted in a way that matters for that family.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <unordered_map>
#include <vector>

#include "trex/core/rng.hpp"
#include "trex/or/families/family.hpp"
#include "trex/or/solver/linear_model.hpp"

namespace trex::orlib {
namespace {

struct Solved {
  std::unique_ptr<Instance> instance;
  std::string gmpl;
  double objective = 0;
  std::unordered_map<std::string, double> values;
};

// Generates instances of `family` until `accept` likes the solved one.
Solved solve_first(const std::string& family, Difficulty difficulty, double side_rate,
                   const std::function<bool(const Solved&)>& accept) {
  for (uint64_t attempt = 0; attempt < 200; ++attempt) {
    Rng rng(2024, {hash_string(family), attempt});
    GenOptions options;
    options.difficulty = difficulty;
    options.side_constraint_rate = side_rate;
    Solved s;
    s.instance = find_family(family).generate(rng, options);
    s.gmpl = s.instance->gmpl();
    LinearModel model = LinearModel::from_mathprog(s.gmpl);
    SolveResult r = model.solve_glpk();
    if (r.status != SolveStatus::optimal) {
      ADD_FAILURE() << family << ": GLPK status " << to_string(r.status) << "\n" << s.gmpl;
      break;
    }
    s.objective = r.objective;
    s.values = Solution::from_columns(r.objective, model.column_names(), r.x).values();
    if (accept(s)) return s;
  }
  ADD_FAILURE() << family << ": no suitable instance found";
  return {};
}

CheckResult check(const Solved& s, const std::unordered_map<std::string, double>& values) {
  return s.instance->check(Solution(s.objective, values));
}

void expect_original_passes(const Solved& s) {
  ASSERT_TRUE(s.instance);
  CheckResult r = check(s, s.values);
  EXPECT_TRUE(r.feasible) << (r.violations.empty() ? "" : r.violations.front());
  EXPECT_NEAR(r.objective, s.objective, 1e-6 * std::max(1.0, std::fabs(s.objective)));
}

// The corrupted solution is rejected, and for the expected reason.
void expect_violation(const CheckResult& r, const std::string& reason) {
  EXPECT_FALSE(r.feasible);
  bool found = std::any_of(r.violations.begin(), r.violations.end(), [&](const std::string& v) {
    return v.find(reason) != std::string::npos;
  });
  EXPECT_TRUE(found) << "no violation mentions '" << reason << "'";
}

// Splits "b[Riverton,Salem]" into {"b", {"Riverton", "Salem"}}.
std::pair<std::string, std::vector<std::string>> split_column(const std::string& name) {
  size_t open = name.find('[');
  if (open == std::string::npos) return {name, {}};
  std::vector<std::string> index;
  std::string part;
  for (size_t i = open + 1; i + 1 < name.size(); ++i) {
    if (name[i] == ',') {
      index.push_back(part);
      part.clear();
    } else {
      part += name[i];
    }
  }
  index.push_back(part);
  return {name.substr(0, open), index};
}

// Arcs i -> j with b[i,j] = 1.
std::vector<std::pair<std::string, std::string>> arcs(const Solved& s) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, v] : s.values) {
    auto [var, idx] = split_column(name);
    if (var == "b" && v > 0.5) out.emplace_back(idx[0], idx[1]);
  }
  return out;
}

// The successor of every place left by exactly one arc (all but a CVRP depot).
std::map<std::string, std::string> successors(const Solved& s) {
  std::map<std::string, std::string> next;
  for (const auto& [from, to] : arcs(s)) next[from] = to;
  return next;
}

std::string data_symbol(const std::string& gmpl, const std::string& param) {
  std::smatch m;
  std::regex re("param " + param + " := (\\w+);");
  return std::regex_search(gmpl, m, re) ? m[1].str() : "";
}

std::string arc(const std::string& a, const std::string& b) {
  return "b[" + a + "," + b + "]";
}

TEST(FamiliesGroupD, LotSizingCheckerCatchesUnmetDemandAndMissingSetup) {
  Solved s =
      solve_first("lot_sizing", Difficulty::medium, 0.35, [](const Solved&) { return true; });
  expect_original_passes(s);
  std::string period;
  for (const auto& [name, v] : s.values)
    if (split_column(name).first == "q" && v > 1) period = split_column(name).second[0];
  ASSERT_FALSE(period.empty());

  auto short_run = s.values;  // one unit less produced: demand is no longer met
  short_run["q[" + period + "]"] -= 1;
  expect_violation(check(s, short_run), "balance");

  auto no_setup = s.values;  // production without paying for the setup
  no_setup["y[" + period + "]"] = 0;
  expect_violation(check(s, no_setup), "without setup");
}

TEST(FamiliesGroupD, ShiftSchedulingCheckerCatchesUncoveredPeriodAndFractionalStaff) {
  Solved s =
      solve_first("shift_scheduling", Difficulty::medium, 0.0, [](const Solved&) { return true; });
  expect_original_passes(s);
  // Cancel every shift that covers period 1 (the model's own coverage rule).
  std::string data = s.gmpl.substr(s.gmpl.find("data;"));
  std::map<std::string, int> start, len;
  std::regex row("\\n  (\\w+) (\\d+)");
  std::string section_start = data.substr(data.find("param start"));
  section_start = section_start.substr(0, section_start.find(';'));
  std::string section_len = data.substr(data.find("param len"));
  section_len = section_len.substr(0, section_len.find(';'));
  for (std::sregex_iterator it(section_start.begin(), section_start.end(), row), end; it != end;
       ++it)
    start[(*it)[1]] = std::stoi((*it)[2]);
  for (std::sregex_iterator it(section_len.begin(), section_len.end(), row), end; it != end; ++it)
    len[(*it)[1]] = std::stoi((*it)[2]);
  const int n = std::stoi(data_symbol(s.gmpl, "n"));
  auto cancelled = s.values;
  for (const auto& [shift, first] : start)
    if ((1 - first + n) % n < len[shift]) cancelled["z[" + shift + "]"] = 0;
  expect_violation(check(s, cancelled), "coverage");

  auto fractional = s.values;
  fractional["z[" + start.begin()->first + "]"] += 0.5;
  expect_violation(check(s, fractional), "not integral");

  auto extra = s.values;  // one more person: still feasible but dearer
  extra["z[" + start.begin()->first + "]"] += 1;
  CheckResult r = check(s, extra);
  EXPECT_TRUE(r.feasible);
  EXPECT_GT(r.objective, s.objective + 1e-6);
}

TEST(FamiliesGroupD, JobShopCheckerCatchesMachineOverlapAndLateFinish) {
  Solved s = solve_first("job_shop", Difficulty::hard, 0.0, [](const Solved&) { return true; });
  expect_original_passes(s);
  // Start two jobs at the same moment on the same machine.
  std::map<std::string, std::vector<std::string>> jobs_on;  // machine -> columns
  for (const auto& [name, v] : s.values) {
    auto [var, idx] = split_column(name);
    if (var == "S") jobs_on[idx[1]].push_back(name);
  }
  const auto& cols = jobs_on.begin()->second;
  ASSERT_GE(cols.size(), 2u);
  auto overlap = s.values;
  overlap[cols[1]] = overlap[cols[0]];
  expect_violation(check(s, overlap), "overlap");

  // Delaying every operation keeps the schedule feasible but lengthens it.
  auto late = s.values;
  for (auto& [name, v] : late)
    if (split_column(name).first == "S") v += 10;
  CheckResult r = check(s, late);
  EXPECT_TRUE(r.feasible);
  EXPECT_GT(r.objective, s.objective + 1e-6);
}

TEST(FamiliesGroupD, TspCheckerCatchesSubtours) {
  Solved s = solve_first("tsp", Difficulty::hard, 0.0, [](const Solved&) { return true; });
  expect_original_passes(s);
  const std::string start = data_symbol(s.gmpl, "start");
  auto next = successors(s);
  std::vector<std::string> tour = {start};
  while (tour.size() < next.size() && next[tour.back()] != start) tour.push_back(next[tour.back()]);
  ASSERT_GE(tour.size(), 6u);
  // Two closed loops with every in- and out-degree still one.
  auto split = s.values;
  const size_t cut = tour.size() / 2;
  split[arc(tour[cut - 1], tour[cut])] = 0;
  split[arc(tour.back(), tour[0])] = 0;
  split[arc(tour[cut - 1], tour[0])] = 1;
  split[arc(tour.back(), tour[cut])] = 1;
  expect_violation(check(s, split), "subtour");
}

TEST(FamiliesGroupD, CvrpCheckerCatchesOverloadAndDetachedLoop) {
  // An optimum with at least two routes, one of them with two or more customers.
  std::vector<std::vector<std::string>> routes;
  std::string depot;
  Solved s = solve_first("cvrp", Difficulty::medium, 0.0, [&](const Solved& cand) {
    depot = data_symbol(cand.gmpl, "depot");
    auto next = successors(cand);
    routes.clear();
    for (const auto& [from, to] : arcs(cand)) {
      if (from != depot) continue;
      std::vector<std::string> r;
      for (std::string cur = to; cur != depot && r.size() <= next.size(); cur = next[cur])
        r.push_back(cur);
      routes.push_back(r);
    }
    return routes.size() >= 2 &&
           std::any_of(routes.begin(), routes.end(), [](const auto& r) { return r.size() >= 2; });
  });
  expect_original_passes(s);

  // One vehicle drives all routes back to back: capacity is below the total demand.
  auto merged = s.values;
  for (size_t k = 0; k + 1 < routes.size(); ++k) {
    merged[arc(routes[k].back(), depot)] = 0;
    merged[arc(depot, routes[k + 1].front())] = 0;
    merged[arc(routes[k].back(), routes[k + 1].front())] = 1;
  }
  expect_violation(check(s, merged), "load of the route");

  // A route cut loose from the depot: its customers form a closed loop.
  const auto& loop =
      *std::find_if(routes.begin(), routes.end(), [](const auto& r) { return r.size() >= 2; });
  auto detached = s.values;
  detached[arc(depot, loop.front())] = 0;
  detached[arc(loop.back(), depot)] = 0;
  detached[arc(loop.back(), loop.front())] = 1;
  expect_violation(check(s, detached), "subtour");
}

}  // namespace
}  // namespace trex::orlib
