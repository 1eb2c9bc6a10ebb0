// Checker tests for the group C families (bin_packing, facility_location,
// p_median, cutting_stock, logical_transport): a solver's optimum passes, and a
// family-meaningful corruption of it is caught as infeasible or as a different
// objective.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <regex>
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

  CheckResult check(const Values& v) const { return instance->check(Solution(objective, v)); }
  // True when the checker rejects `v` or recomputes another objective.
  bool caught(const Values& v) const {
    CheckResult r = check(v);
    return !r.feasible || std::fabs(r.objective - objective) > 1e-6 * std::max(1.0, objective);
  }
};

Solved solve(std::string_view family, uint64_t seed, double side_rate,
             Difficulty difficulty = Difficulty::medium) {
  Rng rng(seed, {hash_string(family)});
  GenOptions options;
  options.difficulty = difficulty;
  options.side_constraint_rate = side_rate;
  Solved s;
  s.instance = find_family(family).generate(rng, options);
  LinearModel model = LinearModel::from_mathprog(s.instance->gmpl());
  SolveResult r = model.solve_glpk();
  EXPECT_EQ(r.status, SolveStatus::optimal) << s.instance->gmpl();
  s.objective = r.objective;
  s.values = Solution::from_columns(r.objective, model.column_names(), r.x).values();
  return s;
}

// Columns of variable `var` with a value above 0.5, e.g. every used y[b].
std::vector<std::string> positive(const Values& v, const std::string& var) {
  std::vector<std::string> out;
  for (const auto& [name, value] : v)
    if (name.rfind(var + "[", 0) == 0 && value > 0.5) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

// Index list inside "x[a,b]" -> {"a", "b"}.
std::vector<std::string> index_of(const std::string& column) {
  std::vector<std::string> parts;
  std::string inner = column.substr(column.find('[') + 1);
  inner.pop_back();
  size_t start = 0;
  for (size_t comma; (comma = inner.find(',', start)) != std::string::npos; start = comma + 1)
    parts.push_back(inner.substr(start, comma - start));
  parts.push_back(inner.substr(start));
  return parts;
}

// True when one of the reported violations starts with `what`.
bool violates(const CheckResult& r, const std::string& what) {
  for (const auto& v : r.violations)
    if (v.rfind(what, 0) == 0) return true;
  return false;
}

void expect_optimum_passes(const Solved& s) {
  CheckResult r = s.check(s.values);
  EXPECT_TRUE(r.feasible) << (r.violations.empty() ? "" : r.violations[0]);
  EXPECT_NEAR(r.objective, s.objective, 1e-6 * std::max(1.0, std::fabs(s.objective)));
}

TEST(GroupCBinPacking, UnplacedItemAndClosedBinAreCaught) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Solved s = solve("bin_packing", seed, 0.0);
    expect_optimum_passes(s);
    // Take one item out of its bin: it is no longer placed anywhere.
    Values unplaced = s.values;
    unplaced[positive(s.values, "x").front()] = 0;
    EXPECT_FALSE(s.check(unplaced).feasible);
    // Switch off a used bin while its items stay in it.
    Values closed = s.values;
    closed[positive(s.values, "y").back()] = 0;
    EXPECT_FALSE(s.check(closed).feasible);
  }
}

TEST(GroupCBinPacking, ConflictingItemsInOneBinAreCaught) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Solved s = solve("bin_packing", seed, 1.0);
    std::smatch m;
    const std::string gmpl = s.instance->gmpl();
    if (!std::regex_search(
            gmpl, m, std::regex(R"(Conflict1\{b in B\}: x\['(\w+)', b\] \+ x\['(\w+)', b\])")))
      continue;
    expect_optimum_passes(s);
    // Move the second item into the first one's bin.
    std::string bin_a, bin_b;
    for (const auto& col : positive(s.values, "x")) {
      auto idx = index_of(col);
      if (idx[0] == m[1]) bin_a = idx[1];
      if (idx[0] == m[2]) bin_b = idx[1];
    }
    ASSERT_NE(bin_a, bin_b);
    Values moved = s.values;
    moved["x[" + m[2].str() + "," + bin_b + "]"] = 0;
    moved["x[" + m[2].str() + "," + bin_a + "]"] = 1;
    EXPECT_TRUE(violates(s.check(moved), "conflict"));
    return;
  }
  FAIL() << "no instance with a conflict pair";
}

TEST(GroupCFacilityLocation, ClosedSiteAndUnmetDemandAreCaught) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Solved s = solve("facility_location", seed, 0.35);
    expect_optimum_passes(s);
    // Open one facility fewer: its shipments now leave a closed site.
    Values closed = s.values;
    closed[positive(s.values, "y").front()] = 0;
    EXPECT_FALSE(s.check(closed).feasible);
    // Drop one shipment: that customer's demand is no longer met.
    Values dropped = s.values;
    dropped[positive(s.values, "x").front()] = 0;
    EXPECT_FALSE(s.check(dropped).feasible);
    // A negative shipment is not allowed either.
    Values negative = s.values;
    const std::string col = positive(s.values, "x").front();
    negative[col] = -1;
    EXPECT_TRUE(s.caught(negative));
  }
}

TEST(GroupCPMedian, WrongNumberOfSitesAndClosedAssignmentAreCaught) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Solved s = solve("p_median", seed, 0.0);
    expect_optimum_passes(s);
    const auto open = positive(s.values, "y");
    // Close one chosen site: fewer than p sites, and its points hang on a closed site.
    Values fewer = s.values;
    fewer[open.front()] = 0;
    EXPECT_FALSE(s.check(fewer).feasible);
    // Reassign one point to a site that is not open.
    const auto assigned = positive(s.values, "x");
    auto idx = index_of(assigned.front());
    std::string closed_site;
    for (const auto& [name, value] : s.values)
      if (name.rfind("y[", 0) == 0 && value < 0.5) closed_site = index_of(name)[0];
    ASSERT_FALSE(closed_site.empty());
    Values moved = s.values;
    moved[assigned.front()] = 0;
    moved["x[" + idx[0] + "," + closed_site + "]"] = 1;
    EXPECT_FALSE(s.check(moved).feasible);
  }
}

TEST(GroupCPMedian, ForcedSiteIsEnforced) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Solved s = solve("p_median", seed, 1.0);
    std::smatch m;
    const std::string gmpl = s.instance->gmpl();
    if (!std::regex_search(gmpl, m, std::regex(R"(Forced: y\['(\w+)'\] = 1)"))) continue;
    expect_optimum_passes(s);
    Values v = s.values;
    v["y[" + m[1].str() + "]"] = 0;
    EXPECT_TRUE(violates(s.check(v), "forced site"));
    return;
  }
  FAIL() << "no instance with a forced site";
}

TEST(GroupCCuttingStock, MissingRollsAndFractionalCutsAreCaught) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Solved s = solve("cutting_stock", seed, 0.0);
    expect_optimum_passes(s);
    // Drop every roll cut with one used pattern: an optimal plan then falls short.
    Values fewer = s.values;
    fewer[positive(s.values, "z").front()] = 0;
    EXPECT_FALSE(s.check(fewer).feasible);
    // Half a roll is not a roll.
    Values fractional = s.values;
    fractional[positive(s.values, "z").front()] += 0.5;
    EXPECT_FALSE(s.check(fractional).feasible);
    // One extra roll stays feasible but changes the count.
    Values extra = s.values;
    extra[positive(s.values, "z").front()] += 1;
    EXPECT_TRUE(s.check(extra).feasible);
    EXPECT_TRUE(s.caught(extra));
  }
}

TEST(GroupCCuttingStock, SetupLimitIsEnforced) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    Solved s = solve("cutting_stock", seed, 1.0);
    std::smatch m;
    const std::string gmpl = s.instance->gmpl();
    if (!std::regex_search(gmpl, m, std::regex(R"(param S := (\d+);)"))) continue;
    expect_optimum_passes(s);
    // Spread the plan over one more pattern than allowed: cut one roll of each
    // unused pattern until the limit is exceeded.
    const int limit = std::stoi(m[1]);
    Values v = s.values;
    int used = static_cast<int>(positive(v, "z").size());
    for (int k = 1; used <= limit; ++k) {
      const std::string col = "z[P" + std::to_string(k) + "]";
      if (v[col] < 0.5) {
        v[col] = 1;
        ++used;
      }
    }
    EXPECT_TRUE(violates(s.check(v), "distinct patterns used"));
    return;
  }
  FAIL() << "no instance with a set-up limit";
}

TEST(GroupCLogicalTransport, ModeSwitchedOffAndUnmetDemandAreCaught) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Solved s = solve("logical_transport", seed, 0.35);
    expect_optimum_passes(s);
    // Switch a used mode off while it still carries goods (no fixed charge paid).
    Values off = s.values;
    off[positive(s.values, "u").front()] = 0;
    EXPECT_FALSE(s.check(off).feasible);
    // Remove one shipment: a destination is short.
    Values short_ = s.values;
    short_[positive(s.values, "x").front()] = 0;
    EXPECT_FALSE(s.check(short_).feasible);
  }
}

TEST(GroupCLogicalTransport, EitherOrAndIfThenAreEnforced) {
  bool either_or = false, if_then = false;
  for (uint64_t seed = 1; seed <= 20 && !(either_or && if_then); ++seed) {
    Solved s = solve("logical_transport", seed, 1.0);
    const std::string gmpl = s.instance->gmpl();
    std::smatch m;
    if (!either_or &&
        std::regex_search(gmpl, m, std::regex(R"(EitherOr1: u\['(\w+)'\] \+ u\['(\w+)'\] <= 1)"))) {
      expect_optimum_passes(s);
      Values v = s.values;
      v["u[" + m[1].str() + "]"] = 1;
      v["u[" + m[2].str() + "]"] = 1;
      EXPECT_TRUE(violates(s.check(v), "either-or"));
      either_or = true;
    }
    if (!if_then &&
        std::regex_search(gmpl, m, std::regex(R"(IfThen1: u\['(\w+)'\] <= u\['(\w+)'\])"))) {
      expect_optimum_passes(s);
      Values v = s.values;
      v["u[" + m[1].str() + "]"] = 1;
      v["u[" + m[2].str() + "]"] = 0;
      EXPECT_TRUE(violates(s.check(v), "if-then"));
      if_then = true;
    }
  }
  EXPECT_TRUE(either_or);
  EXPECT_TRUE(if_then);
}

}  // namespace
}  // namespace trex::orlib
